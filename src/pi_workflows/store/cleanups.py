"""Cleanup on cancel: a run's ``on_cancel`` node, run once after a cancel or a run deadline
(``run_cleanups``).

Owns how a server-side end of a run (``run cancel``, a tree cancel, the run deadline) ends
it: at once (``cancelled`` or ``timed_out``), or, when its workflow declares a cleanup node
and the run had started, through a cleanup: the ``clean up`` transition ends everything a
cancel ends (attempt, waits, joins, requests; effects settled as for a cancel) and queues the
run for a runner that runs only that node (``runner_view``), whose outcome then ends the run
with the status it was ended with (``finish``, from ``node_steps.finish_node``). A second
cancel during the cleanup, or a cleanup that keeps stopping its runner (``give_up``),
abandons it and ends the run the same way: a cleanup never changes the terminal status and
never runs again for the same cancel. Every function runs inside a caller's transaction or
one ``write_run``; nothing here starts or stops processes.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.run_rows import stored_definition
from pi_workflows.store.runs import RunRow, WriteResult, read_run, write_run
from pi_workflows.store.states import AttemptStatus, NextCommand, Operation, RunStatus
from pi_workflows.store.transitions import apply_transition

_END_OF: Final = {RunStatus.CANCELLED: Operation.CANCEL, RunStatus.TIMED_OUT: Operation.EXPIRE}
_OUTCOME_OF: Final = {
    AttemptStatus.COMPLETED: "completed",
    AttemptStatus.FAILED: "failed",
    AttemptStatus.TIMED_OUT: "timed_out",
}


@dataclass(frozen=True)
class Cleanup:
    """One ``run_cleanups`` row: the cleanup node of a run round, why it runs, and how the
    run ends. ``status`` is ``running`` until its outcome (or ``abandoned``) is recorded."""

    run_id: str
    round: int
    node_id: str
    reason: str
    ends_as: RunStatus
    status: str
    error: str | None
    created_at: int
    finished_at: int | None

    def to_json(self) -> dict[str, Any]:
        """The ``cleanup`` of a ``RunView``."""
        return {
            "nodeId": self.node_id,
            "reason": self.reason,
            "endsAs": self.ends_as.value,
            "status": self.status,
            "error": self.error,
            "startedAt": self.created_at,
            "finishedAt": self.finished_at,
        }


_COLUMNS = "run_id, round, node_id, reason, ends_as, status, error, created_at, finished_at"


def _row(row: sqlite3.Row | tuple[Any, ...]) -> Cleanup:
    return Cleanup(row[0], row[1], row[2], row[3], RunStatus(row[4]), row[5], row[6], row[7],
                   row[8])  # fmt: skip


def active(conn: sqlite3.Connection, run_id: str) -> Cleanup | None:
    """The run's cleanup still to finish, if any."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM run_cleanups WHERE run_id = ? AND status = 'running'",
        (run_id,),
    ).fetchone()
    return None if row is None else _row(row)


def latest(conn: sqlite3.Connection, run_id: str) -> Cleanup | None:
    """The run's newest cleanup (its current round's, or an earlier round's), if any."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM run_cleanups WHERE run_id = ? ORDER BY round DESC LIMIT 1",
        (run_id,),
    ).fetchone()
    return None if row is None else _row(row)


def declared(conn: sqlite3.Connection, run: RunRow) -> str | None:
    """The cleanup node the run's definition declares (``onCancel``), if any."""
    node = stored_definition(conn, run.definition_digest).get("onCancel")
    return node if isinstance(node, str) else None


def _started(conn: sqlite3.Connection, run: RunRow) -> bool:
    """Whether the run's current round ran anything (a run cancelled before it ever started
    holds nothing to release: it ends at once)."""
    row = conn.execute(
        "SELECT 1 FROM node_attempts WHERE run_id = ? AND round = ? AND carried_from IS NULL"
        " LIMIT 1",
        (run.run_id, run.round),
    ).fetchone()
    return row is not None


def runner_view(conn: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    """``cleanup`` of ``state.get``: what the runner runs instead of the graph, or None."""
    found = active(conn, run_id)
    if found is None:
        return None
    return {"nodeId": found.node_id, "reason": found.reason, "endsAs": found.ends_as.value}


def end_run(
    db: Database,
    tx: Transaction,
    run_id: str,
    fence: Claim,
    ends_as: RunStatus,
    reason: str,
    *,
    name: str,
    extra: dict[str, Any] | None = None,
) -> WriteResult:
    """End run ``run_id`` from the server side (a cancel, a tree cancel, the run deadline)
    under ``fence``, inside ``tx``: at once as ``ends_as``; through its cleanup node when
    its workflow declares one and the round had started (event ``run.cleanup_started``;
    the run is queued for it); or, when its cleanup is already running, by abandoning that
    cleanup (the run ends as the first end said, with the first reason)."""
    run = read_run(tx.conn, run_id)
    running = active(tx.conn, run_id)
    node = None if running is not None else declared(tx.conn, run)
    data: dict[str, Any] = {"reason": reason, **(extra or {})}
    if running is not None:
        why = f"ended again during its cleanup ({reason})"
        data = {
            "reason": running.reason,
            "cleanup": {"nodeId": running.node_id, "status": "abandoned", "error": why},
        }

        def abandon(tx: Transaction, run: RunRow) -> None:
            _record(tx, running, "abandoned", why)
            apply_transition(tx, run, _END_OF[running.ends_as], error=running.reason)

        return write_run(db, run_id, name=name, event_type=f"run.{running.ends_as.value}",
                         event_data=data, claim=fence, apply=abandon)  # fmt: skip
    if node is not None and _started(tx.conn, run):
        data.update({"nodeId": node, "endsAs": ends_as.value})

        def begin(tx: Transaction, run: RunRow) -> None:
            apply_transition(
                tx, run, Operation.CLEAN_UP, next_command=NextCommand.RESUME, error=reason
            )
            tx.conn.execute(
                "UPDATE runs SET current_node = ?, unrouted_attempt = NULL WHERE run_id = ?",
                (node, run_id),
            )
            tx.conn.execute(
                f"INSERT INTO run_cleanups ({_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, 'running', NULL, ?, NULL)",
                (run_id, run.round, node, reason, ends_as.value, tx.now),
            )

        return write_run(db, run_id, name=name, event_type="run.cleanup_started",
                         event_data=data, claim=fence, apply=begin)  # fmt: skip
    return write_run(
        db,
        run_id,
        name=name,
        event_type=f"run.{ends_as.value}",
        event_data=data,
        claim=fence,
        apply=lambda tx, run: apply_transition(tx, run, _END_OF[ends_as], error=reason),
    )


def _record(tx: Transaction, cleanup: Cleanup, status: str, error: str | None) -> None:
    tx.conn.execute(
        "UPDATE run_cleanups SET status = ?, error = ?, finished_at = ?"
        " WHERE run_id = ? AND round = ? AND status = 'running'",
        (status, error, tx.now, cleanup.run_id, cleanup.round),
    )


def finish(
    tx: Transaction,
    run: RunRow,
    cleanup: Cleanup,
    outcome: AttemptStatus,
    error: str | None,
    data: dict[str, Any],
) -> None:
    """The cleanup node's attempt settled with ``outcome`` (inside ``finish_node``'s write):
    record it and end the run as it was ended (a failed or timed-out cleanup too)."""
    status = _OUTCOME_OF[outcome]
    _record(tx, cleanup, status, error)
    data["reason"] = cleanup.reason
    data["cleanup"] = {"nodeId": cleanup.node_id, "status": status, "error": error}
    apply_transition(tx, run, _END_OF[cleanup.ends_as], error=cleanup.reason)


def end_with_round(tx: Transaction, run_id: str) -> None:
    """A restart starts a new round: a cleanup of the old one that never finished (its run
    was paused in it) is recorded ``abandoned``; the new round runs its graph."""
    tx.conn.execute(
        "UPDATE run_cleanups SET status = 'abandoned', error = 'the run was restarted',"
        " finished_at = ? WHERE run_id = ? AND status = 'running'",
        (tx.now, run_id),
    )


def give_up(db: Database, fence: Claim, why: str) -> WriteResult | None:
    """End a run whose cleanup keeps stopping its runner (the supervisor's crash limit) as
    it was ended, the cleanup recorded ``failed`` with ``why``; None if it has no cleanup
    running."""
    with db.atomic("cleanups.give_up") as tx:
        running = active(tx.conn, fence.run_id)
        if running is None:
            return None
        data = {
            "reason": running.reason,
            "cleanup": {
                "nodeId": running.node_id,
                "status": "failed",
                "error": why,
                "by": "server",
            },
        }

        def fail(tx: Transaction, run: RunRow) -> None:
            _record(tx, running, "failed", why)
            apply_transition(tx, run, _END_OF[running.ends_as], error=running.reason)

        return write_run(db, fence.run_id, name="cleanups.give_up",
                         event_type=f"run.{running.ends_as.value}", event_data=data,
                         claim=fence, apply=fail)  # fmt: skip
