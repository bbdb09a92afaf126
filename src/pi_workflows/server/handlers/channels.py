"""What channels read and record: ``channel.feed`` (the workflow messages a person may be
told), ``decision.get`` (one decision and its winner) and ``decision.refuse`` (a refused
answer kept in the run's history).

Runs in the server. A channel answers a decision with ``decision.answer`` like every other
seat, so the first valid answer wins by the one rule in ``store/interaction_writes.py``;
nothing here decides anything.
"""

from __future__ import annotations

from typing import Any

from pi_workflows.protocol import Outcome, Request
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError
from pi_workflows.server.handlers.registry import (
    bad,
    limit_of,
    operation,
    receipted,
    run_id_of,
    text,
)
from pi_workflows.store import seat_feed

MAX_REASON_CHARS = 500
"""Longest ``reason`` (and ``person``) of ``decision.refuse``."""


@operation("channel.feed")
async def channel_feed(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{after?, limit?}``: notices, terminal messages, decisions and questions of every run
    after the cursor ``after``, oldest first; ``next`` is the cursor to ask after."""
    after = request.payload.get("after", 0)
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise bad("payload field 'after' must be a cursor (an integer >= 0)")
    limit = limit_of(request.payload, default=200)
    with server.db.read() as conn:
        messages, following = seat_feed.feed(conn, after, limit)
    return {"messages": messages, "next": following}


@operation("decision.get")
async def decision_get(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{requestId}``: the decision, ``pending`` or resolved with its winner."""
    request_id = text(request.payload, "requestId")
    assert request_id is not None
    with server.db.read() as conn:
        found = seat_feed.decision_of(conn, request_id)
    if found is None:
        raise RequestError(Outcome.NOT_FOUND.value, "notFound", f"no decision {request_id}")
    return {"decision": found}


@operation("decision.refuse", command=True)
async def decision_refuse(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{requestId, seat, person, reason}``: a person a channel does not allow tried to
    answer; kept in the run's history (``decision.refused``), the decision unchanged."""
    run_id = run_id_of(request)
    request_id = text(request.payload, "requestId")
    seat = text(request.payload, "seat")
    person = text(request.payload, "person", limit=MAX_REASON_CHARS)
    reason = text(request.payload, "reason", limit=MAX_REASON_CHARS)
    assert request_id is not None
    assert seat is not None
    assert person is not None
    assert reason is not None

    def change() -> tuple[str | None, dict[str, Any]]:
        result = seat_feed.record_refusal(
            server.db, run_id, request_id, seat=seat, person=person, reason=reason
        )
        return run_id, {"runId": run_id, "requestId": request_id, "revision": result.revision}

    return receipted(server, request, change)
