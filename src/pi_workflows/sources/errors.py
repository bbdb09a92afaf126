"""Errors of workflow discovery, loading and source verification.

Each error has a stable ``code`` for the wire (the resolver and runner report it to the
server) and structured fields; ``str(error)`` is one line that names the file or name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class WorkflowSourceError(Exception):
    """Base class: something is wrong with finding, loading or verifying a workflow source."""

    code = "workflowSourceError"


class WorkflowNotFoundError(WorkflowSourceError, LookupError):
    """No workflow answers to ``spec`` (a name, ``builtin:NAME`` or a path).

    ``searched`` lists where it looked, in order, so the message can say so.
    """

    code = "workflowNotFound"

    def __init__(self, spec: str, searched: Sequence[str], hint: str = "") -> None:
        self.spec = spec
        self.searched = tuple(searched)
        where = "; ".join(self.searched) if self.searched else "nowhere"
        message = f"no workflow {spec!r} (searched: {where})"
        super().__init__(f"{message}; {hint}" if hint else message)


class DuplicateWorkflowError(WorkflowSourceError, ValueError):
    """Two files in one workflow directory give the same command name.

    Names are compared case-insensitively (``Deploy.workflow.py`` and ``deploy.workflow.py``
    would be one file on a case-insensitive disk), so which one runs would depend on the
    machine. Different directories never clash: the project directory wins over the user
    directory, and the hidden file is listed in ``WorkflowRef.shadows``.
    """

    code = "duplicateWorkflow"

    def __init__(self, name: str, paths: Sequence[Path]) -> None:
        self.name = name
        self.paths = tuple(paths)
        listed = ", ".join(str(p) for p in self.paths)
        super().__init__(f"workflow name {name!r} is defined by more than one file: {listed}")


@dataclass(frozen=True)
class LoadProblem:
    """One problem of a workflow file: where it is (``line`` None when no line applies) and
    what it is (one line, naming the workflow and node when it concerns one)."""

    file: str
    line: int | None
    message: str

    def to_json(self) -> dict[str, Any]:
        """``{file, line, message}``."""
        return {"file": self.file, "line": self.line, "message": self.message}


class WorkflowLoadError(WorkflowSourceError):
    """Loading a workflow file failed: it does not compile, raises while it runs, or does not
    define exactly one valid module-level ``workflow``.

    ``file`` and ``line`` point at the problem (``line`` is ``None`` when no line applies);
    ``problem`` is the description. ``problems`` lists every problem found (a workflow whose
    graph check found several has them all, in file order; otherwise the one), the first
    being ``file``, ``line`` and ``problem``; ``str(error)`` is the first one's line and,
    when there are more, how many and the command that lists them. The original exception,
    if any, is ``__cause__``. Distinct from ``WorkflowSourceChanged``: the code loaded but
    is wrong, not changed.
    """

    code = "workflowLoadFailed"

    def __init__(
        self,
        file: str,
        line: int | None,
        problem: str,
        problems: Sequence[LoadProblem] = (),
        *,
        root: str | None = None,
    ) -> None:
        self.file = file
        self.line = line
        self.problem = problem
        self.problems = tuple(problems) or (LoadProblem(file, line, problem),)
        where = f"{file}:{line}" if line is not None else file
        more = len(self.problems) - 1
        if more:
            plural = "s" if more > 1 else ""
            listed = f"pi-workflows workflows check {root or file}"
            super().__init__(f"{where}: {problem} (and {more} more problem{plural}: {listed})")
        else:
            super().__init__(f"{where}: {problem}")


class WorkflowSourceChanged(WorkflowSourceError):  # noqa: N818 - name fixed by the design
    """A workflow source differs from the identity recorded when the run started.

    Raised by ``verify_and_load`` before the changed file is executed. ``file`` is the
    changed file (the workflow file or a mounted helper); ``reason`` is ``"changed"``,
    ``"missing"`` (the file is gone), ``"added"`` (a project-local module the run never
    imported before) or ``"dropped"`` (a recorded module no longer imported). The server
    parks the run with ``workflowSourceChanged``.
    """

    code = "workflowSourceChanged"

    def __init__(
        self, file: str, reason: str, expected: str | None = None, actual: str | None = None
    ) -> None:
        self.file = file
        self.reason = reason
        self.expected = expected
        self.actual = actual
        detail = {
            "changed": "its contents changed since the run started",
            "missing": "the file no longer exists",
            "added": "it is imported now but was not when the run started",
            "dropped": "it was imported when the run started but is not any more",
            "moved": "the run started from a different file",
        }.get(reason, reason)
        super().__init__(f"workflow source changed: {file}: {detail}")
