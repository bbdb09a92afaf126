"""Durable waits for time or an event: sleep nodes, retry delays and ``wait_event`` nodes
(and a join's wait for its children, whose due time is a rate-limited ``fan_out``'s next
start: ``children._pace``).

Owns the ``run_waits`` table. While a wait is ``pending`` its run is waiting (or paused)
with no runner, no claim and no process; at most one is pending per run. A wait ends once:
``fired`` when its time came (a sleep's wake time, a retry's delay, an event wait's
timeout), ``signalled`` when the event arrived (``signals.send``), ``cancelled`` with its
run (cancel, restart). The row functions run inside a run write's transaction and never
bump revisions themselves; firing due waits is ``takeover.fire_due_waits``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from pi_workflows.protocol import iso_ms
from pi_workflows.store.database import Transaction
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.ids import new_id

KINDS: Final = ("sleep", "retry", "event", "children")


@dataclass(frozen=True)
class Wait:
    """A ``run_waits`` row."""

    wait_id: str
    run_id: str
    attempt_id: str
    node_id: str
    kind: str  # sleep | retry | event
    event_name: str | None
    validates: bool
    due_at: int | None  # NULL: an event wait without a timeout
    status: str  # pending | fired | signalled | cancelled
    fired_at: int | None
    created_at: int

    def to_json(self) -> dict[str, Any]:
        """The wire form (``state.get``'s ``active.wait``, ``run.get``'s ``wait``)."""
        return {
            "waitId": self.wait_id,
            "kind": self.kind,
            "nodeId": self.node_id,
            "attemptId": self.attempt_id,
            "event": self.event_name,
            "validates": self.validates,
            "dueAt": self.due_at,
            "status": self.status,
            "firedAt": self.fired_at,
            "createdAt": self.created_at,
        }

    def describe(self) -> str:
        """One line for people: what the run waits for."""
        due = f" until {iso_time(self.due_at)}" if self.due_at is not None else ""
        match self.kind:
            case "sleep":
                return f"node {self.node_id!r} sleeps{due}"
            case "retry":
                return f"node {self.node_id!r} is tried again at {iso_time(self.due_at or 0)}"
            case "children" if self.due_at is not None:
                return (
                    f"node {self.node_id!r} waits for its child runs; its rate starts the"
                    f" next one at {iso_time(self.due_at)}"
                )
            case "children":
                return f"node {self.node_id!r} waits for its child runs"
        timeout = f" (times out at {iso_time(self.due_at)})" if self.due_at is not None else ""
        return f"node {self.node_id!r} waits for event {self.event_name!r}{timeout}"


COLUMNS = (
    "wait_id, run_id, attempt_id, node_id, kind, event_name, validates, due_at, status,"
    " fired_at, created_at"
)


def from_row(row: sqlite3.Row | tuple[Any, ...]) -> Wait:
    return Wait(
        wait_id=row[0],
        run_id=row[1],
        attempt_id=row[2],
        node_id=row[3],
        kind=row[4],
        event_name=row[5],
        validates=bool(row[6]),
        due_at=row[7],
        status=row[8],
        fired_at=row[9],
        created_at=row[10],
    )


def iso_time(ms: int | None) -> str:
    """``ms`` (epoch milliseconds) as ISO-8601 UTC text, or "" for none."""
    if ms is None:
        return ""
    try:
        return iso_ms(ms)
    except (ValueError, OverflowError, OSError):  # beyond any calendar: say the number
        return f"{ms} ms after the epoch"


def pending_of(conn: sqlite3.Connection, run_id: str) -> Wait | None:
    """The run's pending wait, if any."""
    row = conn.execute(
        f"SELECT {COLUMNS} FROM run_waits WHERE run_id = ? AND status = 'pending'", (run_id,)
    ).fetchone()
    return None if row is None else from_row(row)


def latest_of(conn: sqlite3.Connection, run_id: str) -> Wait | None:
    """The run's newest wait, whatever its status."""
    row = conn.execute(
        f"SELECT {COLUMNS} FROM run_waits WHERE run_id = ?"
        " ORDER BY created_at DESC, rowid DESC LIMIT 1",
        (run_id,),
    ).fetchone()
    return None if row is None else from_row(row)


def of_attempt(conn: sqlite3.Connection, attempt_id: str) -> Wait | None:
    """The newest wait of a waiting attempt (a sleep's or an event wait's), if any."""
    row = conn.execute(
        f"SELECT {COLUMNS} FROM run_waits WHERE attempt_id = ? AND kind != 'retry'"
        " ORDER BY created_at DESC, rowid DESC LIMIT 1",
        (attempt_id,),
    ).fetchone()
    return None if row is None else from_row(row)


def open_wait(
    tx: Transaction,
    run_id: str,
    attempt_id: str,
    node_id: str,
    kind: str,
    *,
    due_at: int | None,
    event_name: str | None = None,
    validates: bool = False,
) -> Wait:
    """Record a pending wait (the caller moves the run to ``waiting`` in the same write)."""
    if kind not in KINDS:
        raise ValueError(f"unknown wait kind {kind!r}")
    current = pending_of(tx.conn, run_id)
    if current is not None:
        raise InvalidTransitionError(
            run_id, f"wait in node {node_id}", "running", f"wait {current.wait_id} is pending"
        )
    wait_id = new_id("wt")
    tx.conn.execute(
        "INSERT INTO run_waits (wait_id, run_id, attempt_id, node_id, kind, event_name,"
        " validates, due_at, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
        (wait_id, run_id, attempt_id, node_id, kind, event_name, int(validates), due_at, tx.now),
    )
    return Wait(
        wait_id, run_id, attempt_id, node_id, kind, event_name, validates, due_at, "pending",
        None, tx.now,
    )  # fmt: skip


def rearm(tx: Transaction, wait: Wait) -> None:
    """An event wait whose event was refused (or not yet there) waits again, keeping its
    timeout."""
    cursor = tx.conn.execute(
        "UPDATE run_waits SET status = 'pending', fired_at = NULL WHERE wait_id = ?"
        " AND kind = 'event' AND status IN ('pending', 'signalled')",
        (wait.wait_id,),
    )
    if cursor.rowcount != 1:
        raise InvalidTransitionError(wait.run_id, f"wait again on {wait.wait_id}", wait.status)


def end(tx: Transaction, wait_id: str, status: str) -> bool:
    """End a pending wait as ``fired``, ``signalled`` or ``cancelled``; False if it was not
    pending (another writer ended it first: exactly one end wins)."""
    cursor = tx.conn.execute(
        "UPDATE run_waits SET status = ?, fired_at = ? WHERE wait_id = ? AND status = 'pending'",
        (status, tx.now, wait_id),
    )
    return cursor.rowcount == 1


def cancel_open(tx: Transaction, run_id: str) -> None:
    """Cancel the run's pending wait (the run ends or restarts)."""
    tx.conn.execute(
        "UPDATE run_waits SET status = 'cancelled', fired_at = ? WHERE run_id = ?"
        " AND status = 'pending'",
        (tx.now, run_id),
    )


def next_due(conn: sqlite3.Connection) -> int | None:
    """The earliest due time of a pending wait whose run waits or is paused (the ones the
    server fires; an index range), if any."""
    row = conn.execute(  # walks the due-time index in order and stops at the first
        "SELECT w.due_at FROM run_waits w JOIN runs r USING (run_id)"
        " WHERE w.status = 'pending' AND w.due_at IS NOT NULL"
        " AND r.status IN ('waiting', 'paused') ORDER BY w.due_at LIMIT 1"
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def pending_count(conn: sqlite3.Connection) -> int:
    """How many waits are pending (``server status``)."""
    row = conn.execute("SELECT COUNT(*) FROM run_waits WHERE status = 'pending'").fetchone()
    return int(row[0])
