"""What the resolver child answers: a workflow's description for ``run.start``, or the list.

Runs in the resolver child; never opens the database. ``answer(request)`` takes the one
request frame (``{"op": "describe", "workflow", "projectDir", "input"}`` or ``{"op":
"list", "projectDir", "check"?}``, plain JSON; ``check`` loads each listed workflow and
reports its load error) and returns the one answer frame: ``{"ok": true, ...}``
or ``{"ok": false, "code", "message", "problems"?, "problemCount"?}`` with a stable code
(``workflowNotFound``, ``workflowLoadFailed``, ``workflowInvalid``, ``inputInvalid``,
``badRequest``) and one line naming the file and line, or the workflow and node; a file that
does not load also lists its problems, ``[{file, line, message}]`` (every problem of an
invalid graph, at most ``MAX_PROBLEMS``, and how many there are). The user workflow
directory is the default one (``~/.pi/agent/workflows``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from pi_workflows.authoring import WorkflowDefinitionError
from pi_workflows.protocol import NotJsonError, fingerprint
from pi_workflows.runner.errors import one_line
from pi_workflows.sources import (
    PROJECT_SUBDIR,
    WorkflowLoadError,
    WorkflowNotFoundError,
    WorkflowOrigin,
    WorkflowRef,
    WorkflowSourceError,
    default_user_dir,
    discover,
    load,
    resolve,
    summary_line,
)

MAX_PROBLEMS: Final = 50
"""Most problems of one file an answer lists (the first, in file order); the server keeps
the same bound."""


class _RefusedError(Exception):
    """Internal: the request fails with ``code``, a one-line ``message`` and, for a file
    that does not load, its ``problems``."""

    def __init__(self, code: str, message: str, problems: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.code = code
        self.message = one_line(message)
        self.problems = problems


def refusal(
    code: str, message: str, problems: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A failure answer."""
    answer: dict[str, Any] = {"ok": False, "code": code, "message": one_line(message)}
    if problems is not None:
        answer["problems"] = [
            {**problem, "message": one_line(str(problem["message"]))}
            for problem in problems[:MAX_PROBLEMS]
        ]
        answer["problemCount"] = len(problems)
    return answer


def _project_dir(request: dict[str, Any]) -> Path | None:
    raw = request.get("projectDir")
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw:
        raise _RefusedError("badRequest", "projectDir must be a non-empty string or null")
    return Path(raw).expanduser().resolve()


def _source_error(exc: WorkflowSourceError) -> _RefusedError:
    if isinstance(exc, WorkflowNotFoundError):
        return _RefusedError("workflowNotFound", str(exc))
    if not isinstance(exc, WorkflowLoadError):
        return _RefusedError("workflowLoadFailed", str(exc))
    problems = [problem.to_json() for problem in exc.problems]
    if isinstance(exc.__cause__, WorkflowDefinitionError):
        return _RefusedError("workflowInvalid", str(exc), problems)
    return _RefusedError("workflowLoadFailed", str(exc), problems)


def _describe(request: dict[str, Any]) -> dict[str, Any]:
    spec = request.get("workflow")
    if not isinstance(spec, str) or not spec:
        raise _RefusedError("badRequest", "workflow must be a non-empty string")
    project = _project_dir(request)
    value = request.get("input")
    try:
        input_hash = fingerprint(value)
    except NotJsonError as exc:
        raise _RefusedError("inputInvalid", f"the input is not JSON: {exc}") from None
    try:
        ref = resolve(spec, project)
        loaded = load(ref)
    except WorkflowSourceError as exc:
        raise _source_error(exc) from None
    identity = loaded.identity
    return {
        "ok": True,
        "workflow": loaded.workflow.name,
        "source": {
            "kind": identity.kind.value,
            "ref": identity.locator,
            "revision": identity.revision,
            "projectDir": str(project) if project is not None else None,
            "mounted": dict(loaded.mounted),
        },
        "definition": loaded.snapshot,
        "definitionDigest": loaded.digest,
        "inputHash": input_hash,
        "cacheHints": {"root": str(ref.path), "candidates": _candidates(spec, project, ref)},
    }


def _candidates(spec: str, project: Path | None, ref: WorkflowRef) -> list[str]:
    """The files a later resolve of ``spec`` would look at, in order, the first existing
    one winning: the server may reuse this description while that first one is still
    ``root`` and every source hash is unchanged (it hashes; it never runs code)."""
    if ref.origin in (WorkflowOrigin.BUILTIN, WorkflowOrigin.PATH):
        return [str(ref.path)]
    paths = [] if project is None else [project / PROJECT_SUBDIR / f"{spec}.workflow.py"]
    paths.append(default_user_dir().expanduser().resolve() / f"{spec}.workflow.py")
    return [str(path) for path in paths]


def _list(request: dict[str, Any]) -> dict[str, Any]:
    project = _project_dir(request)
    try:
        refs = discover(project)
    except WorkflowSourceError as exc:
        raise _source_error(exc) from None
    check = request.get("check") is True
    return {
        "ok": True,
        "workflows": [
            {
                "name": ref.name,
                "origin": ref.origin.value,
                "path": str(ref.path),
                "summary": summary_line(ref),
                "shadows": [str(path) for path in ref.shadows],
                **(_load_error(ref) if check else {}),
            }
            for ref in refs
        ],
    }


def _load_error(ref: WorkflowRef) -> dict[str, Any]:
    """``{"error": one line}`` when ``ref`` does not load (``check`` in ``list``), else ``{}``."""
    try:
        load(ref)
    except WorkflowSourceError as exc:
        return {"error": one_line(str(exc))}
    return {}


def answer(request: object) -> dict[str, Any]:
    """The answer frame for one request frame (never raises for a bad request)."""
    if not isinstance(request, dict):
        return refusal("badRequest", "the request must be a JSON object")
    op = request.get("op")
    try:
        if op == "describe":
            return _describe(request)
        if op == "list":
            return _list(request)
        raise _RefusedError("badRequest", f"unknown op {op!r} (expected 'describe' or 'list')")
    except _RefusedError as refused:
        return refusal(refused.code, refused.message, refused.problems)
