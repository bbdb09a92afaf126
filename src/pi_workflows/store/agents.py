"""Headless Pi agents of detached runs: which runs want one, and the process records.

Owns ``agent_processes``. A detached run's session is a headless ``pi --mode rpc`` the
server runs; it is recorded (pid and process start time) right after its exec, before
the server handles any request from it, so a later server can stop it by identity, and
marked ended when the server has stopped and reaped it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from pi_workflows.store.database import Database
from pi_workflows.store.ids import new_id


@dataclass(frozen=True)
class Wanted:
    """A detached run that needs its headless agent now."""

    run_id: str
    session_id: str
    project_dir: str | None
    definition_digest: str = ""  # the code its steps come from (an upgrade changes it)


@dataclass(frozen=True)
class AgentRecord:
    """A recorded agent process that has not been marked ended."""

    agent_id: str
    run_id: str
    server_epoch: int
    pid: int
    process_start: float


def wanted(conn: sqlite3.Connection) -> list[Wanted]:
    """Detached runs that wait on a request the model answers (an agent, assistant-message
    or checkpoint step; a human decision or a person's checkpoint waits for a person, and so
    does a checkpoint whose model ended its turn without answering it), or that still work
    between such steps while their agent lives. A run in a durable wait (a sleep, a retry
    delay, an event wait) wants none: it holds no process while it waits, its agent
    included. Oldest first: the server's agent capacity goes to them in that order."""
    rows = conn.execute(
        "SELECT r.run_id, r.origin_session, s.project_dir, r.definition_digest FROM runs r"
        " JOIN run_sources s USING (run_id) WHERE r.execution_mode = 'detached'"
        " AND r.status IN ('queued', 'running', 'waiting')"  # runs_detached_active
        " AND (EXISTS (SELECT 1 FROM interactive_requests q WHERE q.run_id = r.run_id"
        " AND q.status IN ('pending', 'validating') AND q.for_person = 0)"
        " OR (EXISTS (SELECT 1 FROM agent_processes a WHERE a.run_id = r.run_id"
        " AND a.status = 'live') AND NOT EXISTS (SELECT 1 FROM run_waits w"
        " WHERE w.run_id = r.run_id AND w.status = 'pending')))"
        # A checkpoint its model had a turn on and left unanswered waits for a person.
        " AND NOT EXISTS (SELECT 1 FROM interactive_requests c WHERE c.run_id = r.run_id"
        " AND c.status = 'pending' AND c.kind IN ('checkpoint', 'decision')"
        " AND (c.for_person = 1 OR (NOT EXISTS (SELECT 1 FROM workflow_messages p"
        " WHERE p.request_id = c.request_id AND p.status = 'pending') AND EXISTS (SELECT 1"
        " FROM workflow_messages m JOIN workflow_turns t ON t.message_id = m.message_id"
        " WHERE m.request_id = c.request_id AND t.stop_reason = 'completed'))))"
        " ORDER BY r.created_at, r.run_id",
    ).fetchall()
    return [Wanted(row[0], row[1], row[2], row[3]) for row in rows]


def live(conn: sqlite3.Connection) -> list[AgentRecord]:
    """Every agent process not yet marked ended."""
    rows = conn.execute(
        "SELECT agent_id, run_id, server_epoch, pid, process_start FROM agent_processes"
        " WHERE status = 'live'"
    ).fetchall()
    return [AgentRecord(row[0], row[1], row[2], row[3], row[4]) for row in rows]


def record_started(
    db: Database, run_id: str, session_id: str, server_epoch: int, pid: int, start: float
) -> str:
    """Record a spawned agent; returns its id."""
    agent_id = new_id("agt")
    with db.atomic("agents.started") as tx:
        tx.conn.execute(
            "INSERT INTO agent_processes (agent_id, run_id, session_id, server_epoch, pid,"
            " process_start, status, started_at) VALUES (?, ?, ?, ?, ?, ?, 'live', ?)",
            (agent_id, run_id, session_id, server_epoch, pid, start, tx.now),
        )
    return agent_id


def record_ended(
    db: Database, agent_id: str, exit_code: int | None = None, output_tail: str | None = None
) -> None:
    """The agent was stopped (or ended) and reaped."""
    with db.atomic("agents.ended") as tx:
        tx.conn.execute(
            "UPDATE agent_processes SET status = 'ended', exit_code = ?, output_tail = ?,"
            " ended_at = ? WHERE agent_id = ? AND status = 'live'",
            (exit_code, output_tail, tx.now, agent_id),
        )


def runs_gone(conn: sqlite3.Connection, run_ids: list[str]) -> list[str]:
    """Those of ``run_ids`` that have no run row (pruned, or never created)."""
    existing: set[str] = set()
    for start in range(0, len(run_ids), 500):
        chunk = run_ids[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        existing.update(
            row[0]
            for row in conn.execute(f"SELECT run_id FROM runs WHERE run_id IN ({marks})", chunk)
        )
    return [run_id for run_id in run_ids if run_id not in existing]
