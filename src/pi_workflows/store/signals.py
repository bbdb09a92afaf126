"""Events sent to a run (``run signal``): durable, ordered per run, consumed exactly once.

Owns the ``run_signals`` table. ``send`` is the one write a sender makes: it stores the
event (the same idempotency key again adopts the first one) and, when the run waits for an
event of that name, ends that wait as ``signalled`` and queues the run in the same
transaction. An event that finds no wait is kept until a ``wait_event`` node of its name
reaches it. A runner consumes an event only in the commit that settles its node
(``node_steps.finish_node``), or refuses it with its node's validate (``reject``), so an
event is never consumed twice and never lost.

The revision rule (``store/runs.py``): storing an event that wakes no one changes nothing a
runner reads through its state (a runner reads events only inside its own fenced
``node_steps`` proposals), so it moves ``revision`` but not ``execution_revision`` and
never makes a working runner's next proposal conflict.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from pi_workflows.protocol import fingerprint
from pi_workflows.store import values, waits
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidTransitionError, ReceiptConflictError
from pi_workflows.store.ids import new_id
from pi_workflows.store.runs import RunRow, finish_change, read_run, write_run
from pi_workflows.store.states import TERMINAL_STATUSES, NextCommand, Operation, RunStatus
from pi_workflows.store.transitions import apply_transition

RECEIVED_EVENT = "signal.received"
"""The event type of a stored signal that woke no wait (``runs.OUTSIDE_EXECUTION_EVENTS``)."""


@dataclass(frozen=True)
class Signal:
    """A ``run_signals`` row (its data decoded)."""

    signal_id: str
    run_id: str
    name: str
    seq: int
    data: Any
    status: str  # pending | consumed | rejected | discarded
    attempt_id: str | None
    error: str | None
    sent_by: str | None
    created_at: int
    settled_at: int | None
    data_ref: str | None = None  # the blob digest when the data is stored by reference

    def summary(self) -> dict[str, Any]:
        """The wire form without the data (``run.get``'s ``signals``)."""
        return {
            "signalId": self.signal_id,
            "name": self.name,
            "seq": self.seq,
            "status": self.status,
            "attemptId": self.attempt_id,
            "error": self.error,
            "sentBy": self.sent_by,
            "createdAt": self.created_at,
            "settledAt": self.settled_at,
        }


@dataclass(frozen=True)
class Sent:
    """What ``send`` committed (or adopted)."""

    signal: Signal
    revision: int
    woke: bool  # it ended the run's event wait and queued the run
    validates: bool  # the wait it woke validates events (the sender's reply is held)
    adopted: bool  # the same key was sent before: this is that signal


_COLUMNS = (
    "signal_id, run_id, name, seq, data_json, data_ref, status, attempt_id, error, sent_by,"
    " created_at, settled_at"
)


def _signal(conn: sqlite3.Connection, row: sqlite3.Row | tuple[Any, ...]) -> Signal:
    return Signal(
        signal_id=row[0],
        run_id=row[1],
        name=row[2],
        seq=row[3],
        data=values.load(conn, row[4], row[5]),
        status=row[6],
        attempt_id=row[7],
        error=row[8],
        sent_by=row[9],
        created_at=row[10],
        settled_at=row[11],
        data_ref=row[5],
    )


def read_signal(conn: sqlite3.Connection, signal_id: str) -> Signal | None:
    """One signal by id."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM run_signals WHERE signal_id = ?", (signal_id,)
    ).fetchone()
    return None if row is None else _signal(conn, row)


def next_pending(conn: sqlite3.Connection, run_id: str, name: str) -> Signal | None:
    """The oldest pending signal named ``name`` of the run (an index range), if any."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM run_signals WHERE run_id = ? AND name = ?"
        " AND status = 'pending' ORDER BY seq LIMIT 1",
        (run_id, name),
    ).fetchone()
    return None if row is None else _signal(conn, row)


def list_signals(conn: sqlite3.Connection, run_id: str, limit: int = 50) -> list[Signal]:
    """The run's newest signals, oldest first (at most ``limit``)."""
    rows = conn.execute(
        f"SELECT * FROM (SELECT {_COLUMNS} FROM run_signals WHERE run_id = ?"
        " ORDER BY seq DESC LIMIT ?) ORDER BY seq",
        (run_id, limit),
    ).fetchall()
    return [_signal(conn, row) for row in rows]


def pending_count(conn: sqlite3.Connection, run_id: str) -> int:
    """How many of the run's signals wait to be consumed."""
    return int(
        conn.execute(
            "SELECT COUNT(*) FROM run_signals WHERE run_id = ? AND status = 'pending'", (run_id,)
        ).fetchone()[0]
    )


def send(
    db: Database,
    run_id: str,
    name: str,
    data: Any,
    *,
    idempotency_key: str | None,
    sent_by: str | None,
) -> Sent:
    """Store an event for the run; wake its wait for ``name`` if it has one.

    Refused for a run that has ended (nothing is stored). The same ``idempotency_key`` with
    the same name and data returns the first signal (``adopted``); with other ones it is a
    ``ReceiptConflictError``. A waiting run whose pending event wait is named ``name`` has
    the wait ended ``signalled`` and is queued; a paused one keeps its pause and continues
    at ``run resume``; any other run keeps the event for its first wait of that name.
    """
    digest = fingerprint({"name": name, "data": data})
    with db.atomic("signals.send") as tx:
        run = read_run(tx.conn, run_id)
        if idempotency_key is not None:
            row = tx.conn.execute(
                f"SELECT {_COLUMNS}, fingerprint FROM run_signals WHERE run_id = ?"
                " AND idempotency_key = ?",
                (run_id, idempotency_key),
            ).fetchone()
            if row is not None:
                if row[-1] != digest:
                    raise ReceiptConflictError(f"run:{run_id}", idempotency_key, "run.signal")
                return Sent(_signal(tx.conn, row[:-1]), run.revision, False, False, True)
        if run.status in TERMINAL_STATUSES:
            raise InvalidTransitionError(
                run_id, f"send event {name!r} to", run.status.value,
                "a run that has ended takes no events",
            )  # fmt: skip
        wait = waits.pending_of(tx.conn, run_id)
        wakes = wait is not None and wait.kind == "event" and wait.event_name == name
        seq = int(
            tx.conn.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM run_signals WHERE run_id = ?", (run_id,)
            ).fetchone()[0]
        )
        signal_id = new_id("sig")
        inline, ref = values.store(tx, data)
        tx.conn.execute(
            "INSERT INTO run_signals (signal_id, run_id, name, seq, data_json, data_ref,"
            " idempotency_key, fingerprint, sent_by, status, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
            (signal_id, run_id, name, seq, inline, ref, idempotency_key, digest, sent_by, tx.now),
        )
        event = {"signalId": signal_id, "name": name, "seq": seq}
        if wakes:
            assert wait is not None
            waits.end(tx, wait.wait_id, "signalled")
            if run.status is RunStatus.WAITING:
                apply_transition(tx, run, Operation.RESUME, next_command=NextCommand.RESUME)
            result = finish_change(tx, run_id, run.revision, "signal.woke", event)
        else:
            result = finish_change(tx, run_id, run.revision, RECEIVED_EVENT, event)
        signal = Signal(
            signal_id, run_id, name, seq, data, "pending", None, None, sent_by, tx.now, None, ref
        )
        return Sent(signal, result.revision, wakes, bool(wakes and wait and wait.validates), False)


def discard_pending(tx: Transaction, run_id: str) -> int:
    """The run restarts: events its old round never took are ``discarded`` (a new round
    takes no events sent to the old one), and their idempotency keys are freed, so the same
    event sent again with the same key is a new event for the new round instead of an
    adoption of one the new round will never take. Returns how many."""
    cursor = tx.conn.execute(
        "UPDATE run_signals SET status = 'discarded', settled_at = ?, idempotency_key = NULL"
        " WHERE run_id = ? AND status = 'pending'",
        (tx.now, run_id),
    )
    return cursor.rowcount


def consume(tx: Transaction, run_id: str, signal_id: str, attempt_id: str) -> None:
    """Mark a pending signal of the run consumed by ``attempt_id`` (inside the write that
    settles that attempt)."""
    cursor = tx.conn.execute(
        "UPDATE run_signals SET status = 'consumed', attempt_id = ?, settled_at = ?"
        " WHERE signal_id = ? AND run_id = ? AND status = 'pending'",
        (attempt_id, tx.now, signal_id, run_id),
    )
    if cursor.rowcount != 1:
        raise InvalidTransitionError(
            run_id, f"consume event {signal_id} in", "running", "it is not a pending event"
        )


def reject(db: Database, claim: Claim, signal_id: str, error: str) -> None:
    """The node's validate refused a signal: it is rejected with ``error`` (never consumed);
    the runner then looks for the next one or waits again."""

    def apply(tx: Transaction, run: RunRow) -> None:
        if run.status is not RunStatus.RUNNING:
            raise InvalidTransitionError(run.run_id, "reject an event of", run.status.value)
        cursor = tx.conn.execute(
            "UPDATE run_signals SET status = 'rejected', error = ?, settled_at = ?"
            " WHERE signal_id = ? AND run_id = ? AND status = 'pending'",
            (error, tx.now, signal_id, run.run_id),
        )
        if cursor.rowcount != 1:
            raise InvalidTransitionError(
                run.run_id, f"reject event {signal_id} of", run.status.value, "it is not pending"
            )

    write_run(
        db,
        claim.run_id,
        name="signals.reject",
        event_type="signal.rejected",
        event_data={"signalId": signal_id, "error": error},
        claim=claim,
        apply=apply,
    )
