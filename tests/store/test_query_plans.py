"""No statement on a run's path scans a table that grows with the number of runs.

A full scan costs nothing in a fresh database and grows with every run kept: one
unindexed ``COUNT(*)`` over the workflow messages, run once per request, cut the parking
rate from 170 to 118 runs a second between the first and the ten-thousandth run. This test
builds a run in each prepared state of the crash scenarios (a real run life through the
store's own operations and the server's runner-message handler: start, claim, nodes,
requests, submissions, decisions, effects, sessions, agents, runners, completion), answers
the server's reads of them, and prunes the ended ones, with SQLite's trace callback on;
then it asks SQLite for the plan of every statement it saw and fails on any full scan of
a table, except the few listed below with the reason each is bounded.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pi_workflows.server.app  # noqa: F401 - declares every server commit point
from pi_workflows.server.trace_builder import Builder
from pi_workflows.store import (
    children,
    history,
    progress,
    retention,
    schedules,
    telemetry,
    views,
    watch_views,
)
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database

from support import crash_states as st

BUILDERS: tuple[Callable[[Database, FakeClock], Any], ...] = (
    st.queued,
    st.running,
    st.in_node,
    st.waiting,
    st.validating,
    st.deciding,
    st.paused,
    st.user_paused,
    st.expired,
    st.failed,
    st.node_late,
    st.request_late,
    st.applying,
    st.ambiguous,
    st.completed,
    st.answered_command,
    st.ended_long_ago,
    st.session_step,
    st.session_turn,
    st.agent_live,
    st.launched,
    st.runner_in_node,
    st.runner_applying,
    st.runner_process,
    st.runner_progress,
    st.scheduled_run,
    st.schedule_queued,
    st.joining,
    st.last_child_running,
    st.forked,
    st.upgraded,
    st.restarted_fork,
)

ALLOWED_SCANS: dict[str, str] = {
    "SELECT r.run_id FROM runs r WHERE r.status IN": (
        "retention's candidates: a bounded batch, on the hourly prune tick"
    ),
    "DELETE FROM blobs WHERE digest NOT IN": "retention's blob sweep, once per prune batch",
    "DELETE FROM server_commands WHERE command_id IN": (
        "receipt pruning: a bounded batch, on the hourly prune tick"
    ),
}
"""Statement prefixes allowed a full scan, each with why it stays bounded."""

ONE_ROW_TABLES = frozenset({"server_state", "schema_identity"})

_SCAN = re.compile(r"^SCAN (\w+)$")
_CTE = re.compile(r"(\w+)(?:\([^)]*\))?\s+AS\s*\(", re.IGNORECASE)
"""A common table expression's name: a recursive walk scans its own queue, which holds one
tree's runs (each step of it is an index search of ``runs``), not a growing table."""
_STATEMENT = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b", re.IGNORECASE)


def _life(db: Database, clock: FakeClock) -> list[str]:
    """Every statement the store ran while building each state, reading it and pruning."""
    seen: list[str] = []
    db.conn.set_trace_callback(seen.append)
    try:
        run_ids = [str(build(db, clock)["run_id"]) for build in BUILDERS]
        with db.read() as conn:
            for run_id in run_ids:
                views.run_view(conn, run_id)
                views.runner_state(conn, run_id)
                views.run_messages(conn, run_id)
                history.page(conn, run_id)
                watch_views.run_watch(conn, run_id)
                progress.mark(conn, run_id)
                progress.current(conn, run_id)
            views.list_runs(conn, limit=100)
            views.list_runs_page(conn, statuses=["waiting"], workflow="sample", limit=100)
            views.list_runs_page(conn, schedule=st.SCHEDULE, limit=100)
            views.list_runs_page(conn, with_children=True, limit=100)
            for run_id in run_ids:
                views.list_lineage(conn, run_id)
            children.failing(conn)
            for row in schedules.listed(conn, include_deleted=True):
                schedules.view(conn, row, with_input=True)
                schedules.fires(conn, row.schedule_id, 20)
                schedules.queue_ready(conn, row.schedule_id)
                schedules.verdict(conn, row)
            schedules.due(conn, clock.now_ms(), 64)
            schedules.next_due(conn, set())
            schedules.queued_heads(conn, 64)
            schedules.any_active(conn)
            views.list_interactions(conn, st.SESSION)
            views.list_session_runs(conn, st.SESSION)
            views.list_interactions(conn)
            watch_views.runs_watch(conn)
            views.status_counts(conn, clock.now_ms())
            # The OpenTelemetry exporter's pass over every event (server/telemetry.py).
            events = telemetry.events_after(conn, 0, 100_000)
            batch = Builder(conn, payloads=True).build(events, events[-1].event_id)
            assert batch.spans, "the exporter's reads were not exercised"
            telemetry.read_cursor(conn, "otlp")
            telemetry.last_event_id(conn)
        telemetry.save_cursor(db, "otlp", batch.last_event_id)
        clock.advance(400 * 86_400_000)
        report = retention.prune(db, clock.now_ms() - 30 * 86_400_000)
    finally:
        db.conn.set_trace_callback(None)
    assert report.runs >= 1, "the prune path was not exercised"
    return seen


def _full_scans(db: Database, statement: str) -> list[str]:
    plan = db.conn.execute(f"EXPLAIN QUERY PLAN {statement}").fetchall()
    tables = [m.group(1) for row in plan if (m := _SCAN.match(str(row[-1])))]
    own = set(_CTE.findall(statement))
    for name in list(own):  # and the aliases it is read under
        own.update(re.findall(rf"\b(?:FROM|JOIN)\s+{name}\s+(?:AS\s+)?(\w+)", statement, re.I))
    return [table for table in tables if table not in ONE_ROW_TABLES and table not in own]


def test_no_statement_on_a_runs_path_scans_a_growing_table(db: Database, clock: FakeClock) -> None:
    """Every statement of a run's life, its reads and its pruning is an index search
    (bar the allowed, bounded batches)."""
    statements = {s for s in _life(db, clock) if _STATEMENT.match(s)}
    assert len(statements) > 100, "the trace saw too little of a run's life"
    offenders = {}
    for statement in sorted(statements):
        flat = " ".join(statement.split())
        if any(flat.startswith(prefix) for prefix in ALLOWED_SCANS):
            continue
        scans = _full_scans(db, statement)
        if scans:
            offenders[re.sub(r"'[^']*'", "?", flat)[:160]] = scans
    assert offenders == {}
