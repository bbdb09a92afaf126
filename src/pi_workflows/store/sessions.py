"""Origin sessions: the coordinator claim of a Pi session, its view, and its reports.

Owns ``sessions`` and ``workflow_turns``, and the reported half of ``workflow_messages``
(``sent`` only on a session's evidence). A session ``attach`` gets a coordinator epoch; a
later attach fences the earlier one, whose reports are then refused
(``CoordinatorFencedError``). Each attach names its seat incarnation (one Pi process's
coordinator, a headless agent's); turns and proven deliveries are recorded with it, and
``store/delivery.py`` keeps the rule that a pending step is inside a live turn of a live
seat or due to be presented again. The view is what the session must show now: its one active
request (the oldest open request of its waiting or working runs; others wait in order),
the messages to add (pending notifications, terminal results and follow-ups, and the
active request's step while unsent), and its runs, bounded to fit one frame
(``view_bounds``). Reports change message and run rows, so each is a run write (revision
and event) on every run it touches.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pi_workflows.store import (
    delivery,
    follow_ups,
    interactions,
    jsoncol,
    lifecycle,
    messages,
    reminders,
    view_bounds,
)
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import CoordinatorFencedError
from pi_workflows.store.ids import new_id
from pi_workflows.store.runs import RunRow, write_run
from pi_workflows.store.states import ParkReason, RunStatus
from pi_workflows.store.views import list_session_runs

MAX_VIEW_MESSAGES = 50
"""Most messages one view lists (oldest first); the rest follow once these are sent."""

MAX_TITLE_CHARS = 200
"""Longest decision title the active request carries."""

MAX_REJECTION_CHARS = 2000
"""Longest rejection message the active request carries."""

STOP_REASONS = frozenset({"completed", "aborted", "error", "lost"})


@dataclass(frozen=True)
class Attached:
    """A session's coordinator claim: its epoch, and the steps presented again because
    their last delivery was to another seat (``delivery.seat_attached``)."""

    session_id: str
    coordinator_epoch: int
    presented_again: tuple[str, ...] = ()


def attach(db: Database, session_id: str, seat_id: str | None = None) -> Attached:
    """Become the session's coordinator as seat ``seat_id`` (a new epoch fences every
    earlier attach); a client that names no seat is a new seat at every attach. The open
    turns of every other seat end ``lost`` in the same transaction, and the session's active
    step is presented again when no turn of this seat can be working on it."""
    with db.atomic("sessions.attach") as tx:
        row = tx.conn.execute(
            "SELECT coordinator_epoch FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        epoch = (row[0] if row else 0) + 1
        seat = seat_id if seat_id is not None else f"attach-{new_id('seat')}"
        tx.conn.execute(
            "INSERT INTO sessions (session_id, coordinator_epoch, seat_id, attached_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET"
            " coordinator_epoch = excluded.coordinator_epoch, seat_id = excluded.seat_id,"
            " attached_at = excluded.attached_at, disconnected_at = NULL",
            (session_id, epoch, seat, tx.now),
        )
        again = delivery.seat_attached(db, session_id, seat)
        return Attached(session_id, epoch, tuple(again))


def disconnected(db: Database, session_id: str, epoch: int) -> None:
    """The watch connection of the session's coordinator ``epoch`` closed: its seat is not
    attached now (a newer epoch's attach is not touched)."""
    with db.atomic("sessions.disconnect") as tx:
        tx.conn.execute(
            "UPDATE sessions SET disconnected_at = ? WHERE session_id = ?"
            " AND coordinator_epoch = ? AND disconnected_at IS NULL",
            (tx.now, session_id, epoch),
        )


def seat_of(conn: sqlite3.Connection, session_id: str) -> str | None:
    """The seat that holds the session's current epoch."""
    row = conn.execute(
        "SELECT seat_id FROM sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    return None if row is None else str(row[0])


def check_epoch(conn: sqlite3.Connection, session_id: str, epoch: int) -> None:
    """``CoordinatorFencedError`` unless ``epoch`` is the session's current coordinator."""
    row = conn.execute(
        "SELECT coordinator_epoch FROM sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    current = None if row is None else int(row[0])
    if current != epoch:
        raise CoordinatorFencedError(session_id, epoch, current)


active_request = interactions.active_for_session
"""The session's one active request (``interactions.active_for_session``)."""


def _message(row: sqlite3.Row) -> dict[str, Any]:
    """One message as the session view lists it: its text once, cut to the view's bound."""
    body = jsoncol.loads(row[3])
    rest = {k: v for k, v in body.items() if k != "text"} if isinstance(body, dict) else body
    return {
        "workflowMessageId": row[0],
        "runId": row[1],
        "kind": row[2],
        "body": view_bounds.bounded_body(rest),
        **view_bounds.bounded_text(messages.text_of(body), view_bounds.SESSION_TEXT_BYTES),
        "status": row[4],
        "resumed": bool(row[5]),
        "createdAt": row[6],
    }


_MESSAGE_COLUMNS = "message_id, run_id, kind, body_json, status, resumed, created_at, rowid"
_PENDING_OF_SESSION = (
    "FROM workflow_messages WHERE origin_session = ? AND status = 'pending'"
    " AND kind IN ('notification', 'terminal', 'followUp')"
)


def _active_view(
    conn: sqlite3.Connection, active: interactions.Interaction, message: sqlite3.Row | None
) -> dict[str, Any]:
    """The active request as the view shows it: ids, states and an agent step's tool limit,
    never its text (that is its message's ``text``)."""
    rejection = conn.execute(
        "SELECT error FROM interactive_submissions WHERE request_id = ?"
        " AND status = 'rejected' ORDER BY submitted_at DESC, rowid DESC LIMIT 1",
        (active.request_id,),
    ).fetchone()
    request = active.request if isinstance(active.request, dict) else {}
    title = request.get("title")
    tools = request.get("allowedTools")
    return {
        "requestId": active.request_id,
        "runId": active.run_id,
        "nodeId": active.node_id,
        "kind": active.kind,
        "forPerson": active.for_person,
        "status": active.status,
        "title": view_bounds.cut(str(title), MAX_TITLE_CHARS)
        if active.kind == "decision" and title is not None
        else None,
        # Passed as stored: the extension refuses to present a step whose limit it cannot read.
        "allowedTools": tools,
        "deadlineAt": active.deadline_at,
        "workflowMessageId": None if message is None else message[0],
        "messageStatus": None if message is None else message[4],
        "lastRejection": None
        if rejection is None
        else view_bounds.cut(rejection[0], MAX_REJECTION_CHARS),
    }


def _for_this_seat(active: interactions.Interaction) -> bool:
    """False for a decision whose audience leaves out the origin session (``seats``
    without ``pi``, docs/channels.md): its card is not presented there; it is answered on
    the seats it names (or with ``/workflow decide``, as with the CLI)."""
    request = active.request if isinstance(active.request, dict) else {}
    seats = request.get("seats")
    return active.kind != "decision" or not isinstance(seats, list) or "pi" in seats


def known(conn: sqlite3.Connection, session_id: str) -> bool:
    """Whether ``session_id`` ever attached or is the origin session of some run."""
    return (
        conn.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
        is not None
        or conn.execute(
            "SELECT 1 FROM runs WHERE origin_session = ? LIMIT 1", (session_id,)
        ).fetchone()
        is not None
    )


def view(conn: sqlite3.Connection, session_id: str) -> dict[str, Any]:
    """What the session must present now (see the module docstring), bounded to fit a frame:
    texts cut at ``SESSION_TEXT_BYTES``, and ``messages`` the longest prefix of the messages
    to add within ``MAX_VIEW_MESSAGES`` and ``SESSION_MESSAGES_BYTES`` (at least one), with
    ``moreMessages`` counting the rest. A function of the stored rows only."""
    epoch_row = conn.execute(
        "SELECT coordinator_epoch FROM sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    active = active_request(conn, session_id)
    active_view: dict[str, Any] | None = None
    step: sqlite3.Row | None = None
    if active is not None:
        row = conn.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM workflow_messages WHERE request_id = ?"
            " AND status IN ('pending', 'sent') ORDER BY created_at DESC, rowid DESC LIMIT 1",
            (active.request_id,),
        ).fetchone()
        active_view = _active_view(conn, active, row)
        if row is not None and row[4] == "pending" and _for_this_seat(active):
            step = row
    total = conn.execute(f"SELECT COUNT(*) {_PENDING_OF_SESSION}", (session_id,)).fetchone()[0]
    total += 0 if step is None else 1
    listed: list[dict[str, Any]] = []
    spent = 0
    cursor = conn.execute(
        f"SELECT {_MESSAGE_COLUMNS} {_PENDING_OF_SESSION} ORDER BY created_at, rowid LIMIT ?",
        (session_id, MAX_VIEW_MESSAGES),
    )
    try:
        for row in _merged(cursor, step):
            if len(listed) >= MAX_VIEW_MESSAGES:
                break
            message = _message(row)
            size = view_bounds.encoded_size(message)
            if listed and spent + size > view_bounds.SESSION_MESSAGES_BYTES:
                break
            listed.append(message)
            spent += size
    finally:
        cursor.close()  # rows past the bound are never read
    return {
        "sessionId": session_id,
        "coordinatorEpoch": None if epoch_row is None else epoch_row[0],
        "activeRequest": active_view,
        "messages": listed,
        "moreMessages": total - len(listed),
        "runs": list_session_runs(conn, session_id),
    }


def _merged(rows: Iterable[sqlite3.Row], step: sqlite3.Row | None) -> Iterator[sqlite3.Row]:
    """``rows`` (oldest first) with the active step's pending message in its place.

    Rows are read one at a time, so a backlog of large messages is decoded only as far as
    the view's bound reaches."""
    for row in rows:
        if step is not None and (step[6], step[7]) < (row[6], row[7]):
            yield step
            step = None
        yield row
    if step is not None:
        yield step


def _run_write(db: Database, run_id: str, event: str, data: dict[str, Any], apply: Any) -> None:
    write_run(db, run_id, name=f"sessions.{event}", event_type=event, event_data=data,
              claim=None, apply=apply)  # fmt: skip


def report_messages(
    db: Database,
    session_id: str,
    epoch: int,
    present: list[tuple[str, str]],
    *,
    idle: bool,
) -> dict[str, Any]:
    """The session says which workflow messages are in its branch (message id, entry id).

    Pending messages of this session found there become ``sent`` with their entry id and
    the seat that reported them. With ``idle`` (the session is idle, every turn report of it
    was made before, and this is its whole branch), a step of the active request that was
    sent but is no longer there is presented once more as a ``resumed`` step, and so is one
    that no turn works on (``delivery.seat_idle``).
    Returns ``{sent: [...ids], resumed: [...new ids]}``.
    """
    sent: list[str] = []
    resumed: list[str] = []
    with db.atomic("sessions.report_messages") as tx:
        check_epoch(tx.conn, session_id, epoch)
        seat = seat_of(tx.conn, session_id)
        assert seat is not None  # check_epoch found the row
        tx.conn.execute(
            "UPDATE sessions SET reported_at = ? WHERE session_id = ?", (tx.now, session_id)
        )
        entries = dict(present)
        by_run: dict[str, list[str]] = {}
        if entries:
            marks = ", ".join("?" for _ in entries)
            for message_id, run_id in tx.conn.execute(
                f"SELECT message_id, run_id FROM workflow_messages WHERE message_id IN ({marks})"
                " AND origin_session = ? AND status = 'pending'",
                (*entries, session_id),
            ).fetchall():
                by_run.setdefault(run_id, []).append(message_id)
        for run_id, ids in by_run.items():

            def mark(tx: Transaction, run: RunRow, ids: list[str] = ids) -> None:
                for message_id in ids:
                    tx.conn.execute(
                        "UPDATE workflow_messages SET status = 'sent', entry_id = ?,"
                        " seat_id = ?, settled_at = ? WHERE message_id = ? AND status = 'pending'",
                        (entries[message_id][:200], seat, tx.now, message_id),
                    )
                _sent_follow_ups(tx, run, ids)

            _run_write(db, run_id, "message.sent", {"messages": ids}, mark)
            sent.extend(ids)
        if idle:
            resumed.extend(_present_missing_step(db, tx, session_id, set(entries)))
            resumed.extend(delivery.seat_idle(db, session_id, seat, frozenset(sent)))
    return {"sent": sent, "resumed": resumed}


def _sent_follow_ups(tx: Transaction, run: RunRow, ids: list[str]) -> None:
    """In the write that marks messages ``sent``: follow-ups whose messages they are are
    sent, and a completed run's terminal message, now delivered, releases its queued
    follow-ups as messages (``store/follow_ups.py``), in the same commit."""
    marks = ", ".join("?" for _ in ids)
    kinds = tx.conn.execute(
        f"SELECT message_id, kind, body_json FROM workflow_messages WHERE message_id IN ({marks})",
        ids,
    ).fetchall()
    follow_ups.mark_sent(tx, [row[0] for row in kinds if row[1] == "followUp"])
    for row in kinds:
        if row[1] == "terminal":
            follow_ups.release(tx, run, jsoncol.loads(row[2]))


def _present_missing_step(
    db: Database, tx: Transaction, session_id: str, present: set[str]
) -> list[str]:
    active = active_request(tx.conn, session_id)
    if active is None or active.status != "pending":
        return []
    row = tx.conn.execute(
        "SELECT message_id, status FROM workflow_messages WHERE request_id = ?"
        " AND status IN ('pending', 'sent') ORDER BY created_at DESC, rowid DESC LIMIT 1",
        (active.request_id,),
    ).fetchone()
    if row is None or row[1] != "sent" or row[0] in present:
        return []
    created: list[str] = []

    def again(tx: Transaction, run: RunRow) -> None:
        tx.conn.execute(
            "UPDATE workflow_messages SET status = 'superseded' WHERE message_id = ?", (row[0],)
        )
        created.append(interactions.present_again(tx, active, run.workflow_name))

    _run_write(db, active.run_id, "message.resumed", {"replaces": row[0]}, again)
    return created


@dataclass(frozen=True)
class TurnRetry:
    """How a turn that ended with a provider error is retried: at most ``retries``
    presentations again, the first ``backoff_ms`` after the error, doubling."""

    retries: int = 3
    backoff_ms: int = 10_000


def report_turn(
    db: Database,
    session_id: str,
    epoch: int,
    *,
    event: str,
    stop_reason: str | None,
    workflow_message_id: str | None,
    error_message: str | None = None,
    retry: TurnRetry = TurnRetry(),
) -> dict[str, Any]:
    """A model turn of the session's seat started or ended (``completed``, ``aborted``,
    ``error``, ``lost``). A turn started for the step of its run's *open* request that ends
    ``aborted`` pauses that run with ``turnAborted`` (its request stays open; ``run resume``
    presents it again); one that ends with ``error`` is recorded with ``error_message`` (the
    provider's error as Pi reported it) and its step is presented again after a backoff, a
    bounded number of times, then its run pauses ``agentUnavailable`` with those words
    (``delivery.turn_failed``), attached sessions and headless agents alike; one that ends
    ``completed`` without a submission earns a reminder (``reminders``). A turn for anything
    else (a terminal result, a step whose request was answered since) changes nothing.

    Returns ``{turnId, paused, reminder, retry}``: ``retry`` (``{retry, of, retryAt,
    error}``) or ``paused`` with its ``detail`` tell the session what became of a failed
    turn's step."""
    with db.atomic("sessions.report_turn") as tx:
        check_epoch(tx.conn, session_id, epoch)
        seat = seat_of(tx.conn, session_id)
        assert seat is not None  # check_epoch found the row
        run_id = None
        if workflow_message_id is not None:
            row = tx.conn.execute(
                "SELECT run_id FROM workflow_messages WHERE message_id = ? AND origin_session = ?",
                (workflow_message_id, session_id),
            ).fetchone()
            run_id = None if row is None else row[0]
        if event == "started":
            # One turn at a time per seat: an earlier one still open ended unreported.
            delivery.close_turns(db, session_id, seat)
            turn_id = new_id("turn")
            tx.conn.execute(
                "INSERT INTO workflow_turns (turn_id, session_id, seat_id, message_id, run_id,"
                " status, started_at) VALUES (?, ?, ?, ?, ?, 'started', ?)",
                (turn_id, session_id, seat, workflow_message_id if run_id else None, run_id,
                 tx.now),
            )  # fmt: skip
            if run_id is not None:
                delivery.worked(tx, str(workflow_message_id))
            return {"turnId": turn_id, "paused": None, "reminder": None, "retry": None}
        open_turn = tx.conn.execute(
            "SELECT turn_id, run_id, message_id FROM workflow_turns WHERE session_id = ?"
            " AND seat_id = ? AND status = 'started' ORDER BY started_at DESC LIMIT 1",
            (session_id, seat),
        ).fetchone()
        if open_turn is None:
            return {"turnId": None, "paused": None, "reminder": None, "retry": None}
        tx.conn.execute(
            "UPDATE workflow_turns SET status = 'ended', stop_reason = ?, error = ?, ended_at = ?"
            " WHERE turn_id = ?",
            (stop_reason, error_message if stop_reason == "error" else None, tx.now,
             open_turn[0]),
        )  # fmt: skip
        answer: dict[str, Any] = {
            "turnId": open_turn[0], "paused": None, "reminder": None, "retry": None,
        }  # fmt: skip
        turn_run = open_turn[1]
        request = _open_request_of_message(tx.conn, turn_run, open_turn[2])
        if request is None:
            return answer
        status, mode = tx.conn.execute(
            "SELECT status, execution_mode FROM runs WHERE run_id = ?", (turn_run,)
        ).fetchone()
        if status != RunStatus.WAITING:
            return answer
        if stop_reason == "aborted":
            lifecycle.pause_waiting(db, turn_run, ParkReason.TURN_ABORTED)
            answer["paused"] = turn_run
        elif stop_reason == "error":
            failed = delivery.turn_failed(
                db, request, error_message, retries=retry.retries,
                backoff_ms=retry.backoff_ms, detached=mode == "detached",
            )  # fmt: skip
            answer["paused"] = failed.get("paused")
            answer["retry"] = failed if "retry" in failed else None
            answer["detail"] = failed.get("detail")
        elif stop_reason == "completed":
            answer["reminder"] = reminders.after_turn(db, tx, turn_run, open_turn[2])
        return answer


def _open_request_of_message(
    conn: sqlite3.Connection, run_id: str | None, message_id: str | None
) -> interactions.Interaction | None:
    """The run's open, pending request that the turn's message presents, if any."""
    if run_id is None or message_id is None:
        return None
    row = conn.execute(
        "SELECT q.request_id FROM workflow_messages m JOIN interactive_requests q"
        " USING (request_id) WHERE m.message_id = ? AND q.run_id = ? AND q.status = 'pending'",
        (message_id, run_id),
    ).fetchone()
    return None if row is None else interactions.read_request(conn, row[0])
