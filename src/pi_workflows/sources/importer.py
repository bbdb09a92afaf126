"""The import hook that loads project-local modules and hashes the exact bytes it compiles.

While one workflow file loads, an ``ImportSession`` sits on ``sys.meta_path`` (just before
the standard path finder) and serves every module found in the workflow's import roots (its
own directory, then the project root). Its loader reads each file once, hashes those bytes,
checks them against the expected map when verifying, and compiles the same bytes; no
``.pyc`` is read or written. After the load, every module the session created is removed
from ``sys.modules`` and any module it hid is restored, so nothing leaks into the next load.

Runs in whichever process loads workflows (resolver, runner, tests); never in the server.
Loads are serialised by a process-wide lock because ``sys.meta_path`` and ``sys.modules``
are global.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.abc import Loader, MetaPathFinder
from pathlib import Path
from types import CodeType, ModuleType
from typing import Final

from pi_workflows.sources.errors import WorkflowSourceChanged

LOAD_LOCK: Final = threading.RLock()
"""Held for the whole of one workflow load."""


def sha256_hex(data: bytes) -> str:
    """The lowercase sha256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def compile_source(data: bytes, path: Path) -> CodeType:
    """Compile exactly ``data`` as the module at ``path`` (raises ``SyntaxError``)."""
    return compile(data, str(path), "exec", dont_inherit=True)


class _HashingLoader(Loader):
    """Executes one project-local module from the bytes it read and hashed once."""

    def __init__(self, session: ImportSession, path: Path) -> None:
        self._session = session
        self._path = path

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        data = self._path.read_bytes()
        self._session.admit(self._path, sha256_hex(data))  # refuses changed code before exec
        code = compile_source(data, self._path)
        exec(code, module.__dict__)  # noqa: S102 - executing the workflow's own helper is the job


class ImportSession(MetaPathFinder):
    """Serves and records the project-local modules of one workflow load.

    ``mounted`` maps each served file (absolute path) to the sha256 of the bytes compiled.
    With ``expected`` set (verification), a file whose hash differs, or which is not in
    ``expected``, is refused with ``WorkflowSourceChanged`` before it executes; the first
    refusal is kept in ``violation`` even if workflow code swallows the exception.
    """

    def __init__(self, roots: tuple[Path, ...], expected: Mapping[str, str] | None) -> None:
        self.roots = roots
        self.expected = expected
        self.mounted: dict[str, str] = {}
        self.created: list[str] = []
        self.violation: WorkflowSourceChanged | None = None
        self._packages: set[str] = set()

    def find_spec(
        self,
        fullname: str,
        path: object = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        parent, _, leaf = fullname.rpartition(".")
        if not leaf.isidentifier():
            return None
        if not parent:
            search = list(self.roots)
        elif parent in self._packages and isinstance(path, list | tuple):
            search = [Path(entry) for entry in path if isinstance(entry, str)]
        else:
            return None
        for base in search:
            package_init = base / leaf / "__init__.py"
            module_file = base / f"{leaf}.py"
            if package_init.is_file():
                return self._spec(fullname, package_init, package=True)
            if module_file.is_file():
                return self._spec(fullname, module_file, package=False)
        return None

    def _spec(self, fullname: str, file: Path, *, package: bool) -> importlib.machinery.ModuleSpec:
        location = file.resolve()
        spec = importlib.util.spec_from_file_location(
            fullname,
            location,
            loader=_HashingLoader(self, location),
            submodule_search_locations=[str(location.parent)] if package else None,
        )
        if spec is None:  # pragma: no cover - only for unsupported suffixes
            raise ImportError(f"cannot build an import spec for {location}", name=fullname)
        self.created.append(fullname)
        if package:
            self._packages.add(fullname)
        return spec

    def admit(self, path: Path, digest: str) -> None:
        """Record ``path`` as mounted with ``digest``, or refuse it if verification says so."""
        key = str(path)
        problem: WorkflowSourceChanged | None = None
        if key in self.mounted and self.mounted[key] != digest:
            problem = WorkflowSourceChanged(key, "changed", self.mounted[key], digest)
        elif self.expected is not None:
            if key not in self.expected:
                problem = WorkflowSourceChanged(key, "added", None, digest)
            elif self.expected[key] != digest:
                problem = WorkflowSourceChanged(key, "changed", self.expected[key], digest)
        if problem is not None:
            if self.violation is None:
                self.violation = problem
            raise problem
        self.mounted[key] = digest

    def provided_names(self) -> set[str]:
        """Top-level module names this session could serve from its roots."""
        names: set[str] = set()
        for root in self.roots:
            if not root.is_dir():
                continue
            for entry in root.iterdir():
                if entry.suffix == ".py" and entry.stem.isidentifier() and entry.is_file():
                    names.add(entry.stem)
                elif entry.name.isidentifier() and (entry / "__init__.py").is_file():
                    names.add(entry.name)
        return names


def _inside(file: str, roots: tuple[Path, ...]) -> bool:
    resolved = Path(file).resolve()
    return any(resolved.is_relative_to(root) for root in roots)


def _hide_served(session: ImportSession) -> dict[str, ModuleType]:
    """Remove from ``sys.modules`` the modules the session's roots would serve (same
    top-level name, file inside a root); return them to restore after the load.

    ``sys.modules`` is walked only when one of the names the roots provide is imported:
    a submodule is never imported without its package, so when none of them is in
    ``sys.modules`` there is nothing to hide. The walk is not free in a runner forked from
    the template: every entry it visits is a page copied on write (an eighth of a runner's
    start-up faults, measured)."""
    provided = session.provided_names()
    hidden: dict[str, ModuleType] = {}
    if not any(name in sys.modules for name in provided):
        return hidden
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] not in provided:
            continue
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and _inside(file, session.roots):
            hidden[name] = module
            del sys.modules[name]
    return hidden


@contextmanager
def installed(session: ImportSession, module_names: tuple[str, ...] = ()) -> Iterator[None]:
    """Install ``session`` for the duration of one load, then purge what it created.

    Before the load, modules already in ``sys.modules`` that the session's roots would serve
    (same top-level name, file inside a root) are hidden so the load imports and hashes them
    afresh; afterwards they are restored. ``module_names`` are extra names (the workflow
    module itself) to remove from ``sys.modules`` at the end.
    """
    with LOAD_LOCK:
        hidden = _hide_served(session)
        position = len(sys.meta_path)
        for index, finder in enumerate(sys.meta_path):
            if finder is importlib.machinery.PathFinder:
                position = index
                break
        sys.meta_path.insert(position, session)
        try:
            yield
        finally:
            sys.meta_path.remove(session)
            for name in (*session.created, *module_names):
                sys.modules.pop(name, None)
            sys.modules.update(hidden)
