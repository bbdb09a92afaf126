"""The resolver child: the server's only way to learn about a workflow without importing it.

Runs in the server. Each call forks a resolver from the runner template (or spawns
``python -m pi_workflows.runner.resolve``), sends one
request frame on the private channel, reads one reply frame, and makes sure the child and
its group are gone. The server never loads workflow code itself.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pi_workflows.protocol import encode_frame, read_frame, safe_message
from pi_workflows.protocol.errors import ProtocolError
from pi_workflows.server import children
from pi_workflows.server.errors import ResolveError
from pi_workflows.server.template import RunnerTemplate

RESOLVER_MODULE = "pi_workflows.runner.resolve"


async def call(
    request: dict[str, Any],
    *,
    limit_seconds: float,
    tail_bytes: int,
    template: RunnerTemplate | None = None,
) -> dict[str, Any]:
    """Send ``request`` to a fresh resolver child and return its successful reply.

    Raises ``ResolveError`` with the child's code and one-line message on failure, or with
    ``workflowLoadFailed`` when the child dies, times out or answers garbage.
    """
    child = await children.spawn(RESOLVER_MODULE, tail_bytes=tail_bytes, template=template)
    try:
        child.writer.write(encode_frame(request))
        await child.writer.drain()
        frame = await asyncio.wait_for(read_frame(child.reader), limit_seconds)
    except (TimeoutError, ProtocolError, ConnectionError) as exc:
        await children.stop(child, 1.0)
        raise ResolveError(
            "workflowLoadFailed", f"the workflow resolver did not answer ({type(exc).__name__})"
        ) from None
    await children.stop(child, 1.0)
    if frame is None:
        last = child.output_tail().strip().splitlines()[-1:] or ["no output"]
        raise ResolveError("workflowLoadFailed", f"the workflow resolver exited: {last[0]}")
    reply = json.loads(frame)
    if not isinstance(reply, dict):
        raise ResolveError("workflowLoadFailed", "the workflow resolver answered garbage")
    if not reply.get("ok"):
        raise ResolveError(
            str(reply.get("code", "workflowLoadFailed")),
            str(reply.get("message", "unknown")),
            problems(reply.get("problems")),
            count if isinstance(count := reply.get("problemCount"), int) else None,
        )
    return reply


MAX_PROBLEMS = 50
"""Most problems of one file the server passes on (the resolver lists at most as many)."""

MAX_PROBLEM_CHARS = 500
"""Longest problem message passed on; longer ones are cut."""


def problems(listed: object) -> list[dict[str, Any]]:
    """The ``[{file, line, message}]`` a resolver listed, checked and bounded (a child's
    answer is not trusted): at most ``MAX_PROBLEMS``, each message one safe line of at most
    ``MAX_PROBLEM_CHARS``; malformed entries are left out."""
    if not isinstance(listed, list):
        return []
    kept: list[dict[str, Any]] = []
    for item in listed[:MAX_PROBLEMS]:
        if not isinstance(item, dict):
            continue
        file, line, message = item.get("file"), item.get("line"), item.get("message")
        if not isinstance(file, str) or not isinstance(message, str):
            continue
        if line is not None and (not isinstance(line, int) or isinstance(line, bool)):
            line = None
        kept.append(
            {
                "file": safe_message(file, MAX_PROBLEM_CHARS),
                "line": line,
                "message": safe_message(message, MAX_PROBLEM_CHARS),
            }
        )
    return kept
