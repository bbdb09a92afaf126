"""Load a workflow file, record its sources, and verify them again before a resume.

``load(ref)`` imports the file under an isolated module name with the ``ImportSession``
hook, requires exactly one module-level ``workflow`` that is a ``Workflow`` named after the
file, and returns a ``LoadedWorkflow`` with the source identity, the mounted-source map,
the definition snapshot and its digest. ``verify_and_load(ref, identity, mounted)`` first
re-hashes the root and every recorded mounted file, then loads with the recorded map as the
only acceptable one, so changed code is refused before it executes; afterwards it compares
the complete map. Both run in the resolver or runner child, never in the server.
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import itertools
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Final

from pi_workflows.authoring import (
    FanOutNode,
    JsonObject,
    SubworkflowNode,
    Workflow,
    WorkflowDefinitionError,
    WorkflowLike,
)
from pi_workflows.engine import definition_digest, snapshot
from pi_workflows.sources.discovery import (
    ATTRIBUTE_SEPARATOR,
    BUILTIN_PREFIX,
    WORKFLOW_SUFFIX,
    WorkflowOrigin,
    WorkflowRef,
    is_path_spec,
    resolve,
)
from pi_workflows.sources.errors import (
    LoadProblem,
    WorkflowLoadError,
    WorkflowNotFoundError,
    WorkflowSourceChanged,
)
from pi_workflows.sources.identity import SourceIdentity, SourceKind
from pi_workflows.sources.importer import ImportSession, compile_source, installed, sha256_hex

_MODULE_PREFIX: Final = "_pi_workflows_source_"
_counter = itertools.count(1)


@dataclass(frozen=True)
class LoadedWorkflow:
    """A loaded, validated workflow and everything needed to run or re-check it.

    ``mounted`` maps every project-local module file the workflow imported (absolute path)
    to the sha256 of the bytes compiled; the workflow file itself is in ``identity``.
    """

    ref: WorkflowRef
    workflow: Workflow
    identity: SourceIdentity
    mounted: Mapping[str, str]
    snapshot: JsonObject
    digest: str
    # Node id -> the spec a ``subworkflow``/``fan_out`` node's child runs are started from
    # (``resolve`` takes it): a name as given, or ``PATH::NAME`` for a Workflow object.
    child_specs: Mapping[str, str] = dataclasses.field(default_factory=dict)


def _kind_and_locator(ref: WorkflowRef) -> tuple[SourceKind, str]:
    if ref.origin is WorkflowOrigin.BUILTIN:
        return SourceKind.BUILTIN, f"{BUILTIN_PREFIX}{ref.name}"
    if ref.attribute != "workflow":
        return SourceKind.FILE, ref.spec  # PATH::NAME: the file and the name bound in it
    return SourceKind.FILE, str(ref.path)


def identity_of(ref: WorkflowRef, data: bytes) -> SourceIdentity:
    """The identity of ``ref`` whose file holds ``data``."""
    kind, locator = _kind_and_locator(ref)
    return SourceIdentity(kind, locator, sha256_hex(data))


def load(ref: WorkflowRef) -> LoadedWorkflow:
    """Import ``ref``'s file once and return the validated workflow with its identity.

    Raises ``WorkflowLoadError`` (with file and line) if the file or a helper does not
    compile, raises while it runs, or does not define exactly one valid ``workflow``.
    """
    data = _read(ref.path)
    return _load(ref, data, expected=None)


def verify_and_load(
    ref: WorkflowRef, identity: SourceIdentity, mounted: Mapping[str, str]
) -> LoadedWorkflow:
    """Load ``ref`` only if its sources are exactly those recorded in ``identity`` and
    ``mounted``; otherwise raise ``WorkflowSourceChanged`` naming the file.

    Before importing anything it checks the root hash and every mounted hash. During the
    load a module whose bytes differ, or that was not recorded, is refused before it runs.
    After the load the complete mounted map must equal the recorded one.
    """
    if (identity.kind, identity.locator) != _kind_and_locator(ref):
        raise WorkflowSourceChanged(identity.locator, "moved", identity.locator, str(ref.path))
    try:
        data = ref.path.read_bytes()
    except FileNotFoundError:
        raise WorkflowSourceChanged(str(ref.path), "missing", identity.sha256) from None
    actual = sha256_hex(data)
    if actual != identity.sha256:
        raise WorkflowSourceChanged(str(ref.path), "changed", identity.sha256, actual)
    for file, digest in sorted(mounted.items()):
        try:
            current = sha256_hex(Path(file).read_bytes())
        except FileNotFoundError:
            raise WorkflowSourceChanged(file, "missing", digest) from None
        if current != digest:
            raise WorkflowSourceChanged(file, "changed", digest, current)
    loaded = _load(ref, data, expected=dict(mounted))
    for file in sorted(set(mounted) - set(loaded.mounted)):
        raise WorkflowSourceChanged(file, "dropped", mounted[file])
    return loaded


def ref_for_identity(identity: SourceIdentity, project_dir: Path | None) -> WorkflowRef:
    """Rebuild the ``WorkflowRef`` a recorded identity points at, for a resume.

    A file identity becomes a direct-path ref (its directory and ``project_dir`` are the
    import roots, as when the run started); a built-in identity becomes its built-in ref.
    """
    if identity.kind is SourceKind.BUILTIN or ATTRIBUTE_SEPARATOR in identity.locator:
        return resolve(identity.locator, project_dir)
    path = Path(identity.locator)
    name = path.name.removesuffix(".workflow.py")
    return WorkflowRef(name, WorkflowOrigin.PATH, path, project_dir)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise WorkflowLoadError(str(path), None, f"cannot read the file: {exc.strerror}") from exc


def _load(ref: WorkflowRef, data: bytes, *, expected: dict[str, str] | None) -> LoadedWorkflow:
    identity = identity_of(ref, data)
    session = ImportSession(tuple(p.resolve() for p in ref.import_roots), expected)
    module_name = f"{_MODULE_PREFIX}{next(_counter)}_{ref.name.replace('-', '_')}"
    with installed(session, (module_name,)):
        module = _execute(ref, data, module_name, session)
        if session.violation is not None:
            raise session.violation
        workflow = _the_workflow(ref, module)
        children = _child_specs(ref, workflow)
    definition = snapshot(workflow)
    return LoadedWorkflow(
        ref=ref,
        workflow=workflow,
        identity=identity,
        mounted=dict(sorted(session.mounted.items())),
        snapshot=definition,
        digest=definition_digest(definition),
        child_specs=children,
    )


def _child_specs(ref: WorkflowRef, workflow: Workflow) -> dict[str, str]:
    """The spec each composition node starts its children from, checked now (a relative
    path is made absolute from the parent file's directory): a name that resolves to no
    workflow, or a Workflow object bound to no module-level name of a
    project-local file, is a load error naming the node. Runs while the workflow's modules
    are still importable (inside ``installed``)."""
    specs: dict[str, str] = {}
    for node_id, node in workflow.nodes.items():
        if not isinstance(node, SubworkflowNode | FanOutNode):
            continue
        where = f"node {node_id!r} ({node.kind.value})"
        target = node.workflow
        if isinstance(target, str):
            if is_path_spec(target) and not Path(target).is_absolute():
                # A relative path is the parent file's neighbour, wherever the run starts.
                target = str((ref.path.parent / target).resolve())
            try:
                resolve(target, ref.project_dir)
            except WorkflowNotFoundError as exc:
                raise WorkflowLoadError(str(ref.path), None, f"{where}: {exc}") from None
            specs[node_id] = target
            continue
        specs[node_id] = _object_spec(ref, where, target)
    return specs


def _object_spec(ref: WorkflowRef, where: str, target: WorkflowLike) -> str:
    file = target.defined_in
    if file is None:
        raise WorkflowLoadError(
            str(ref.path), None,
            f"{where}: its Workflow {target.name!r} was not built at the top level of a file",
        )  # fmt: skip
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) != file:
            continue
        for name, value in vars(module).items():
            if value is target:
                if file.endswith(WORKFLOW_SUFFIX) and name == "workflow":
                    return file
                return f"{file}{ATTRIBUTE_SEPARATOR}{name}"
    raise WorkflowLoadError(
        str(ref.path), None,
        f"{where}: its Workflow {target.name!r} is not bound to a module-level name of"
        f" {file}; bind it (name = Workflow(...)) and import it from there",
    )  # fmt: skip


def _execute(ref: WorkflowRef, data: bytes, module_name: str, session: ImportSession) -> ModuleType:
    path = ref.path
    try:
        code = compile_source(data, path)
    except SyntaxError as exc:
        raise _syntax_error(exc, path) from exc
    module = ModuleType(module_name)
    module.__file__ = str(path)
    module.__spec__ = importlib.machinery.ModuleSpec(module_name, None, origin=str(path))
    sys.modules[module_name] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - executing the workflow file is the job
    except WorkflowSourceChanged:
        raise
    except SyntaxError as exc:  # a helper module did not compile
        if session.violation is not None:
            raise session.violation from None
        raise _syntax_error(exc, path) from exc
    except (Exception, SystemExit) as exc:
        if session.violation is not None:
            raise session.violation from None
        file, line = _blame(exc, path, session)
        if isinstance(exc, WorkflowDefinitionError):
            problems = _definition_problems(exc, path, (file, line))
            first = problems[0]
            raise WorkflowLoadError(
                first.file, first.line, first.message, problems, root=str(path)
            ) from exc
        problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise WorkflowLoadError(file, line, problem) from exc
    return module


def _definition_problems(
    exc: WorkflowDefinitionError, path: Path, blamed: tuple[str, int | None]
) -> list[LoadProblem]:
    """Every problem the graph check found, each at the line of the node or edge it
    concerns (where its helper was called), else at ``blamed`` (the ``Workflow(...)`` call
    as the traceback shows it), in file order: the workflow file's own first."""
    found = [
        LoadProblem(
            problem.file or blamed[0],
            problem.line if problem.file else blamed[1],
            str(problem),  # already names the workflow and the node
        )
        for problem in exc.problems
    ]
    root = str(path)
    return sorted(found, key=lambda p: (p.file != root, p.file, p.line or 0))


def _syntax_error(exc: SyntaxError, path: Path) -> WorkflowLoadError:
    file = exc.filename or str(path)
    return WorkflowLoadError(file, exc.lineno, f"syntax error: {exc.msg}")


def _blame(exc: BaseException, path: Path, session: ImportSession) -> tuple[str, int | None]:
    """The innermost traceback frame in the workflow file or a mounted helper."""
    local = {str(path), *session.mounted}
    blamed: tuple[str, int | None] = (str(path), None)
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename in local:
            blamed = (frame.filename, frame.lineno)
    return blamed


def _the_workflow(ref: WorkflowRef, module: ModuleType) -> Workflow:
    file = str(ref.path)
    if ref.attribute != "workflow":  # a helper module's Workflow, started as a child run
        named = getattr(module, ref.attribute, None)
        if not isinstance(named, Workflow):
            raise WorkflowLoadError(
                file, None, f"`{ref.attribute}` is not a Workflow defined at its top level"
            )
        return named
    found = getattr(module, "workflow", None)
    if found is None:
        raise WorkflowLoadError(
            file, None, "defines no module-level `workflow`; add `workflow = Workflow(...)`"
        )
    if not isinstance(found, Workflow):
        raise WorkflowLoadError(
            file,
            None,
            f"the module-level `workflow` is a {type(found).__name__}, not a Workflow",
        )
    # Workflows imported from other modules (a subworkflow's or fan_out's child) are not
    # this file's own: only a second Workflow built here is ambiguous.
    own = Path(file).resolve()
    others = sorted(
        name
        for name, value in vars(module).items()
        if isinstance(value, Workflow)
        and value is not found
        and (value.defined_in is None or Path(value.defined_in).resolve() == own)
    )
    if others:
        raise WorkflowLoadError(
            file,
            None,
            f"defines more than one Workflow (`workflow` and {', '.join(others)}); a workflow "
            "file defines exactly one",
        )
    if found.name != ref.name:
        raise WorkflowLoadError(
            file,
            None,
            f"defines Workflow {found.name!r} but the file is named "
            f"{ref.name}.workflow.py; the names must match",
        )
    return found
