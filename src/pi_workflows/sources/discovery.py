"""Where workflows live and how a name, ``builtin:NAME`` or a path becomes a ``WorkflowRef``.

Search order for a name: ``<project>/.pi/workflows/NAME.workflow.py``, then
``<user dir>/NAME.workflow.py`` (default ``~/.pi/agent/workflows``); the first wins and the
hidden file is listed in ``shadows``. Built-ins are addressed as ``builtin:NAME`` and live in
this package's ``builtins`` directory. A spec containing a path separator or ending in
``.py`` is a direct path. Only reads directory listings; never imports a workflow.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

from pi_workflows.authoring import NAME_PATTERN
from pi_workflows.sources.errors import DuplicateWorkflowError, WorkflowNotFoundError

WORKFLOW_SUFFIX: Final = ".workflow.py"
ATTRIBUTE_SEPARATOR: Final = "::"
"""``/abs/path/helpers.py::review``: the Workflow a helper module binds to ``review``."""
BUILTIN_PREFIX: Final = "builtin:"
PROJECT_SUBDIR: Final = Path(".pi") / "workflows"
BUILTINS_DIR: Final = Path(__file__).resolve().parent / "builtins"


def default_user_dir() -> Path:
    """The user's workflow directory: ``~/.pi/agent/workflows``."""
    return Path.home() / ".pi" / "agent" / "workflows"


class WorkflowOrigin(StrEnum):
    """Where a workflow file was found."""

    PROJECT = "project"  # <project>/.pi/workflows
    USER = "user"  # ~/.pi/agent/workflows (or the given user dir)
    BUILTIN = "builtin"  # shipped inside pi_workflows, addressed as builtin:NAME
    PATH = "path"  # named directly by its path


@dataclass(frozen=True)
class WorkflowRef:
    """A workflow file that can be loaded.

    ``name`` is the command name (the file stem, without ``.workflow.py``); the file must
    define a ``Workflow`` with that name. ``path`` is absolute, in a resolved directory (a
    symlinked file keeps its own name). ``project_dir`` (if any) is importable from the
    workflow, as is the file's own directory.
    """

    name: str
    origin: WorkflowOrigin
    path: Path
    project_dir: Path | None = None
    shadows: tuple[Path, ...] = ()
    # The module-level name of the Workflow: ``workflow`` in a workflow file; another name
    # for a Workflow a helper module defines (a parent's ``subworkflow(obj)`` child).
    attribute: str = "workflow"

    @property
    def spec(self) -> str:
        """What ``resolve`` takes to find this workflow again."""
        if self.attribute != "workflow":
            return f"{self.path}{ATTRIBUTE_SEPARATOR}{self.attribute}"
        if self.origin is WorkflowOrigin.BUILTIN:
            return f"{BUILTIN_PREFIX}{self.name}"
        if self.origin is WorkflowOrigin.PATH:
            return str(self.path)
        return self.name

    @property
    def import_roots(self) -> tuple[Path, ...]:
        """Directories whose modules the workflow may import, in lookup order."""
        if self.origin is WorkflowOrigin.BUILTIN:
            return (self.path.parent,)
        roots = [self.path.parent]
        if self.project_dir is not None and self.project_dir not in roots:
            roots.append(self.project_dir)
        return tuple(roots)


def workflow_name(path: Path) -> str | None:
    """The command name of a workflow file, or ``None`` if it is not ``NAME.workflow.py``
    with a valid name."""
    filename = path.name
    if not filename.endswith(WORKFLOW_SUFFIX):
        return None
    name = filename[: -len(WORKFLOW_SUFFIX)]
    return name if NAME_PATTERN.match(name) else None


def _scan(directory: Path | None) -> dict[str, Path]:
    """``name -> path`` of the workflow files directly in ``directory``.

    Files whose stem is not a valid name are skipped. Raises ``DuplicateWorkflowError`` for
    names that differ only by case.
    """
    if directory is None or not directory.is_dir():
        return {}
    found: dict[str, Path] = {}
    by_fold: dict[str, list[Path]] = {}
    for entry in sorted(directory.iterdir()):
        name = workflow_name(entry)
        if name is None or not entry.is_file():
            continue
        found[name] = entry  # the directory is absolute; the file name itself is kept
        by_fold.setdefault(name.casefold(), []).append(entry)
    for paths in by_fold.values():
        if len(paths) > 1:
            raise DuplicateWorkflowError(workflow_name(paths[0]) or "", paths)
    return found


def _absolute(path: Path | None) -> Path | None:
    return path.expanduser().resolve() if path is not None else None


def _user(user_dir: Path | None) -> Path:
    return (user_dir if user_dir is not None else default_user_dir()).expanduser().resolve()


def builtin_names() -> list[str]:
    """The names of the shipped built-in workflows, sorted."""
    return sorted(_scan(BUILTINS_DIR))


def discover(project_dir: Path | None, user_dir: Path | None = None) -> list[WorkflowRef]:
    """Every workflow available to ``project_dir``: project ones, then user ones not hidden
    by a project one, then built-ins. Each group is sorted by name.

    ``user_dir`` defaults to ``default_user_dir()``.
    """
    project = _absolute(project_dir)
    user = _user(user_dir)
    project_files = _scan(project / PROJECT_SUBDIR if project is not None else None)
    user_files = _scan(user)
    refs: list[WorkflowRef] = []
    for name, path in sorted(project_files.items()):
        hidden = (user_files[name],) if name in user_files else ()
        refs.append(WorkflowRef(name, WorkflowOrigin.PROJECT, path, project, hidden))
    for name, path in sorted(user_files.items()):
        if name not in project_files:
            refs.append(WorkflowRef(name, WorkflowOrigin.USER, path, project))
    for name, path in sorted(_scan(BUILTINS_DIR).items()):
        refs.append(WorkflowRef(name, WorkflowOrigin.BUILTIN, path))
    return refs


def is_path_spec(spec: str) -> bool:
    """Whether ``spec`` names a file (a ``.py`` name or anything with a path separator)."""
    separators = [sep for sep in (os.sep, os.altsep, "/") if sep]
    return spec.endswith(".py") or any(sep in spec for sep in separators)


def resolve(spec: str, project_dir: Path | None, user_dir: Path | None = None) -> WorkflowRef:
    """Find the workflow ``spec`` names: a name, ``builtin:NAME`` or a path to a
    ``NAME.workflow.py`` file (relative paths are taken from ``project_dir``, else the
    current directory). Raises ``WorkflowNotFoundError`` naming where it looked.
    """
    project = _absolute(project_dir)
    if ATTRIBUTE_SEPARATOR in spec:
        return _resolve_attribute(spec, project)
    if spec.startswith(BUILTIN_PREFIX):
        name = spec[len(BUILTIN_PREFIX) :]
        builtins = _scan(BUILTINS_DIR)
        if name not in builtins:
            available = ", ".join(f"{BUILTIN_PREFIX}{n}" for n in sorted(builtins)) or "none"
            raise WorkflowNotFoundError(spec, ["built-ins"], f"available built-ins: {available}")
        return WorkflowRef(name, WorkflowOrigin.BUILTIN, builtins[name])
    if is_path_spec(spec):
        return _resolve_path(spec, project)
    if not NAME_PATTERN.match(spec):
        raise WorkflowNotFoundError(
            spec,
            [],
            "a workflow name is 1-64 letters, digits, '_' or '-' starting with a letter",
        )
    user = _user(user_dir)
    project_workflows = project / PROJECT_SUBDIR if project is not None else None
    project_files = _scan(project_workflows)
    user_files = _scan(user)
    if spec in project_files:
        hidden = (user_files[spec],) if spec in user_files else ()
        return WorkflowRef(spec, WorkflowOrigin.PROJECT, project_files[spec], project, hidden)
    if spec in user_files:
        return WorkflowRef(spec, WorkflowOrigin.USER, user_files[spec], project)
    searched = [str(d) for d in (project_workflows, user) if d is not None]
    hint = (
        f"the built-in is addressed as {BUILTIN_PREFIX}{spec}"
        if spec in _scan(BUILTINS_DIR)
        else ""
    )
    raise WorkflowNotFoundError(spec, searched, hint)


def _resolve_attribute(spec: str, project: Path | None) -> WorkflowRef:
    """``PATH::NAME``: the Workflow bound to ``NAME`` at the top level of the Python file
    ``PATH`` (absolute), a project-local helper module."""
    file, _, attribute = spec.rpartition(ATTRIBUTE_SEPARATOR)
    path = Path(file)
    if not path.is_absolute() or not file.endswith(".py") or not attribute.isidentifier():
        raise WorkflowNotFoundError(
            spec, [file], "a module's workflow is named /absolute/path/module.py::NAME"
        )
    if not path.is_file():
        raise WorkflowNotFoundError(spec, [file], "the file does not exist")
    return WorkflowRef(
        attribute, WorkflowOrigin.PATH, path.parent.resolve() / path.name, project,
        attribute=attribute,
    )  # fmt: skip


def _resolve_path(spec: str, project: Path | None) -> WorkflowRef:
    raw = Path(spec).expanduser()
    if not raw.is_absolute():
        raw = (project if project is not None else Path.cwd()) / raw
    path = raw.parent.resolve() / raw.name  # a symlinked file keeps the name it was given
    name = workflow_name(path)
    if name is None:
        raise WorkflowNotFoundError(
            spec,
            [str(path)],
            "a workflow file is named NAME.workflow.py, with NAME 1-64 letters, digits, "
            "'_' or '-' starting with a letter",
        )
    if not path.is_file():
        raise WorkflowNotFoundError(spec, [str(path)], "the file does not exist")
    return WorkflowRef(name, WorkflowOrigin.PATH, path, project)
