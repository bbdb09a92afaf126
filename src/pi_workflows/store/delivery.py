"""Delivery of steps to seats: the one rule every seat that can hold a step goes through.

A *seat* is whatever holds a step for the model: the coordinator of one Pi process on an
origin session, or of a headless agent the server runs for a detached run. Each attach
names its seat incarnation (``sessions.seat_id``); a turn and a proven delivery (a
message marked ``sent``) belong to the seat that reported them. The rule (docs/server.md,
"Delivery to seats"):

    A pending step (an agent, assistant-message or checkpoint request) is always inside a
    live turn of a live seat, or due to be presented again. A transcript entry is not a
    presentation.

Owns the delivery columns of ``interactive_requests`` (``turns_lost``, ``turn_errors``,
``agent_nudges``, ``present_at`` and ``present_reason``) and the moments that keep the rule:

- a seat attaches (``seat_attached``): the turns still open of any other seat can never end,
  so they end ``lost``; the session's active step, when its last delivery was to another
  seat and no turn works on it, is presented again (``resumed``) and the seat starts a turn;
- a seat reports that it is idle with its whole branch (``seat_idle``): a turn of it still
  open ended unreported (``lost``), and a step of it that no turn works on is presented
  again;
- a submission is rejected, or its validation is cut short, after the turn that made it
  died (``reopened``): the step is due to be presented again at once;
- a turn ends with a provider error (``turn_failed``): the step is presented again after a
  backoff (a durable timer, ``present_at``, fired by ``fire_due``), a bounded number of
  times, then the run parks ``agentUnavailable`` with the provider's words;
- a headless agent that holds a step and works on none for a bound is prompted again, then
  replaced, then its run parks (``agent_stall`` and ``nudge``; the policy is the server's,
  ``server/agents.py``).

``of_request`` says where a step's delivery stands (run show, session show, watch,
``state diagnose``); ``stalled`` is the state the rule must never leave for long. Every
write here is presentation bookkeeping (``runs.PRESENTATION_EVENTS``): it never makes a live
runner's proposal conflict. Functions that take a ``Transaction`` run inside one; none
runs workflow code or talks to a process.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from pi_workflows.store import interactions, lifecycle
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.runs import RunRow, write_run
from pi_workflows.store.states import ParkReason, RunStatus

MODEL_KINDS: Final = frozenset({"agent", "assistant", "checkpoint"})
"""Request kinds a model works on in a turn (a decision waits for a person, never a seat, and
so does a person's checkpoint: ``Interaction.for_person``)."""

TURN_LOST: Final = "turnLost"
"""Why a step is presented again: the turn working on it died with its seat."""
NOT_WORKED: Final = "notWorked"
"""Why a step is presented again: it was delivered to a seat that started no turn for it."""
PROVIDER_ERROR: Final = "providerError"
"""Why a step is presented again: its turn ended with a model provider's error."""
AGENT_IDLE: Final = "agentIdle"
"""Why a step is presented again: its headless agent held it and worked on none."""

NO_MODEL_PREFIX: Final = "no model is configured"
"""How the extension words Pi's "Unknown provider": a set-up error no retry can mend."""

MAX_ERROR_CHARS: Final = 500


@dataclass(frozen=True)
class Delivery:
    """Where a pending step's delivery stands (``of_request``).

    ``state``: ``working`` (a turn of the session's connected seat works on it),
    ``validating`` (a submission is being validated), ``presenting`` (a message for it waits
    for its seat), ``presentDue`` (it is presented again at ``due_at``), ``waitingForAnswer``
    (the model's turn on a checkpoint or assistant-message step ended; its answer or reply
    is what comes next), ``seatGone`` (delivered to a seat whose connection closed: presented
    again when the session is reopened, or when a new headless agent attaches), ``stalled``
    (delivered, no turn works on it and nothing is due: what the rule forbids).
    ``since`` is when that state began (store ms)."""

    state: str
    since: int
    detail: str
    due_at: int | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The view's ``delivery`` object."""
        return {
            "state": self.state,
            "since": self.since,
            "detail": self.detail,
            "dueAt": self.due_at,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class _Step:
    """What ``of_request`` and the repairs read of one open request."""

    request: interactions.Interaction
    present_at: int | None
    present_reason: str | None
    run_status: str
    detached: bool
    message: sqlite3.Row | None  # (message_id, status, seat_id, created_at, settled_at)
    turn: sqlite3.Row | None  # (turn_id, seat_id, status, stop_reason, started_at, ended_at)
    seat: sqlite3.Row | None  # (seat_id, disconnected_at, attached_at)


def _step(conn: sqlite3.Connection, request_id: str) -> _Step | None:
    request = interactions.read_request(conn, request_id)
    if request is None:
        return None
    extra = conn.execute(
        "SELECT q.present_at, q.present_reason, r.status, r.execution_mode"
        " FROM interactive_requests q JOIN runs r USING (run_id) WHERE q.request_id = ?",
        (request_id,),
    ).fetchone()
    message = conn.execute(
        "SELECT message_id, status, seat_id, created_at, settled_at FROM workflow_messages"
        " WHERE request_id = ? AND status IN ('pending', 'sent')"
        " ORDER BY created_at DESC, rowid DESC LIMIT 1",
        (request_id,),
    ).fetchone()
    turn = conn.execute(
        "SELECT t.turn_id, t.seat_id, t.status, t.stop_reason, t.started_at, t.ended_at"
        " FROM workflow_messages m JOIN workflow_turns t ON t.message_id = m.message_id"
        " WHERE m.request_id = ? ORDER BY t.started_at DESC, t.rowid DESC LIMIT 1",
        (request_id,),
    ).fetchone()
    seat = None
    if request.origin_session is not None:
        seat = conn.execute(
            "SELECT seat_id, disconnected_at, attached_at FROM sessions WHERE session_id = ?",
            (request.origin_session,),
        ).fetchone()
    return _Step(request, extra[0], extra[1], extra[2], extra[3] == "detached", message, turn, seat)


def of_request(conn: sqlite3.Connection, request_id: str) -> Delivery | None:
    """Where the delivery of the open model step ``request_id`` stands, or None for a
    request that is not an open model step of a waiting run (a decision or a person's
    checkpoint, a closed request, a paused run's: those wait for a person)."""
    step = _step(conn, request_id)
    if step is None or step.request.kind not in MODEL_KINDS or step.request.for_person:
        return None
    if step.request.status not in ("pending", "validating") or step.run_status != "waiting":
        return None
    return _state(conn, step)


def _who(step: _Step) -> str:
    if step.detached:
        return "its headless agent"
    return f"Pi session {step.request.origin_session}"


def _state(conn: sqlite3.Connection, step: _Step) -> Delivery:
    request = step.request
    if request.status == "validating":
        row = conn.execute(
            "SELECT submitted_at FROM interactive_submissions WHERE request_id = ?"
            " AND status = 'validating'",
            (request.request_id,),
        ).fetchone()
        since = int(row[0]) if row else request.created_at
        return Delivery("validating", since, "a submission is being validated")
    if step.present_at is not None:
        return Delivery(
            "presentDue",
            request.created_at,
            f"presented again at the due time ({step.present_reason})",
            due_at=step.present_at,
            reason=step.present_reason,
        )
    seat, message, turn = step.seat, step.message, step.turn
    connected = seat is not None and seat[1] is None
    if message is None:
        return Delivery("stalled", request.created_at, "no message presents it")
    if message[1] == "pending":
        where = (
            f"waiting for {_who(step)} to present it"
            if connected or step.detached
            else f"waiting for {_who(step)} to be opened (no Pi is attached to it)"
        )
        return Delivery("presenting", int(message[3]), where)
    if turn is not None and turn[2] == "started":
        if connected and seat is not None and turn[1] == seat[0]:
            return Delivery("working", int(turn[4]), f"a model turn of {_who(step)} works on it")
        gone = int(seat[1]) if seat is not None and seat[1] is not None else int(turn[4])
        return Delivery(
            "seatGone",
            gone,
            f"its turn's seat is gone ({_who(step)} disconnected); it is presented again"
            " when the session is attached again",
        )
    if turn is not None and turn[3] == "completed" and request.kind in ("checkpoint", "assistant"):
        what = "an answer" if request.kind == "checkpoint" else "its reply to be taken"
        return Delivery(
            "waitingForAnswer", int(turn[5]), f"the model's turn ended; waits for {what}"
        )
    delivered = int(message[4] or message[3])
    since = max(delivered, int(turn[5])) if turn is not None and turn[5] is not None else delivered
    if not connected:
        gone = int(seat[1]) if seat is not None and seat[1] is not None else since
        return Delivery(
            "seatGone",
            gone,
            f"delivered to {_who(step)}, which is not attached; it is presented again when"
            " the session is attached again",
        )
    return Delivery(
        "stalled",
        since,
        f"delivered to {_who(step)}, and no model turn works on it and nothing is due",
    )


# --- the repairs -----------------------------------------------------------------------


def close_turns(db: Database, session_id: str, seat_id: str, *, others: bool = False) -> None:
    """End ``lost`` the open turns of ``seat_id`` (``others``: of every other seat), each in
    a write on its run that counts the lost turn on the step it worked on (inside the
    caller's transaction when there is one)."""
    match = "!=" if others else "="
    rows = db.conn.execute(
        f"SELECT turn_id, run_id, message_id FROM workflow_turns WHERE session_id = ?"
        f" AND status = 'started' AND seat_id {match} ?",
        (session_id, seat_id),
    ).fetchall()
    for turn_id, run_id, message_id in rows:
        if run_id is None:
            with db.atomic("delivery.turn_lost") as tx:
                tx.conn.execute(
                    "UPDATE workflow_turns SET status = 'ended', stop_reason = 'lost',"
                    " ended_at = ? WHERE turn_id = ?",
                    (tx.now, turn_id),
                )
            continue

        def lose(
            tx: Transaction, run: RunRow, turn_id: str = turn_id, message_id: Any = message_id
        ) -> None:
            tx.conn.execute(
                "UPDATE workflow_turns SET status = 'ended', stop_reason = 'lost', ended_at = ?"
                " WHERE turn_id = ? AND status = 'started'",
                (tx.now, turn_id),
            )
            if message_id is not None:
                tx.conn.execute(
                    "UPDATE interactive_requests SET turns_lost = turns_lost + 1 WHERE request_id"
                    " = (SELECT request_id FROM workflow_messages WHERE message_id = ?)"
                    " AND status IN ('pending', 'validating')",
                    (message_id,),
                )

        write_run(db, run_id, name="delivery.turn_lost", event_type="turn.lost",
                  event_data={"turnId": turn_id, "sessionId": session_id}, claim=None,
                  apply=lose)  # fmt: skip


def seat_attached(db: Database, session_id: str, seat_id: str) -> list[str]:
    """``seat_id`` attached to the session (inside the attach's transaction): every open
    turn of another seat ends ``lost``, and the active step is presented again when its
    last delivery was to another seat and no turn works on it. Returns the ids of the
    messages that present a step again."""
    close_turns(db, session_id, seat_id, others=True)
    return _present_if_unworked(db, session_id, seat_id, at_attach=True)


def seat_idle(
    db: Database, session_id: str, seat_id: str, just_sent: frozenset[str] = frozenset()
) -> list[str]:
    """The seat reports that it is idle with its whole branch (after every turn report it
    made): a turn of it still open ended unreported (``lost``), and the active step is
    presented again when no turn works on it. A step this very report proves sent is not:
    its turn may be about to start."""
    close_turns(db, session_id, seat_id)
    return _present_if_unworked(db, session_id, seat_id, at_attach=False, just_sent=just_sent)


def _present_if_unworked(
    db: Database,
    session_id: str,
    seat_id: str,
    *,
    at_attach: bool,
    just_sent: frozenset[str] = frozenset(),
) -> list[str]:
    active = interactions.active_for_session(db.conn, session_id)
    if active is None or active.status != "pending" or active.kind not in MODEL_KINDS:
        return []
    if active.for_person:  # a person's checkpoint: no turn is expected to work on it
        return []
    step = _step(db.conn, active.request_id)
    if step is None or step.run_status != "waiting" or step.present_at is not None:
        return []
    message, turn = step.message, step.turn
    if message is None or message[1] != "sent":
        return []  # a pending message presents it (or the branch report finds it missing)
    if turn is not None and turn[2] == "started":
        return []  # a live turn of this seat works on it (others' ended ``lost`` above)
    if turn is not None and turn[3] != "lost":
        return []  # completed: a reminder or an answer follows; error: retried; aborted: paused
    if turn is None and (at_attach or message[0] in just_sent) and message[2] == seat_id:
        return []  # this seat reconnected, or proves it sent it just now: its turn may come
    reason = TURN_LOST if turn is not None else NOT_WORKED
    return [present_again(db, active, reason)]


def reopened(tx: Transaction, request_id: str) -> None:
    """The step ``request_id`` is pending again after a submission was rejected or its
    validation was cut short (inside that transaction, after the run waits again): when no
    turn works on it any more (the submitting turn died with its seat, or it was delivered
    to a seat that never worked on it), it is due to be presented again now, so the
    scheduler presents it (``fire_due``) instead of leaving it ``stalled``."""
    step = _step(tx.conn, request_id)
    if step is None or step.request.kind not in MODEL_KINDS or step.present_at is not None:
        return
    if step.request.for_person:  # a person's checkpoint: no turn is expected to work on it
        return
    if step.request.status != "pending" or step.run_status != RunStatus.WAITING:
        return
    if _state(tx.conn, step).state != "stalled":
        return
    message, turn, seat = step.message, step.turn, step.seat
    if turn is not None:
        if turn[3] != "lost":
            return  # the model's own turn ended: a reminder or an answer follows
        reason = TURN_LOST
    elif message is not None and seat is not None and message[2] != seat[0]:
        reason = NOT_WORKED  # delivered to an earlier seat that never worked on it
    else:
        return  # delivered to the attached seat, whose turn may still come (as at attach)
    tx.conn.execute(
        "UPDATE interactive_requests SET present_at = ?, present_reason = ? WHERE request_id = ?",
        (tx.now, reason, request_id),
    )


def present_again(db: Database, request: interactions.Interaction, reason: str) -> str:
    """Present the open ``request`` once more (a ``resumed`` step message saying why), in a
    presentation write on its run; returns the new message's id."""
    created: list[str] = []

    def again(tx: Transaction, run: RunRow) -> None:
        created.append(interactions.present_again(tx, request, run.workflow_name, reason=reason))

    write_run(db, request.run_id, name="delivery.present_again", event_type="step.represented",
              event_data={"requestId": request.request_id, "reason": reason}, claim=None,
              apply=again)  # fmt: skip
    return created[0]


# --- provider errors -------------------------------------------------------------------


def turn_failed(
    db: Database,
    request: interactions.Interaction,
    error: str | None,
    *,
    retries: int,
    backoff_ms: int,
    detached: bool,
) -> dict[str, Any]:
    """A turn on the open ``request`` ended with a provider error (inside the turn report's
    transaction): present the step again after ``backoff_ms`` doubling, at most ``retries``
    times since the run last resumed; after that (or at once for a missing model, which no
    retry mends) pause the run ``agentUnavailable`` with the provider's words. Returns what
    the session is told: ``{retry, of, retryAt}`` or ``{paused, detail}``."""
    text = " ".join((error or "").split())[:MAX_ERROR_CHARS]
    row = db.conn.execute(
        "SELECT turn_errors FROM interactive_requests WHERE request_id = ?",
        (request.request_id,),
    ).fetchone()
    count = int(row[0]) + 1
    permanent = text.startswith(NO_MODEL_PREFIX)
    if count <= retries and not permanent:
        due: list[int] = []

        def later(tx: Transaction, run: RunRow) -> None:
            due.append(tx.now + backoff_ms * 2 ** (count - 1))
            tx.conn.execute(
                "UPDATE interactive_requests SET turn_errors = ?, present_at = ?,"
                " present_reason = ? WHERE request_id = ?",
                (count, due[0], PROVIDER_ERROR, request.request_id),
            )

        write_run(db, request.run_id, name="delivery.retry_due", event_type="step.retryDue",
                  event_data={"requestId": request.request_id, "retry": count, "of": retries,
                              "error": text},
                  claim=None, apply=later)  # fmt: skip
        return {"retry": count, "of": retries, "retryAt": due[0], "error": text}
    who = "the headless Pi's model turn" if detached else "the model turn"
    said = f": {text}" if text else ""
    times = "" if count == 1 else f" ({count} turns in a row)"
    detail = (
        f"{who} ended with an error{said}{times}; check its provider configuration, then"
        " run resume tries again"
    )
    lifecycle.pause_waiting(db, request.run_id, ParkReason.AGENT_UNAVAILABLE, detail)
    return {"paused": request.run_id, "detail": detail}


def fire_due(db: Database) -> list[str]:
    """Present again the steps whose ``present_at`` came due (a request that closed or a
    run that no longer waits just drops its timer). Returns the runs presented again."""
    now = db.clock.now_ms()
    rows = db.conn.execute(
        "SELECT request_id, run_id FROM interactive_requests WHERE present_at IS NOT NULL"
        " AND present_at <= ? ORDER BY present_at LIMIT 100",
        (now,),
    ).fetchall()
    fired: list[str] = []
    for request_id, run_id in rows:
        request = interactions.read_request(db.conn, request_id)
        row = db.conn.execute(
            "SELECT present_reason, (SELECT status FROM runs WHERE run_id = ?)"
            " FROM interactive_requests WHERE request_id = ?",
            (run_id, request_id),
        ).fetchone()
        if request is None or row is None:
            continue
        if request.status == "pending" and row[1] == RunStatus.WAITING:
            present_again(db, request, str(row[0]))
            fired.append(run_id)
            continue
        with db.atomic("delivery.drop_due") as tx:
            tx.conn.execute(
                "UPDATE interactive_requests SET present_at = NULL, present_reason = NULL"
                " WHERE request_id = ?",
                (request_id,),
            )
    return fired


def next_due(conn: sqlite3.Connection) -> int | None:
    """The earliest due presentation again (store ms), or None."""
    row = conn.execute(
        "SELECT MIN(present_at) FROM interactive_requests WHERE present_at IS NOT NULL"
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


# --- headless agents -------------------------------------------------------------------


@dataclass(frozen=True)
class Stall:
    """An open step of a detached run that no turn of its agent works on."""

    request: interactions.Interaction
    since: int
    state: str
    nudges: int


def agent_stall(conn: sqlite3.Connection, run_id: str, agent_started: int) -> Stall | None:
    """The open model step of ``run_id`` when its headless agent (started at
    ``agent_started``) works on none of it (presenting, delivered, stalled, seat gone), with
    since when; None while a turn works on it, it validates, a presentation is due, or it
    waits for an answer after the model's turn."""
    request = interactions.open_request_of(conn, run_id)
    if request is None:
        return None
    delivery = of_request(conn, request.request_id)
    if delivery is None or delivery.state in (
        "working",
        "validating",
        "presentDue",
        "waitingForAnswer",
    ):
        return None
    nudges = conn.execute(
        "SELECT agent_nudges FROM interactive_requests WHERE request_id = ?",
        (request.request_id,),
    ).fetchone()[0]
    return Stall(request, max(delivery.since, agent_started), delivery.state, int(nudges))


def nudge(db: Database, request: interactions.Interaction, *, prompt: bool) -> str | None:
    """Count one nudge of a stalled headless agent's step; with ``prompt`` also present the
    step again (``agentIdle``). Returns the new message id, if any."""
    created: list[str] = []

    def apply(tx: Transaction, run: RunRow) -> None:
        tx.conn.execute(
            "UPDATE interactive_requests SET agent_nudges = agent_nudges + 1 WHERE request_id = ?",
            (request.request_id,),
        )
        if prompt:
            created.append(
                interactions.present_again(tx, request, run.workflow_name, reason=AGENT_IDLE)
            )

    write_run(db, request.run_id, name="delivery.nudge", event_type="agent.nudged",
              event_data={"requestId": request.request_id, "prompted": prompt}, claim=None,
              apply=apply)  # fmt: skip
    return created[0] if created else None


def worked(tx: Transaction, message_id: str) -> None:
    """A turn started on the step ``message_id`` presents: its headless-agent nudges start
    over (they count stalls in a row)."""
    tx.conn.execute(
        "UPDATE interactive_requests SET agent_nudges = 0 WHERE agent_nudges > 0 AND request_id"
        " = (SELECT request_id FROM workflow_messages WHERE message_id = ?)",
        (message_id,),
    )
