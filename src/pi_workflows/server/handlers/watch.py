"""Live views for renderers: ``run.watch`` (one run and its graph) and ``runs.watch`` (the
run list), pushed by the server on the requesting connection.

Runs in the server. Each operation answers at once with ``{watching: true}``; the current
view follows as an event, then a new one after every change (``server/run_views.py``). The
views are computed by the server, so every renderer shows the same status.
"""

from __future__ import annotations

from typing import Any

from pi_workflows.protocol import Outcome, Request
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError
from pi_workflows.server.handlers.registry import bad, limit_of, operation, run_id_of, text
from pi_workflows.server.peers import Peer, current_peer
from pi_workflows.server.run_views import ListWatcher
from pi_workflows.store.runs import read_run

MAX_LIST_WATCH = 200
"""Most runs one ``runs.view`` event carries (the newest)."""


def _peer() -> Peer:
    peer = current_peer.get()
    if peer is None:  # pragma: no cover - every connection sets its peer
        raise RequestError(Outcome.REJECTED.value, "badRequest", "this connection cannot watch")
    return peer


def statuses_of(payload: dict[str, Any]) -> list[str] | None:
    """The optional ``status`` filter: a list of user-facing statuses."""
    statuses = payload.get("status")
    if statuses is not None and (
        not isinstance(statuses, list) or not all(isinstance(s, str) for s in statuses)
    ):
        raise bad("payload field 'status' must be a list of statuses")
    return statuses or None


@operation("run.watch")
async def run_watch(server: ServerContext, request: Request) -> dict[str, Any]:
    """Envelope ``runId``: push ``run.view`` events ``{runId, run: RunView, graph}`` on this
    connection, the current one first (``run.gone`` if the run is pruned)."""
    run_id = run_id_of(request)
    with server.db.read() as conn:
        read_run(conn, run_id)
    peer = _peer()
    watcher = server.run_views.watch_run(run_id, peer)
    peer.on_close(lambda: server.run_views.unwatch(watcher))
    return {"runId": run_id, "watching": True}


@operation("runs.watch")
async def runs_watch(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{status?, workflow?, limit?}``: push ``runs.view`` events ``{runs, counts}`` on this
    connection whenever the newest ``limit`` (default 100, at most 200) matching runs change."""
    limit = limit_of(request.payload, default=100)
    if limit > MAX_LIST_WATCH:
        raise bad(f"payload field 'limit' must be at most {MAX_LIST_WATCH} for runs.watch")
    watcher = ListWatcher(
        _peer(),
        statuses=statuses_of(request.payload),
        workflow=text(request.payload, "workflow", required=False),
        limit=limit,
    )
    server.run_views.watch_list(watcher)
    watcher.peer.on_close(lambda: server.run_views.unwatch(watcher))
    return {"watching": True}
