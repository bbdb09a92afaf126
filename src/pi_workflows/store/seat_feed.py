"""What a seat outside the server's own sessions reads and records: the feed of workflow
messages (notices, terminal messages, decisions and questions, of every run), one
decision's resolution, and a refused answer kept in the run's history.

Runs in the server (``server/handlers/channels.py``); the channel process reads these
through the client protocol. The feed is read-only; the refusal is one presentation event
(``runs.PRESENTATION_EVENTS``): it never changes what a runner reads, and never a
decision's outcome.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from pi_workflows.store import jsoncol
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import RequestClosedError
from pi_workflows.store.runs import RunRow, WriteResult, write_run

__all__ = ["FEED_KINDS", "decision_of", "feed", "record_refusal"]

FEED_KINDS = ("notification", "terminal", "decision", "question")
"""The workflow messages a channel may carry to a person (never a model's step)."""


def feed(conn: sqlite3.Connection, after: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    """The feed's messages after the cursor ``after``, oldest first, and the next cursor.

    The cursor is the message row's ``rowid``: a message recorded later has a larger one
    (a pruned run's rows going away can only make a cursor skip what no longer exists)."""
    marks = ",".join("?" * len(FEED_KINDS))
    rows = conn.execute(
        "SELECT m.rowid, m.message_id, m.run_id, r.workflow_name, m.kind, m.request_id,"
        " m.body_json, m.origin_session, m.created_at, r.status"
        f" FROM workflow_messages m JOIN runs r USING (run_id) WHERE m.rowid > ?"
        f" AND m.kind IN ({marks}) ORDER BY m.rowid LIMIT ?",
        (after, *FEED_KINDS, limit),
    ).fetchall()
    messages = [
        {
            "cursor": row[0],
            "messageId": row[1],
            "runId": row[2],
            "workflow": row[3],
            "kind": row[4],
            "requestId": row[5],
            "body": jsoncol.loads(row[6]),
            "originSession": row[7],
            "createdAt": row[8],
            "runStatus": row[9],
        }
        for row in rows
    ]
    return messages, (rows[-1][0] if rows else after)


def decision_of(conn: sqlite3.Connection, request_id: str) -> dict[str, Any] | None:
    """A decision's state: ``pending``, or its one resolution and who won (None: no such
    decision)."""
    row = conn.execute(
        "SELECT d.status, q.run_id, q.request_json, q.deadline_at, x.resolution, x.choice_id,"
        " x.resolved_by, x.resolved_at, d.timeout_choice FROM human_decisions d"
        " JOIN interactive_requests q ON q.request_id = d.decision_id"
        " LEFT JOIN human_decision_resolutions x ON x.decision_id = d.decision_id"
        " WHERE d.decision_id = ?",
        (request_id,),
    ).fetchone()
    if row is None:
        return None
    return {
        "requestId": request_id,
        "runId": row[1],
        "status": row[0],
        "request": jsoncol.loads(row[2]),
        "deadlineAt": row[3],
        "timeoutChoice": row[8],
        "resolution": row[4],
        "choice": row[5],
        "resolvedBy": row[6],
        "resolvedAt": row[7],
    }


def record_refusal(
    db: Database, run_id: str, request_id: str, *, seat: str, person: str, reason: str
) -> WriteResult:
    """Keep in the run's history that ``person`` tried to answer ``request_id`` on ``seat``
    and was refused (``reason``); refused itself when the request is not the run's."""

    def check(tx: Transaction, run: RunRow) -> None:
        found = tx.conn.execute(
            "SELECT run_id FROM interactive_requests WHERE request_id = ?", (request_id,)
        ).fetchone()
        if found is None or found[0] != run_id:
            raise RequestClosedError(request_id, "unknown")

    return write_run(
        db,
        run_id,
        name="seat_feed.refusal",
        event_type="decision.refused",
        event_data={"requestId": request_id, "seat": seat, "person": person, "reason": reason},
        claim=None,
        apply=check,
    )
