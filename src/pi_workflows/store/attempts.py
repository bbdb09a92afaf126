"""Node attempts: one row per execution of a node, at most one unfinished per run.

Owns the ``node_attempts`` table. Functions here run inside a run write's transaction and
never bump revisions or append events themselves (``runs.write_run`` does that).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from pi_workflows.store import values
from pi_workflows.store.database import Transaction
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.ids import new_id
from pi_workflows.store.states import AttemptStatus


@dataclass(frozen=True)
class Attempt:
    """A ``node_attempts`` row."""

    attempt_id: str
    run_id: str
    node_id: str
    visit: int
    attempt_no: int
    generation: int
    status: AttemptStatus
    error: str | None
    try_no: int = 1  # which try of the visit's current round of retries
    # The run's settings change it started with (None: a fork's carried attempt).
    settings_change: int | None = 0


_COLUMNS = (
    "attempt_id, run_id, node_id, visit, attempt_no, generation, status, error, try_no,"
    " settings_change"
)


def _attempt(row: sqlite3.Row) -> Attempt:
    return Attempt(
        attempt_id=row[0],
        run_id=row[1],
        node_id=row[2],
        visit=row[3],
        attempt_no=row[4],
        generation=row[5],
        status=AttemptStatus(row[6]),
        error=row[7],
        try_no=row[8],
        settings_change=row[9],
    )


SETTLING_REVISION = "(SELECT r.revision + 1 FROM runs r WHERE r.run_id = node_attempts.run_id)"
"""The revision the settling write's event will have: a settle runs inside a run write,
before ``runs.finish_change`` bumps the revision (once per run per commit)."""


def unfinished(conn: sqlite3.Connection, run_id: str) -> Attempt | None:
    """The run's unfinished (running or waiting) attempt, if any."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM node_attempts WHERE run_id = ?"
        " AND status IN ('running', 'waiting')",
        (run_id,),
    ).fetchone()
    return None if row is None else _attempt(row)


def read_attempt(conn: sqlite3.Connection, attempt_id: str) -> Attempt | None:
    """One attempt by id."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM node_attempts WHERE attempt_id = ?", (attempt_id,)
    ).fetchone()
    return None if row is None else _attempt(row)


def list_attempts(conn: sqlite3.Connection, run_id: str) -> list[Attempt]:
    """Every attempt of a run, oldest first."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM node_attempts WHERE run_id = ? ORDER BY started_at, rowid",
        (run_id,),
    ).fetchall()
    return [_attempt(row) for row in rows]


def start(
    tx: Transaction,
    run_id: str,
    node_id: str,
    generation: int,
    *,
    round_no: int = 0,
    deadline_at: int | None = None,
) -> Attempt:
    """Open a running attempt of ``node_id`` in round ``round_no``.

    The visit repeats when the node's last attempt was interrupted (a crash retry of the
    same visit: the same try again), retried (the next try) or exhausted (a person resumed
    it: try 1 of a fresh round), and advances otherwise (a loop back into the node).
    ``deadline_at`` is the node deadline the server enforces.
    """
    current = unfinished(tx.conn, run_id)
    if current is not None:
        raise InvalidTransitionError(
            run_id,
            f"start node {node_id}",
            "running",
            f"attempt {current.attempt_id} of node {current.node_id} is still {current.status}",
        )
    last = tx.conn.execute(
        "SELECT visit, attempt_no, status, try_no FROM node_attempts WHERE run_id = ?"
        " AND round = ? AND node_id = ? ORDER BY visit DESC, attempt_no DESC LIMIT 1",
        (run_id, round_no, node_id),
    ).fetchone()
    try_no = 1
    if last is None:
        visit, attempt_no = 1, 1
    elif last[2] in _SAME_VISIT:
        visit, attempt_no = last[0], last[1] + 1
        try_no = _next_try(AttemptStatus(last[2]), last[3])
    else:
        visit, attempt_no = last[0] + 1, 1
    attempt_id = new_id("att")
    # The attempt sees the run's settings as they are now: only later attempts see a change.
    change = int(
        tx.conn.execute(
            "INSERT INTO node_attempts (attempt_id, run_id, round, node_id, visit, attempt_no,"
            " generation, status, try_no, deadline_at, started_at, settings_change)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?,"
            " (SELECT settings_change FROM runs WHERE run_id = ?)) RETURNING settings_change",
            (
                attempt_id, run_id, round_no, node_id, visit, attempt_no, generation, try_no,
                deadline_at, tx.now, run_id,
            ),
        ).fetchone()[0]
    )  # fmt: skip
    return Attempt(
        attempt_id,
        run_id,
        node_id,
        visit,
        attempt_no,
        generation,
        AttemptStatus.RUNNING,
        None,
        try_no,
        change,
    )


_SAME_VISIT = frozenset({AttemptStatus.INTERRUPTED, AttemptStatus.RETRIED, AttemptStatus.EXHAUSTED})
"""After an attempt in one of these statuses the same visit runs again."""


def _next_try(last: AttemptStatus, try_no: int) -> int:
    """The try number after an attempt of the same visit that ended ``last``."""
    if last is AttemptStatus.RETRIED:
        return try_no + 1
    if last is AttemptStatus.EXHAUSTED:
        return 1  # a person resumed it: a fresh round of tries
    return try_no  # an interrupted attempt (a crash, a pause) does not use up a try


def settle_for_retry(
    tx: Transaction, attempt: Attempt, outcome: AttemptStatus, error: str, *, exhausted: bool
) -> None:
    """Settle ``attempt`` (unfinished, or the ``timed_out`` one the server settled and the
    runner now routes) as ``retried`` (the next try follows) or ``exhausted`` (the run
    parks until a person resumes it), keeping the outcome it ended with."""
    if outcome not in (AttemptStatus.FAILED, AttemptStatus.TIMED_OUT):
        raise ValueError(f"only a failed or timed-out attempt is retried, not {outcome}")
    status = AttemptStatus.EXHAUSTED if exhausted else AttemptStatus.RETRIED
    cursor = tx.conn.execute(
        "UPDATE node_attempts SET status = ?, retry_outcome = ?, output_json = NULL,"
        " output_ref = NULL, error = ?, finished_at = COALESCE(finished_at, ?),"
        f" finished_revision = COALESCE(finished_revision, {SETTLING_REVISION})"
        " WHERE attempt_id = ? AND (status IN ('running', 'waiting')"
        " OR (status = 'timed_out' AND ? = 'timed_out'))",
        (status.value, outcome.value, error, tx.now, attempt.attempt_id, outcome.value),
    )
    if cursor.rowcount != 1:
        raise InvalidTransitionError(
            attempt.run_id, f"retry attempt {attempt.attempt_id}", "already finished"
        )


def settle(
    tx: Transaction,
    attempt: Attempt,
    status: AttemptStatus,
    *,
    output: Any = None,
    error: str | None = None,
) -> None:
    """Finish an unfinished attempt with ``status`` and its output (stored by ``values``)
    or error."""
    inline, ref = values.store(tx, output)
    cursor = tx.conn.execute(
        "UPDATE node_attempts SET status = ?, output_json = ?, output_ref = ?, error = ?,"
        f" finished_at = ?, finished_revision = {SETTLING_REVISION}"
        " WHERE attempt_id = ? AND status IN ('running', 'waiting')",
        (
            status.value,
            inline,
            ref,
            error,
            tx.now,
            attempt.attempt_id,
        ),
    )
    if cursor.rowcount != 1:
        raise InvalidTransitionError(
            attempt.run_id, f"settle attempt {attempt.attempt_id}", "already finished"
        )


def set_waiting(tx: Transaction, attempt: Attempt) -> None:
    """Mark a running attempt as waiting on an interactive request."""
    cursor = tx.conn.execute(
        "UPDATE node_attempts SET status = 'waiting' WHERE attempt_id = ? AND status = 'running'",
        (attempt.attempt_id,),
    )
    if cursor.rowcount != 1:
        raise InvalidTransitionError(
            attempt.run_id, f"wait in attempt {attempt.attempt_id}", attempt.status.value
        )


def close_unfinished(
    tx: Transaction,
    run_id: str,
    status: AttemptStatus,
    *,
    only_running: bool = False,
    error: str | None = None,
) -> str | None:
    """Close the run's unfinished attempt (if any) with ``status`` (and ``error``, such as
    ``PARKED_MARK`` for an attempt a person's pause or a server stop interrupted); return its
    id. With ``only_running`` a waiting attempt stays open (its request outlives a park).
    """
    current = unfinished(tx.conn, run_id)
    if current is None or (only_running and current.status is not AttemptStatus.RUNNING):
        return None
    settle(tx, current, status, error=error)
    return current.attempt_id


PARKED_MARK = "parked ("
"""How the error of an attempt that a pause or a server stop interrupted begins
(``parked (userPaused)``): such an attempt did not end its runner, so it is not a crash."""


def crash_tries(conn: sqlite3.Connection, attempt: Attempt) -> int:
    """How many attempts of ``attempt``'s node visit (in its round) ended its runner: the
    interrupted ones a pause or a stop did not interrupt, plus ``attempt`` itself (whose
    runner just ended). What the server's settlement bounds (``MAX_ATTEMPTS_PER_VISIT``)."""
    row = conn.execute(
        "SELECT COUNT(*) FROM node_attempts a JOIN node_attempts b ON b.run_id = a.run_id"
        " AND b.round = a.round AND b.node_id = a.node_id AND b.visit = a.visit"
        " WHERE a.attempt_id = ? AND b.attempt_id != a.attempt_id AND b.status = 'interrupted'"
        " AND (b.error IS NULL OR substr(b.error, 1, ?) != ?)",
        (attempt.attempt_id, len(PARKED_MARK), PARKED_MARK),
    ).fetchone()
    return int(row[0]) + 1
