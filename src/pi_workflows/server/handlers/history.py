"""What a run did: ``run.history`` (its event log, paged), ``run.logs`` (what each attempt
printed, logged and ran, with tracebacks) and ``run.output`` (one node's latest output).

Runs in the server. Both are reads: no receipt, no idempotency key.
"""

from __future__ import annotations

from typing import Any

from pi_workflows.protocol import Outcome, Request
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError
from pi_workflows.server.handlers.registry import bad, limit_of, operation, run_id_of, text
from pi_workflows.store import attempt_logs, history, views
from pi_workflows.store.runs import read_run


def _cursor(payload: dict[str, Any]) -> int:
    after = payload.get("after", 0)
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise bad("payload field 'after' must be a non-negative integer (a cursor)")
    return after


@operation("run.history")
async def run_history(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{after?, limit?}``: ``{runId, events: [HistoryEvent], next}``, oldest first, after
    revision ``after``; ``next`` is the cursor of the following page (or null)."""
    run_id = run_id_of(request)
    limit = limit_of(request.payload, default=200)
    with server.db.read() as conn:
        return history.page(conn, run_id, after=_cursor(request.payload), limit=limit)


@operation("run.logs")
async def run_logs(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{nodeId?, after?, limit?}``: ``{runId, revision, logs: [AttemptLog], next}``, the
    attempts (of one node) oldest first, each with its kept output and traceback."""
    run_id = run_id_of(request)
    node_id = text(request.payload, "nodeId", required=False)
    limit = limit_of(request.payload, default=50)
    with server.db.read() as conn:
        revision = read_run(conn, run_id).revision
        found = attempt_logs.page(
            conn, run_id, node_id=node_id, after=_cursor(request.payload), limit=limit
        )
    return {"runId": run_id, "revision": revision, **found}


@operation("run.output")
async def run_output(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{nodeId}``: ``{runId, nodeId, attemptId, visit, status, output, outputRef, error}``
    of the node's latest settled attempt in the current round (``notFound`` if none)."""
    run_id = run_id_of(request)
    node_id = text(request.payload, "nodeId")
    assert node_id is not None
    with server.db.read() as conn:
        found = views.node_output(conn, run_id, node_id)
    if found is None:
        raise RequestError(
            Outcome.NOT_FOUND.value,
            "notFound",
            f"node {node_id!r} of run {run_id} has no result in its current round",
        )
    return found
