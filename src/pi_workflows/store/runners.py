"""Runner records: launch envelopes, process identities, exits, and replayable replies.

Owns ``run_runners``, ``runner_processes``, ``runner_messages`` and ``server_state``. A
runner's launch is recorded in the same transaction as the claim it runs under, before the
child is spawned, and every process group the runner starts is recorded before its command
runs, so a crash at any point leaves either nothing or a record that recovery can settle.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pi_workflows.store import jsoncol
from pi_workflows.store.claiming import claim as claim_run
from pi_workflows.store.claims import Claim, check_and_renew, read_lease
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.states import NextCommand
from pi_workflows.store.takeover import runner_owner_id


@dataclass(frozen=True)
class Launch:
    """A committed runner launch: the claim the server holds for it and what to send."""

    claim: Claim
    runner_epoch: int
    command: NextCommand
    envelope: dict[str, Any]
    revision: int


@dataclass(frozen=True)
class RunnerRecord:
    """A ``run_runners`` row that has not exited."""

    runner_epoch: int
    run_id: str
    generation: int
    server_epoch: int
    pid: int | None
    process_start: float | None
    status: str
    ready_revision: int | None


def bump_server_epoch(db: Database, pid: int) -> int:
    """Start a new server epoch (before any work is handled) and return it."""
    with db.atomic("server.epoch") as tx:
        tx.conn.execute(
            "UPDATE server_state SET epoch = epoch + 1, pid = ?, started_at = ?, heartbeat_at = ?"
            " WHERE id = 1",
            (pid, tx.now, tx.now),
        )
        return int(tx.conn.execute("SELECT epoch FROM server_state WHERE id = 1").fetchone()[0])


def launch(
    db: Database,
    run_id: str,
    server_epoch: int,
    envelope: Callable[[Transaction, int, int], dict[str, Any]],
) -> Launch:
    """Claim a queued run for a new runner and record its launch, in one transaction.

    ``envelope(tx, runner_epoch, generation)`` builds the launch envelope from the run's
    committed rows; it is stored before the caller spawns anything.
    """
    with db.atomic("runners.launch") as tx:
        lease = read_lease(tx.conn, run_id)
        generation = (lease.generation if lease else 0) + 1
        cursor = tx.conn.execute(
            "INSERT INTO run_runners (run_id, generation, server_epoch, command, launch_json,"
            " status, created_at) SELECT ?, ?, ?, next_command, '{}', 'launching', ?"
            " FROM run_queue WHERE run_id = ?",
            (run_id, generation, server_epoch, tx.now, run_id),
        )
        runner_epoch = int(cursor.lastrowid or 0)
        claimed = claim_run(db, run_id, runner_owner_id(server_epoch, runner_epoch))
        if claimed.claim.generation != generation:  # pragma: no cover - same transaction
            raise RuntimeError("claim generation moved inside one transaction")
        body = envelope(tx, runner_epoch, generation)
        tx.conn.execute(
            "UPDATE run_runners SET launch_json = ?, command = ? WHERE runner_epoch = ?",
            (jsoncol.dumps(body), claimed.next_command.value, runner_epoch),
        )
        return Launch(claimed.claim, runner_epoch, claimed.next_command, body, claimed.revision)


def mark_spawned(db: Database, runner_epoch: int, pid: int, process_start: float) -> None:
    """Record the child's pid and process start time right after it was spawned."""
    with db.atomic("runners.spawned") as tx:
        tx.conn.execute(
            "UPDATE run_runners SET pid = ?, process_start = ? WHERE runner_epoch = ?",
            (pid, process_start, runner_epoch),
        )


def mark_ready(db: Database, runner_epoch: int, revision: int) -> None:
    """Record that the child said ``ready`` and the run revision at that moment."""
    with db.atomic("runners.ready") as tx:
        tx.conn.execute(
            "UPDATE run_runners SET status = 'ready', ready_at = ?, ready_revision = ?"
            " WHERE runner_epoch = ? AND status = 'launching'",
            (tx.now, revision, runner_epoch),
        )


def mark_exited(
    db: Database,
    runner_epoch: int,
    outcome: str,
    *,
    exit_code: int | None = None,
    exit_signal: int | None = None,
    output_tail: str | None = None,
) -> None:
    """Record how the child ended (``exited``, ``cancelled``, ``timedOut``, ``crashed``,
    ``claimLost`` or ``orphaned``).

    Call only once the child and every process group it recorded are stopped: its
    recorded groups are closed and its stored replies dropped (a resend can no longer come).
    """
    with db.atomic("runners.exited") as tx:
        tx.conn.execute(
            "UPDATE run_runners SET status = 'exited', outcome = ?, exit_code = ?,"
            " exit_signal = ?, output_tail = ?, exited_at = ?"
            " WHERE runner_epoch = ? AND status != 'exited'",
            (outcome, exit_code, exit_signal, output_tail, tx.now, runner_epoch),
        )
        tx.conn.execute(
            "UPDATE runner_processes SET status = 'ended', ended_at = ?"
            " WHERE runner_epoch = ? AND status = 'live'",
            (tx.now, runner_epoch),
        )
        tx.conn.execute("DELETE FROM runner_messages WHERE runner_epoch = ?", (runner_epoch,))


@dataclass(frozen=True)
class ProcessRecord:
    """A process group a runner started: its leader's pid (= the pgid) and start time."""

    runner_epoch: int
    pid: int
    process_start: float
    command: str


def register_process(
    db: Database, claim: Claim, runner_epoch: int, pid: int, process_start: float, command: str
) -> None:
    """Record a group the runner is about to let run, under its live claim (renewed here).

    Raises ``ClaimLostError`` when the claim is gone: the runner must then not run it.
    """
    with db.atomic("runners.process") as tx:
        check_and_renew(tx, claim, db.lease_ms)
        tx.conn.execute(
            "INSERT INTO runner_processes (runner_epoch, pid, process_start, command, status,"
            " registered_at) VALUES (?, ?, ?, ?, 'live', ?)"
            " ON CONFLICT (runner_epoch, pid) DO UPDATE SET process_start = excluded.process_start,"
            " command = excluded.command, status = 'live', registered_at = excluded.registered_at,"
            " ended_at = NULL",
            (runner_epoch, pid, process_start, command[:200], tx.now),
        )


def end_process(db: Database, runner_epoch: int, pid: int) -> None:
    """The runner reaped a group's leader after stopping what was left of the group."""
    with db.atomic("runners.process_ended") as tx:
        tx.conn.execute(
            "UPDATE runner_processes SET status = 'ended', ended_at = ?"
            " WHERE runner_epoch = ? AND pid = ? AND status = 'live'",
            (tx.now, runner_epoch, pid),
        )


def live_processes(
    conn: sqlite3.Connection, runner_epoch: int | None = None
) -> list[ProcessRecord]:
    """Recorded groups not known to have ended (of one runner epoch, or of every one)."""
    sql = (
        "SELECT runner_epoch, pid, process_start, command FROM runner_processes"
        " WHERE status = 'live'"
    )
    rows = (
        conn.execute(sql).fetchall()
        if runner_epoch is None
        else conn.execute(f"{sql} AND runner_epoch = ?", (runner_epoch,)).fetchall()
    )
    return [ProcessRecord(row[0], row[1], row[2], row[3]) for row in rows]


def live_records(conn: sqlite3.Connection) -> list[RunnerRecord]:
    """Every runner that has not been recorded as exited."""
    rows = conn.execute(
        "SELECT runner_epoch, run_id, generation, server_epoch, pid, process_start, status,"
        " ready_revision FROM run_runners WHERE status != 'exited' ORDER BY runner_epoch"
    ).fetchall()
    return [RunnerRecord(*tuple(row)) for row in rows]


def stored_reply(
    conn: sqlite3.Connection, runner_epoch: int, message_id: str
) -> dict[str, Any] | None:
    """The reply already given to a message id, if any (for replay)."""
    row = conn.execute(
        "SELECT reply_json FROM runner_messages WHERE runner_epoch = ? AND message_id = ?",
        (runner_epoch, message_id),
    ).fetchone()
    return None if row is None else dict(jsoncol.loads(row[0]))


def store_reply(
    tx: Transaction, runner_epoch: int, message_id: str, kind: str, reply: dict[str, Any]
) -> None:
    """Store a message's reply inside the transaction of the change it acknowledges."""
    tx.conn.execute(
        "INSERT INTO runner_messages (runner_epoch, message_id, kind, reply_json, created_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (runner_epoch, message_id, kind, jsoncol.dumps(reply), tx.now),
    )
