"""Follow-up prompts: user prompts queued on a run, sent to its origin session after it
completed and its result was delivered.

Owns ``run_follow_ups``. A follow-up is queued (``queue``) on a run that has an origin Pi
session (not a detached run's headless one, not a child run's) and has not ended; at most
``MAX_WAITING`` wait at a time, each at most ``MAX_TEXT_CHARS`` characters. It becomes a
``followUp`` workflow message (``messages``) only in the transaction that marks the run's
terminal message ``sent`` on the session's evidence, and only when the run completed
(``release``), so every follow-up reaches the session after the run's result and in queue
order; from there the workflow-message rule delivers it exactly once (``sent`` only with
the entry that holds it, presented again when a Pi died before its entry was kept). A run
that fails, times out or is cancelled cancels its queued follow-ups, with the reason, in
its terminal transaction (``cancel_waiting``). Functions taking a ``Transaction`` run inside
a run write; ``queue`` and ``remove`` are run writes of their own. Never sends anything.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from pi_workflows.store import faults, messages
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import FollowUpNotFoundError, FollowUpRefusedError
from pi_workflows.store.ids import new_id
from pi_workflows.store.runs import RunRow, write_run
from pi_workflows.store.states import RunStatus

MAX_TEXT_CHARS: Final = 65_536
"""The longest follow-up prompt, in characters."""

MAX_WAITING: Final = 20
"""The most follow-ups one run may have waiting (queued, or ready to send) at a time."""

QUEUED_EVENT: Final = "followUp.queued"
REMOVED_EVENT: Final = "followUp.removed"
EVENTS: Final = frozenset({QUEUED_EVENT, REMOVED_EVENT})
"""A follow-up queued or removed: read by no runner, so they leave the execution revision
alone (``runs.FOLLOW_UP_EVENTS``)."""

TERMINAL_REASONS: Final = {
    RunStatus.FAILED: "the run failed",
    RunStatus.TIMED_OUT: "the run timed out",
    RunStatus.CANCELLED: "the run was cancelled",
}
"""Why a run's waiting follow-ups are cancelled when it ends other than completed."""

faults.declare("follow_ups.change", "a follow-up queued or removed, with its run's event")


@dataclass(frozen=True)
class FollowUp:
    """One ``run_follow_ups`` row."""

    follow_up_id: str
    run_id: str
    seq: int
    text: str
    status: str
    reason: str | None
    message_id: str | None
    created_by: str | None
    created_at: int
    settled_at: int | None

    def to_json(self, *, text_limit: int | None = None) -> dict[str, Any]:
        """Its wire form; ``text_limit`` cuts the text (``textChars`` says its length)."""
        text = self.text if text_limit is None else self.text[:text_limit]
        return {
            "followUpId": self.follow_up_id,
            "runId": self.run_id,
            "seq": self.seq,
            "text": text,
            "textChars": len(self.text),
            "status": self.status,
            "reason": self.reason,
            "workflowMessageId": self.message_id,
            "createdBy": self.created_by,
            "createdAt": self.created_at,
            "settledAt": self.settled_at,
        }


_COLUMNS = (
    "follow_up_id, run_id, seq, text, status, reason, message_id, created_by, created_at,"
    " settled_at"
)


def _row(row: sqlite3.Row) -> FollowUp:
    return FollowUp(*row)


def list_of(conn: sqlite3.Connection, run_id: str, limit: int = 200) -> list[FollowUp]:
    """The run's follow-ups in queue order (the oldest ``limit``)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM run_follow_ups WHERE run_id = ? ORDER BY seq LIMIT ?",
        (run_id, limit),
    ).fetchall()
    return [_row(row) for row in rows]


def read(conn: sqlite3.Connection, follow_up_id: str) -> FollowUp | None:
    """One follow-up by id."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM run_follow_ups WHERE follow_up_id = ?", (follow_up_id,)
    ).fetchone()
    return None if row is None else _row(row)


def _destination_problem(conn: sqlite3.Connection, run: RunRow) -> str | None:
    """Why ``run`` cannot take a follow-up, or ``None``."""
    row = conn.execute(
        "SELECT execution_mode, parent_run_id FROM runs WHERE run_id = ?", (run.run_id,)
    ).fetchone()
    if row[1] is not None:
        return (
            f"run {run.run_id} is a child run of {row[1]}: a child's end is its parent's"
            f" progress, not news for the session; queue the follow-up on its root run"
        )
    if row[0] == "detached":
        return (
            f"run {run.run_id} is detached: its headless Pi stops when the run ends, so a"
            " follow-up would reach no one; start the run from a Pi session to queue them"
        )
    if run.origin_session is None:
        return (
            f"run {run.run_id} has no origin session (it was started outside Pi without"
            " --session), so a follow-up has no session to be sent to; start runs from Pi, or"
            " with 'pi-workflows run start NAME --session ID'"
        )
    if run.status in TERMINAL_REASONS or run.status is RunStatus.COMPLETED:
        return (
            f"run {run.run_id} has ended ({run.status.value}): follow-ups are queued while a"
            " run goes on; ask in its session directly"
        )
    return None


def queue(
    db: Database, run_id: str, text: str, *, created_by: str | None = None
) -> tuple[FollowUp, int]:
    """Queue ``text`` as the run's next follow-up (one run write, event
    ``followUp.queued``); the follow-up and the run's revision. ``FollowUpRefusedError``
    (nothing changed) for a run with nowhere to send it, an ended run, an empty or too long
    text, or a run with ``MAX_WAITING`` follow-ups waiting."""
    if not text.strip():
        raise FollowUpRefusedError(run_id, "the follow-up's text is empty")
    if len(text) > MAX_TEXT_CHARS:
        raise FollowUpRefusedError(
            run_id,
            f"the follow-up is {len(text)} characters long; the limit is {MAX_TEXT_CHARS}",
        )
    made: list[FollowUp] = []
    data: dict[str, Any] = {}

    def apply(tx: Transaction, run: RunRow) -> None:
        problem = _destination_problem(tx.conn, run)
        if problem is not None:
            raise FollowUpRefusedError(run_id, problem)
        waiting = tx.conn.execute(
            "SELECT COUNT(*) FROM run_follow_ups WHERE run_id = ? AND status IN"
            " ('queued', 'ready')",
            (run_id,),
        ).fetchone()[0]
        if waiting >= MAX_WAITING:
            raise FollowUpRefusedError(
                run_id,
                f"run {run_id} already has {waiting} follow-ups waiting; the limit is"
                f" {MAX_WAITING} (remove one with 'pi-workflows run follow-up remove')",
            )
        seq = (
            1
            + tx.conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM run_follow_ups WHERE run_id = ?", (run_id,)
            ).fetchone()[0]
        )
        follow_up_id = new_id("fup")
        assert run.origin_session is not None  # _destination_problem refused otherwise
        tx.conn.execute(
            "INSERT INTO run_follow_ups (follow_up_id, run_id, seq, text, origin_session,"
            " status, created_by, created_at) VALUES (?, ?, ?, ?, ?, 'queued', ?, ?)",
            (follow_up_id, run_id, seq, text, run.origin_session, created_by, tx.now),
        )
        data.update({"followUpId": follow_up_id, "seq": seq, "chars": len(text)})
        made.append(
            FollowUp(
                follow_up_id, run_id, seq, text, "queued", None, None, created_by, tx.now, None
            )
        )

    result = write_run(
        db,
        run_id,
        name="follow_ups.change",
        event_type=QUEUED_EVENT,
        event_data=data,
        claim=None,
        apply=apply,
    )
    return made[0], result.revision


def remove(db: Database, follow_up_id: str, *, run_id: str | None = None) -> tuple[FollowUp, int]:
    """Remove a queued follow-up (event ``followUp.removed``); it and the run's revision.
    ``FollowUpNotFoundError`` for an unknown id (or one of another run than ``run_id``),
    ``FollowUpRefusedError`` for one that is no longer queued (being sent, sent,
    cancelled or removed)."""
    with db.read() as conn:
        found = read(conn, follow_up_id)
    if found is None or (run_id is not None and found.run_id != run_id):
        raise FollowUpNotFoundError(follow_up_id)
    removed: list[FollowUp] = []

    def apply(tx: Transaction, run: RunRow) -> None:
        current = read(tx.conn, follow_up_id)
        assert current is not None  # rows are deleted only with their run
        if current.status != "queued":
            why = {
                "ready": "it is being sent (the run completed and its result was delivered)",
                "sent": "it was sent",
                "cancelled": f"it was cancelled ({current.reason})",
                "removed": "it was removed already",
            }[current.status]
            raise FollowUpRefusedError(
                run.run_id, f"follow-up {follow_up_id} cannot be removed: {why}"
            )
        tx.conn.execute(
            "UPDATE run_follow_ups SET status = 'removed', settled_at = ? WHERE follow_up_id = ?",
            (tx.now, follow_up_id),
        )
        removed.append(current)

    result = write_run(
        db,
        found.run_id,
        name="follow_ups.change",
        event_type=REMOVED_EVENT,
        event_data={"followUpId": follow_up_id, "seq": found.seq},
        claim=None,
        apply=apply,
    )
    return removed[0], result.revision


def cancel_waiting(tx: Transaction, run_id: str, status: RunStatus) -> int:
    """Inside a run's terminal transition to ``status`` (failed, timed out, cancelled):
    cancel its queued follow-ups with the reason; how many."""
    reason = TERMINAL_REASONS.get(status)
    if reason is None:
        return 0
    cursor = tx.conn.execute(
        "UPDATE run_follow_ups SET status = 'cancelled', reason = ?, settled_at = ?"
        " WHERE run_id = ? AND status = 'queued'",
        (f"{reason}; a follow-up is sent only after a run completes", tx.now, run_id),
    )
    return cursor.rowcount


def release(tx: Transaction, run: RunRow, terminal_body: Any) -> list[str]:
    """Inside the write that marks the run's terminal message ``sent``: when it says the
    run completed (and the run still is), record a ``followUp`` message for each queued
    follow-up in order, each ``ready`` with its message; the new message ids."""
    completed = isinstance(terminal_body, dict) and terminal_body.get("status") == "completed"
    if not completed or run.status is not RunStatus.COMPLETED:
        return []
    made: list[str] = []
    for follow_up in [f for f in list_of(tx.conn, run.run_id) if f.status == "queued"]:
        row = tx.conn.execute(
            "SELECT origin_session FROM run_follow_ups WHERE follow_up_id = ?",
            (follow_up.follow_up_id,),
        ).fetchone()
        body = {
            "runId": run.run_id,
            "workflow": run.workflow_name,
            "followUpId": follow_up.follow_up_id,
            "seq": follow_up.seq,
            "text": follow_up.text,
        }
        message_id = messages.record(
            tx, run.run_id, f"followUp:{follow_up.follow_up_id}", "followUp", body, row[0]
        )
        assert message_id is not None  # one source key per follow-up, released once
        tx.conn.execute(
            "UPDATE run_follow_ups SET status = 'ready', message_id = ? WHERE follow_up_id = ?",
            (message_id, follow_up.follow_up_id),
        )
        made.append(message_id)
    return made


def mark_sent(tx: Transaction, message_ids: list[str]) -> None:
    """Inside the write that marks workflow messages ``sent``: their follow-ups are sent."""
    for message_id in message_ids:
        tx.conn.execute(
            "UPDATE run_follow_ups SET status = 'sent', settled_at = ?"
            " WHERE message_id = ? AND status = 'ready'",
            (tx.now, message_id),
        )


__all__ = [
    "EVENTS",
    "MAX_TEXT_CHARS",
    "MAX_WAITING",
    "FollowUp",
    "cancel_waiting",
    "list_of",
    "mark_sent",
    "queue",
    "read",
    "release",
    "remove",
]
