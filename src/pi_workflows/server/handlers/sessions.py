"""Origin-session operations for the Pi extension (and ``pi-workflows session show``).

Runs in the server. ``session.attach`` makes a connection the session's coordinator (a new
epoch fences the previous one); ``session.watch`` pushes the session's view to that
connection as ``session.view`` events; ``workflowMessage.report`` and
``workflowTurn.report`` record what the session proved it shows and the model turns it
ran; ``workflowMessage.get`` reads a message's whole text in slices (a view carries long
texts cut). Reports are idempotent facts, committed before the answer, and need no idempotency
key; a report with a fenced epoch is refused (``coordinatorFenced``).
"""

from __future__ import annotations

import logging
from typing import Any

from pi_workflows.protocol import Outcome, Request
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError
from pi_workflows.server.handlers.registry import MAX_ID_CHARS, bad, operation, receipted, text
from pi_workflows.server.peers import current_peer
from pi_workflows.store import delivery, messages, sessions, view_bounds
from pi_workflows.store.errors import StoreError

log = logging.getLogger(__name__)

MAX_SESSION_ID_CHARS = 200
MAX_PRESENT = 20_000
MAX_TURN_ERROR_CHARS = 500
"""What is kept of a provider's error text (one line)."""
MAX_TURN_ERROR_RAW = 64 * 1024
"""The longest ``errorMessage`` a report may carry."""


def _session(payload: dict[str, Any]) -> str:
    session_id = text(payload, "sessionId")
    assert session_id is not None
    if len(session_id) > MAX_SESSION_ID_CHARS or not session_id.isprintable():
        raise bad(f"payload field 'sessionId' must be at most {MAX_SESSION_ID_CHARS} characters")
    return session_id


def _epoch(payload: dict[str, Any]) -> int:
    epoch = payload.get("coordinatorEpoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
        raise bad("payload field 'coordinatorEpoch' must be the epoch session.attach returned")
    return epoch


@operation("session.attach", command=True)
async def session_attach(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{sessionId, seatId?}``: become the session's coordinator as seat ``seatId`` (one
    id per Pi process's coordinator or headless agent; a client that names none is a new
    seat at every attach); returns ``coordinatorEpoch`` and ``presentedAgain`` (steps whose
    last delivery was to another seat, presented again)."""
    session_id = _session(request.payload)
    seat_id = text(request.payload, "seatId", required=False, limit=MAX_ID_CHARS)

    def change() -> tuple[str | None, dict[str, Any]]:
        attached = sessions.attach(server.db, session_id, seat_id)
        return None, {
            "sessionId": session_id,
            "coordinatorEpoch": attached.coordinator_epoch,
            "presentedAgain": list(attached.presented_again),
        }

    body = receipted(server, request, change)
    server.views.mark_dirty()  # earlier watchers of the session learn they are fenced
    server.wake()
    return body


@operation("session.get")
async def session_get(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{sessionId}``: the session's view (what ``session.watch`` pushes); ``notFound`` for
    a session nothing knows (never attached, and no run names it as its origin)."""
    session_id = _session(request.payload)
    with server.db.read() as conn:
        if not sessions.known(conn, session_id):
            raise RequestError(
                Outcome.NOT_FOUND.value, "notFound",
                f"no session {session_id}: none attached with that id and no run started from"
                " it (list open requests and their sessions with 'pi-workflows interaction list')",
            )  # fmt: skip
        view = sessions.view(conn, session_id)
        active = view["activeRequest"]
        if active is not None:  # only here: the pushed view stays a function of its rows
            found = delivery.of_request(conn, active["requestId"])
            active["delivery"] = None if found is None else found.to_json()
        return {"session": view}


@operation("session.watch")
async def session_watch(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{sessionId, coordinatorEpoch}``: push ``session.view`` events on this connection
    whenever the view changes (the current one first)."""
    session_id = _session(request.payload)
    epoch = _epoch(request.payload)
    with server.db.read() as conn:
        sessions.check_epoch(conn, session_id, epoch)
    peer = current_peer.get()
    if peer is None:  # pragma: no cover - every connection sets its peer
        raise RequestError(Outcome.REJECTED.value, "badRequest", "this connection cannot watch")
    watcher = server.views.watch(session_id, epoch, peer)

    def closed() -> None:
        server.views.unwatch(watcher)
        try:
            sessions.disconnected(server.db, session_id, epoch)
        except StoreError as exc:  # a full disk: the seat only looks attached a while longer
            log.warning("could not record that session %s disconnected: %s", session_id, exc)

    peer.on_close(closed)
    return {"sessionId": session_id, "coordinatorEpoch": epoch, "watching": True}


@operation("workflowMessage.get")
async def message_get(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{workflowMessageId, offset?}``: one slice of the message's whole text, at most
    ``SLICE_BYTES`` of UTF-8 from byte ``offset`` (``{workflowMessageId, runId, kind,
    textBytes, offset, text, next}``), for a text a view carries cut."""
    message_id = text(request.payload, "workflowMessageId")
    assert message_id is not None
    offset = request.payload.get("offset", 0)
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise bad("payload field 'offset' must be a byte offset (0, or a 'next' of this answer)")
    with server.db.read() as conn:
        found = messages.read_text(conn, message_id)
    if found is None:
        raise RequestError(
            Outcome.NOT_FOUND.value, "notFound", f"no workflow message with id {message_id}"
        )
    run_id, kind, whole = found
    try:
        part = view_bounds.text_slice(whole, offset)
    except ValueError as exc:
        raise bad(f"payload field 'offset': {exc}") from None
    return {"workflowMessageId": message_id, "runId": run_id, "kind": kind, **part}


@operation("workflowMessage.report")
async def message_report(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{sessionId, coordinatorEpoch, present: [{workflowMessageId, entryId}], idle}``."""
    session_id = _session(request.payload)
    epoch = _epoch(request.payload)
    present = request.payload.get("present", [])
    if not isinstance(present, list) or len(present) > MAX_PRESENT:
        raise bad(f"payload field 'present' must be a list of at most {MAX_PRESENT} entries")
    pairs: list[tuple[str, str]] = []
    for item in present:
        if not isinstance(item, dict):
            raise bad("each 'present' entry must be {workflowMessageId, entryId}")
        message_id, entry_id = item.get("workflowMessageId"), item.get("entryId")
        if not isinstance(message_id, str) or not isinstance(entry_id, str) or not entry_id:
            raise bad("each 'present' entry must be {workflowMessageId, entryId}")
        if len(message_id) > MAX_ID_CHARS or len(entry_id) > MAX_ID_CHARS:
            raise bad(f"a 'present' entry's ids must be at most {MAX_ID_CHARS} characters each")
        pairs.append((message_id, entry_id))
    idle = request.payload.get("idle", False)
    if not isinstance(idle, bool):
        raise bad("payload field 'idle' must be true or false")
    result = sessions.report_messages(server.db, session_id, epoch, pairs, idle=idle)
    server.wake()
    return result


@operation("workflowTurn.report")
async def turn_report(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{sessionId, coordinatorEpoch, event: started|ended, stopReason?, workflowMessageId?,
    errorMessage?}`` (``errorMessage``: the provider's error text of a turn ended ``error``)."""
    session_id = _session(request.payload)
    epoch = _epoch(request.payload)
    event = request.payload.get("event")
    if event not in ("started", "ended"):
        raise bad("payload field 'event' must be started or ended")
    stop_reason = request.payload.get("stopReason")
    if event == "ended" and stop_reason not in sessions.STOP_REASONS:
        raise bad("payload field 'stopReason' must be completed, aborted, error or lost")
    message_id = text(request.payload, "workflowMessageId", required=False)
    error = request.payload.get("errorMessage")
    if error is not None and (not isinstance(error, str) or len(error) > MAX_TURN_ERROR_RAW):
        raise bad(
            f"payload field 'errorMessage' must be a string of at most {MAX_TURN_ERROR_RAW}"
            " characters (the server keeps its first 500, on one line)"
        )
    result = sessions.report_turn(
        server.db,
        session_id,
        epoch,
        event=str(event),
        stop_reason=stop_reason if event == "ended" else None,
        workflow_message_id=message_id,
        error_message=" ".join(error.split())[:MAX_TURN_ERROR_CHARS] if error else None,
        retry=sessions.TurnRetry(
            retries=server.config.turn_retries,
            backoff_ms=int(server.config.turn_retry_seconds * 1000),
        ),
    )
    server.wake()
    return result
