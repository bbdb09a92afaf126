"""``workflows.show`` (one workflow's graph) and ``workflows.check`` (validate a file without
running it), both answered by a resolver child: the server never loads workflow code.

Runs in the server. Both are reads: no receipt, no run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pi_workflows.protocol import Request
from pi_workflows.server import resolver
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import ResolveError
from pi_workflows.server.handlers.registry import MAX_PATH_CHARS, bad, operation, text


def _absolute(payload: dict[str, Any], name: str) -> str | None:
    value = text(payload, name, required=False, limit=MAX_PATH_CHARS)
    if value is not None and not Path(value).is_absolute():
        raise bad(f"payload field {name!r} must be an absolute path")
    return value


async def _describe(server: ServerContext, spec: str, project: str | None) -> dict[str, Any]:
    return await resolver.call(
        {"op": "describe", "workflow": spec, "projectDir": project, "input": None},
        limit_seconds=server.config.resolve_seconds,
        tail_bytes=server.config.runner_output_tail_bytes,
        template=server.template,
    )


@operation("workflows.show")
async def workflows_show(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{workflow, projectDir?}``: ``{workflow, source: {kind, ref, revision}, definition,
    definitionDigest}``; the definition is the topology snapshot a run would record."""
    spec = text(request.payload, "workflow", limit=MAX_PATH_CHARS)
    assert spec is not None
    reply = await _describe(server, spec, _absolute(request.payload, "projectDir"))
    source = reply.get("source", {})
    return {
        "workflow": reply.get("workflow"),
        "source": {k: source.get(k) for k in ("kind", "ref", "revision")},
        "definition": reply.get("definition"),
        "definitionDigest": reply.get("definitionDigest"),
    }


@operation("workflows.check")
async def workflows_check(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{path, projectDir?}`` (absolute; workflows the file names are looked up in the
    project): ``{path, ok, workflow, problems: [{code, file, line, message}],
    problemCount}``; a file that does not load or whose graph is invalid is ``ok: false`` with
    every problem the resolver found (at most ``resolver.MAX_PROBLEMS``; ``line`` null
    when none applies, ``message`` without the file and line)."""
    path = _absolute(request.payload, "path")
    if path is None:
        raise bad("payload field 'path' must be an absolute path")
    try:
        reply = await _describe(server, path, _absolute(request.payload, "projectDir"))
    except ResolveError as exc:
        listed = exc.problems or [{"file": path, "line": None, "message": _bare(str(exc), path)}]
        return {
            "path": path,
            "ok": False,
            "workflow": None,
            "problems": [{"code": exc.code, **problem} for problem in listed],
            "problemCount": max(exc.problem_count, len(listed)),
        }
    return {
        "path": path,
        "ok": True,
        "workflow": reply.get("workflow"),
        "problems": [],
        "problemCount": 0,
    }


def _bare(message: str, path: str) -> str:
    """``message`` without a leading ``PATH:`` (the problem names its file apart)."""
    return message[len(path) + 1 :].lstrip() if message.startswith(f"{path}:") else message
