"""How a workflow argument and its project are resolved from the caller's working directory.

Owns the one rule both the CLI and the Python clients use before `run.start`,
`workflows.list` and `workflows.show`: a workflow given as a path (it has a `/` or ends in
`.py`) is made absolute against the caller's current directory, because the server runs
elsewhere; without an explicit project, the project is the nearest directory from the
current one upwards that contains `.pi/workflows` (as git finds `.git`). Runs in the
caller's process; it only looks at directories, never creates, opens or connects to
anything.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["PROJECT_MARKER", "find_project", "resolve_project", "workflow_spec"]

PROJECT_MARKER: Final = Path(".pi") / "workflows"
"""The directory that makes its grandparent a project (its workflows live in it)."""


def _absolute(path: Path | str, cwd: Path | str | None) -> Path:
    """`path` with `~` expanded, made absolute against `cwd` (default: the current
    directory) and normalised (`..` removed, symlinks kept)."""
    expanded = Path(path).expanduser()
    if not expanded.is_absolute():
        expanded = Path(cwd if cwd is not None else Path.cwd()) / expanded
    return Path(os.path.abspath(expanded))


def find_project(start: Path | str | None = None) -> Path | None:
    """The nearest directory from `start` (default: the current directory) upwards that
    contains `.pi/workflows`, or None when there is none up to the root."""
    here = _absolute(start if start is not None else ".", None)
    for directory in (here, *here.parents):
        if (directory / PROJECT_MARKER).is_dir():
            return directory
    return None


def resolve_project(project: Path | str | None, *, cwd: Path | str | None = None) -> Path | None:
    """The project directory to send: `project` made absolute against `cwd` (default: the
    current directory); without one, `find_project(cwd)`."""
    if project is not None:
        return _absolute(project, cwd)
    return find_project(cwd)


def workflow_spec(spec: str, *, cwd: Path | str | None = None) -> str:
    """A workflow argument as the server should get it: a path (it contains a `/`, or ends
    in `.py`) made absolute against `cwd` (default: the current directory); a name or
    `builtin:NAME` unchanged."""
    if spec.startswith("builtin:"):
        return spec
    separators = [os.sep] + ([os.altsep] if os.altsep else [])
    if spec.endswith(".py") or any(separator in spec for separator in separators):
        return str(_absolute(spec, cwd))
    return spec
