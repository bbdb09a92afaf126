"""Retention: removing ended runs older than a cutoff, with every row that belongs to them.

Owns ``pruned_runs`` and the only deletion of ``events``. A run is prunable when it ended
(completed, failed, timed out or cancelled) before the cutoff, no runner, shell command or
headless agent of it is still recorded live, and none of its effects is ambiguous (an
uncertain side effect waits for ``effect resolve`` however old it is). Trees go whole: a
child run only with its root, and a root only when every run below it may go too, checked
again by the parent links before anything is deleted (a tree with contradictory rows stays
whole; the schema's trigger refuses deleting a run that has not ended). For each
such run,
in one transaction per batch: a ``pruned_runs`` row records what it was (a trigger refuses
a run that has not ended), which is what lets the events trigger allow the deletion of its
events; then its joins and their children's rows, durable waits and events sent to it,
its attempts and their logs, requests, submissions, decisions, effects,
workflow messages and turns, runner records, claim, queue and viewer rows, command
receipts and the run row go; finally blobs no row references any more. Receipts of runs
that have not ended are never touched (``receipts.prune`` keeps the same rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pi_workflows.store import faults
from pi_workflows.store.database import Database, Transaction

PRUNE_BATCH: Final = 200
"""Runs removed per transaction (the server's scheduled prune does one batch per tick)."""

_TERMINAL: Final = "('completed', 'failed', 'timed_out', 'cancelled')"

# The rows of a tree's joins go first, for every run of the tree: a join row names its
# parent, a child row names its child run.
_TREE_DELETES: Final = (
    "DELETE FROM run_children WHERE wait_id IN (SELECT wait_id FROM run_joins"
    " WHERE parent_run_id = ?)",
    "DELETE FROM run_joins WHERE parent_run_id = ?",
)

# Deletions in foreign-key order, each keyed by the batch's run ids (``?`` is one run id).
_DELETES: Final = (
    "DELETE FROM run_settings WHERE run_id = ?",
    "DELETE FROM run_signals WHERE run_id = ?",
    "DELETE FROM run_waits WHERE run_id = ?",
    "DELETE FROM attempt_logs WHERE run_id = ?",
    "DELETE FROM attempt_progress WHERE run_id = ?",
    "DELETE FROM published_values WHERE run_id = ?",
    "DELETE FROM effect_attempts WHERE effect_id IN (SELECT effect_id FROM effects"
    " WHERE run_id = ?)",
    "DELETE FROM effects WHERE run_id = ?",
    "DELETE FROM human_decision_resolutions WHERE decision_id IN (SELECT decision_id"
    " FROM human_decisions WHERE run_id = ?)",
    "DELETE FROM human_decisions WHERE run_id = ?",
    "DELETE FROM run_follow_ups WHERE run_id = ?",
    "DELETE FROM workflow_turns WHERE run_id = ?1 OR message_id IN (SELECT message_id"
    " FROM workflow_messages WHERE run_id = ?1)",
    "DELETE FROM workflow_messages WHERE run_id = ?",
    "DELETE FROM interactive_submissions WHERE request_id IN (SELECT request_id"
    " FROM interactive_requests WHERE run_id = ?)",
    "DELETE FROM interactive_requests WHERE run_id = ?",
    "DELETE FROM node_attempts WHERE run_id = ?",
    "DELETE FROM events WHERE run_id = ?",
    "DELETE FROM runner_messages WHERE runner_epoch IN (SELECT runner_epoch FROM run_runners"
    " WHERE run_id = ?)",
    "DELETE FROM runner_processes WHERE runner_epoch IN (SELECT runner_epoch FROM run_runners"
    " WHERE run_id = ?)",
    "DELETE FROM run_runners WHERE run_id = ?",
    "DELETE FROM agent_processes WHERE run_id = ?",
    "DELETE FROM leases WHERE run_id = ?",
    "DELETE FROM run_queue WHERE run_id = ?",
    "DELETE FROM run_sources WHERE run_id = ?",
    "DELETE FROM viewer_runs WHERE run_id = ?",
    "DELETE FROM server_commands WHERE run_id = ?",
    "DELETE FROM runs WHERE run_id = ?",
)

# Every column that references a blob; a blob none of them names is garbage.
_BLOB_REFERENCES: Final = (
    "SELECT definition_digest FROM runs",
    "SELECT input_ref FROM runs WHERE input_ref IS NOT NULL",
    "SELECT output_ref FROM runs WHERE output_ref IS NOT NULL",
    "SELECT output_ref FROM node_attempts WHERE output_ref IS NOT NULL",
    "SELECT answer_ref FROM interactive_requests WHERE answer_ref IS NOT NULL",
    "SELECT value_ref FROM interactive_submissions WHERE value_ref IS NOT NULL",
    "SELECT result_ref FROM effects WHERE result_ref IS NOT NULL",
    "SELECT data_ref FROM run_signals WHERE data_ref IS NOT NULL",
    "SELECT definition_digest FROM run_joins",
    "SELECT input_ref FROM run_children WHERE input_ref IS NOT NULL",
)


faults.declare("retention.prune", "a batch of ended runs is removed with all their rows")


@dataclass(frozen=True)
class PruneReport:
    """What one ``prune`` removed: runs, their events, attempts and command receipts, and
    unreferenced blobs.

    ``more`` is True when the batch was full, so more runs may be due.
    """

    runs: int
    events: int
    attempts: int
    blobs: int
    more: bool
    receipts: int = 0
    """The removed runs' command receipts (``server_commands`` rows)."""

    def to_json(self) -> dict[str, int | bool]:
        """The wire form ``{runs, events, attempts, receipts, blobs, more}``."""
        return {
            "runs": self.runs,
            "events": self.events,
            "attempts": self.attempts,
            "receipts": self.receipts,
            "blobs": self.blobs,
            "more": self.more,
        }


def _held(alias: str) -> str:
    """SQL true when run ``alias`` must be kept whatever its age: a runner, shell group or
    headless agent of it still recorded live, or an effect still ambiguous or applying."""
    return (
        f"(EXISTS (SELECT 1 FROM run_runners w WHERE w.run_id = {alias}.run_id"
        "   AND w.status != 'exited')"
        " OR EXISTS (SELECT 1 FROM runner_processes p JOIN run_runners w"
        f"   USING (runner_epoch) WHERE w.run_id = {alias}.run_id AND p.status = 'live')"
        f" OR EXISTS (SELECT 1 FROM agent_processes a WHERE a.run_id = {alias}.run_id"
        "   AND a.status = 'live')"
        f" OR EXISTS (SELECT 1 FROM effects e WHERE e.run_id = {alias}.run_id"
        "   AND e.status IN ('ambiguous', 'applying')))"
    )


def prunable(tx: Transaction, older_than_ms: int, limit: int) -> list[str]:
    """Ids of ended root runs that finished before ``older_than_ms`` and may go with their
    whole tree (oldest first): every run below them ended too and none is held."""
    rows = tx.conn.execute(
        f"SELECT r.run_id FROM runs r WHERE r.status IN {_TERMINAL}"
        " AND r.parent_run_id IS NULL"
        " AND r.finished_at IS NOT NULL AND r.finished_at < ?"
        f" AND NOT {_held('r')}"
        " AND NOT EXISTS (SELECT 1 FROM runs d WHERE d.root_run_id = r.run_id"
        f"   AND (d.status NOT IN {_TERMINAL} OR {_held('d')}))"
        " ORDER BY r.finished_at, r.run_id LIMIT ?",
        (older_than_ms, limit),
    ).fetchall()
    return [str(row[0]) for row in rows]


def _tree(tx: Transaction, root: str) -> list[str] | None:
    """``root`` and every run below it, deepest first (the order their rows can go in), or
    None when any run below it has not ended or is held: the guard against a tree whose
    rows contradict each other (a live run below an ended root, its ``root_run_id`` wrong),
    walked by the parent links themselves, so a live descendant is never deleted. Such a
    tree stays for ``state diagnose`` to report; the rest of the batch goes on."""
    rows = tx.conn.execute(
        "WITH RECURSIVE below(run_id) AS (SELECT run_id FROM runs WHERE parent_run_id = ?1"
        " UNION SELECT run_id FROM runs WHERE root_run_id = ?1 AND run_id != ?1"
        " UNION SELECT r.run_id FROM runs r JOIN below b ON r.parent_run_id = b.run_id)"
        f" SELECT r.run_id, r.depth, r.status IN {_TERMINAL} AND NOT {_held('r')}"
        " FROM runs r JOIN below USING (run_id) ORDER BY r.depth DESC, r.run_id",
        (root,),
    ).fetchall()
    if not all(row[2] for row in rows):
        return None
    return [str(row[0]) for row in rows] + [root]


def prune(db: Database, older_than_ms: int, *, limit: int = PRUNE_BATCH) -> PruneReport:
    """Remove at most ``limit`` prunable root runs that ended before ``older_than_ms``, each
    with its whole tree (one transaction), then every blob nothing references any more."""
    with db.atomic("retention.prune") as tx:
        roots = prunable(tx, older_than_ms, limit)
        trees = [_tree(tx, root) for root in roots]
        run_ids = [run_id for tree in trees if tree is not None for run_id in tree]
        for run_id in run_ids:
            for statement in _TREE_DELETES:
                tx.conn.execute(statement, (run_id,))
        events = attempts = receipts = 0
        for run_id in run_ids:
            events += _count(tx, "SELECT COUNT(*) FROM events WHERE run_id = ?", run_id)
            attempts += _count(tx, "SELECT COUNT(*) FROM node_attempts WHERE run_id = ?", run_id)
            receipts += _count(tx, "SELECT COUNT(*) FROM server_commands WHERE run_id = ?", run_id)
            _remove(tx, run_id)
        blobs = _collect_blobs(tx) if run_ids else 0
    return PruneReport(
        len(run_ids), events, attempts, blobs, more=len(roots) == limit, receipts=receipts
    )


def _count(tx: Transaction, sql: str, run_id: str) -> int:
    return int(tx.conn.execute(sql, (run_id,)).fetchone()[0])


def _remove(tx: Transaction, run_id: str) -> None:
    """Record the run in ``pruned_runs``, then delete everything of it."""
    tx.conn.execute(
        "INSERT INTO pruned_runs (run_id, workflow_name, status, created_at, finished_at,"
        " events, pruned_at) SELECT run_id, workflow_name, status, created_at, finished_at,"
        " (SELECT COUNT(*) FROM events WHERE run_id = ?1), ?2 FROM runs WHERE run_id = ?1",
        (run_id, tx.now),
    )
    for statement in _DELETES:
        tx.conn.execute(statement, (run_id,))


def _collect_blobs(tx: Transaction) -> int:
    union = " UNION ".join(_BLOB_REFERENCES)
    cursor = tx.conn.execute(f"DELETE FROM blobs WHERE digest NOT IN ({union})")
    return int(cursor.rowcount)
