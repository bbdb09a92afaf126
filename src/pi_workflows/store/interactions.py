"""Interactive requests, submissions and human decisions (one resolution each).

Owns ``interactive_requests``, ``interactive_submissions``, ``human_decisions`` and
``human_decision_resolutions``. Functions here run inside a run write's transaction and
never bump revisions or append events themselves.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from pi_workflows.store import jsoncol, values
from pi_workflows.store.database import Transaction
from pi_workflows.store.ids import new_id


@dataclass(frozen=True)
class InteractionDraft:
    """What a runner asks for when a node needs an answer from outside.

    ``kind`` is ``checkpoint``, ``agent`` or ``decision``; a decision carries its
    ``choices`` (ids) and optional ``timeout_choice``. ``timeout_ms`` is measured from the
    commit by the store clock and becomes the durable deadline.
    """

    kind: str
    request: dict[str, Any]
    timeout_ms: int | None = None
    origin_session: str | None = None
    choices: list[str] = field(default_factory=list)
    timeout_choice: str | None = None


@dataclass(frozen=True)
class Interaction:
    """An ``interactive_requests`` row."""

    request_id: str
    run_id: str
    attempt_id: str
    node_id: str
    kind: str
    status: str
    request: Any
    answer: Any
    deadline_at: int | None


_COLUMNS = (
    "request_id, run_id, attempt_id, node_id, kind, status, request_json, answer_json, deadline_at,"
    " answer_ref"
)


def _interaction(conn: sqlite3.Connection, row: sqlite3.Row) -> Interaction:
    return Interaction(
        request_id=row[0],
        run_id=row[1],
        attempt_id=row[2],
        node_id=row[3],
        kind=row[4],
        status=row[5],
        request=jsoncol.loads(row[6]),
        answer=values.load(conn, row[7], row[9]),
        deadline_at=row[8],
    )


def read_request(conn: sqlite3.Connection, request_id: str) -> Interaction | None:
    """One request by id."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM interactive_requests WHERE request_id = ?", (request_id,)
    ).fetchone()
    return None if row is None else _interaction(conn, row)


def open_request_of(conn: sqlite3.Connection, run_id: str) -> Interaction | None:
    """The run's open (pending or validating) request, if any."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM interactive_requests WHERE run_id = ?"
        " AND status IN ('pending', 'validating')",
        (run_id,),
    ).fetchone()
    return None if row is None else _interaction(conn, row)


def open_request(
    tx: Transaction, run_id: str, attempt_id: str, node_id: str, draft: InteractionDraft
) -> str:
    """Record a pending request (and its decision row) and return the request id."""
    request_id = new_id("req")
    tx.conn.execute(
        "INSERT INTO interactive_requests (request_id, run_id, attempt_id, node_id, kind, status,"
        " request_json, deadline_at, origin_session, created_at)"
        " VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)",
        (
            request_id,
            run_id,
            attempt_id,
            node_id,
            draft.kind,
            jsoncol.dumps(draft.request),
            None if draft.timeout_ms is None else tx.now + draft.timeout_ms,
            draft.origin_session,
            tx.now,
        ),
    )
    if draft.kind == "decision":
        tx.conn.execute(
            "INSERT INTO human_decisions (decision_id, run_id, choices_json, timeout_choice,"
            " status, created_at) VALUES (?, ?, ?, ?, 'pending', ?)",
            (request_id, run_id, jsoncol.dumps(draft.choices), draft.timeout_choice, tx.now),
        )
    return request_id


def settle_request(tx: Transaction, request_id: str, status: str, answer: Any = None) -> bool:
    """Close an open request as ``answered``, ``timed_out`` or ``cancelled``.

    Returns False when it was already closed (the first settlement wins).
    """
    cursor = tx.conn.execute(
        "UPDATE interactive_requests SET status = ?, answer_json = ?, answer_ref = ?,"
        " settled_at = ? WHERE request_id = ? AND status IN ('pending', 'validating')",
        (status, *values.store(tx, answer), tx.now, request_id),
    )
    return cursor.rowcount == 1


def resolve_decision(
    tx: Transaction,
    decision_id: str,
    resolution: str,
    choice_id: str | None,
    resolved_by: str | None,
) -> bool:
    """Write the one resolution of a pending decision; False if it was already resolved."""
    cursor = tx.conn.execute(
        "UPDATE human_decisions SET status = 'resolved' WHERE decision_id = ?"
        " AND status = 'pending'",
        (decision_id,),
    )
    if cursor.rowcount != 1:
        return False
    tx.conn.execute(
        "INSERT INTO human_decision_resolutions (decision_id, resolution, choice_id,"
        " resolved_by, resolved_at) VALUES (?, ?, ?, ?, ?)",
        (decision_id, resolution, choice_id, resolved_by, tx.now),
    )
    return True


def cancel_open(tx: Transaction, run_id: str) -> list[str]:
    """Cancel the run's open requests, rejected-pending submissions and pending decisions."""
    rows = tx.conn.execute(
        "SELECT request_id, kind FROM interactive_requests WHERE run_id = ?"
        " AND status IN ('pending', 'validating')",
        (run_id,),
    ).fetchall()
    cancelled: list[str] = []
    for request_id, kind in rows:
        settle_request(tx, request_id, "cancelled")
        tx.conn.execute(
            "UPDATE interactive_submissions SET status = 'rejected', error = 'run cancelled',"
            " settled_at = ? WHERE request_id = ? AND status = 'validating'",
            (tx.now, request_id),
        )
        if kind == "decision":
            resolve_decision(tx, request_id, "cancelled", None, None)
        cancelled.append(request_id)
    return cancelled


def due_requests(conn: sqlite3.Connection, now: int) -> list[str]:
    """Open requests whose deadline has passed at ``now``, oldest deadline first."""
    rows = conn.execute(
        "SELECT request_id FROM interactive_requests WHERE status IN ('pending', 'validating')"
        " AND deadline_at IS NOT NULL AND deadline_at <= ? ORDER BY deadline_at",
        (now,),
    ).fetchall()
    return [row[0] for row in rows]


def next_deadline(conn: sqlite3.Connection) -> int | None:
    """The earliest deadline of any open request."""
    row = conn.execute(
        "SELECT MIN(deadline_at) FROM interactive_requests WHERE status IN ('pending',"
        " 'validating') AND deadline_at IS NOT NULL"
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def timeout_choice(conn: sqlite3.Connection, decision_id: str) -> str | None:
    """The default choice of a decision, if it has one."""
    row = conn.execute(
        "SELECT timeout_choice FROM human_decisions WHERE decision_id = ?", (decision_id,)
    ).fetchone()
    return None if row is None else row[0]
