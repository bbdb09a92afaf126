"""How a run sits in its tree, for ``run.get``: its parent, its joins with their children,
and the runs below it that need a person.

Reads only; every list is bounded (``TREE_VIEW_MAX_*``) with a count of what was left
out, so the view of a parent of a thousand children still fits a frame. Never writes.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from pi_workflows.store import children
from pi_workflows.store.states import RunStatus, view_status

TREE_VIEW_MAX_JOINS: Final = 20
"""The newest joins of a run one view lists (a node in a loop joins once per visit)."""

TREE_VIEW_MAX_CHILDREN: Final = 200
"""The first children of one join a view lists, in item order."""

TREE_VIEW_MAX_NEEDS: Final = 100
"""The runs below that need a person one view lists."""

_NEEDS_PERSON = (
    "WITH RECURSIVE tree(run_id) AS (SELECT run_id FROM runs WHERE parent_run_id = ?"
    " UNION ALL SELECT r.run_id FROM runs r JOIN tree t ON r.parent_run_id = t.run_id)"
    " SELECT r.run_id, r.workflow_name, r.parent_run_id, r.depth, r.status, r.park_reason,"
    " r.park_detail, q.node_id, q.kind FROM tree t JOIN runs r USING (run_id)"
    " LEFT JOIN interactive_requests q ON q.run_id = r.run_id"
    " AND q.status IN ('pending', 'validating')"
    " WHERE (r.status = 'paused' AND r.park_reason != 'userPaused')"
    # A detached run's agent, assistant and checkpoint steps are its headless agent's work
    # (``_AGENT_WORK``); only its decisions and person's checkpoints wait for a person.
    " OR (q.request_id IS NOT NULL AND (r.execution_mode != 'detached' OR q.for_person = 1))"
    " ORDER BY r.depth, r.created_at, r.run_id LIMIT ?"
)

_AGENT_WORK = (
    "WITH RECURSIVE tree(run_id) AS (SELECT run_id FROM runs WHERE parent_run_id = ?"
    " UNION ALL SELECT r.run_id FROM runs r JOIN tree t ON r.parent_run_id = t.run_id)"
    " SELECT r.run_id, r.workflow_name, r.parent_run_id, r.depth, q.node_id, q.kind,"
    " EXISTS (SELECT 1 FROM agent_processes a WHERE a.run_id = r.run_id AND a.status = 'live')"
    " FROM tree t JOIN runs r USING (run_id) JOIN interactive_requests q ON q.run_id = r.run_id"
    " AND q.status IN ('pending', 'validating')"
    " WHERE r.execution_mode = 'detached' AND r.status = 'waiting' AND q.for_person = 0"
    " ORDER BY r.depth, r.created_at, r.run_id LIMIT ?"
)

NOT_STARTED: Final = "notStarted"
"""The ``counts`` key of a join's children that have no run yet (their turn has not come)."""


def tree_fields(conn: sqlite3.Connection, run_id: str) -> dict[str, Any]:
    """``parentRunId``, ``rootRunId``, ``depth``, ``joins`` (newest last: each join's
    progress, its children's exact ``counts`` by status and its children in item order),
    ``needsPerson`` (runs anywhere below that are parked for a person or wait on a person's
    answer, shallowest first) and ``agentWork`` (detached runs below whose step a headless
    agent works on, ``agent`` ``working``, or waits for an agent place, ``waiting``)."""
    row = conn.execute(
        "SELECT parent_run_id, COALESCE(root_run_id, run_id), depth FROM runs WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    joins = children.joins_of(conn, run_id)
    shown = joins[-TREE_VIEW_MAX_JOINS:]
    needing = conn.execute(_NEEDS_PERSON, (run_id, TREE_VIEW_MAX_NEEDS)).fetchall()
    working = conn.execute(_AGENT_WORK, (run_id, TREE_VIEW_MAX_NEEDS)).fetchall()
    return {
        "parentRunId": row[0],
        "rootRunId": row[1],
        "depth": row[2],
        "joins": [
            {
                **join.progress(),
                "counts": join_counts(conn, join.wait_id),
                **_children_of(conn, join.wait_id),
            }
            for join in shown
        ],
        "joinsOmitted": len(joins) - len(shown),
        "needsPerson": [
            {
                "runId": r[0],
                "workflow": r[1],
                "parentRunId": r[2],
                "depth": r[3],
                "status": view_status(RunStatus(r[4]), r[5]),
                "parkReason": r[5],
                "parkDetail": r[6],
                "waitingOn": None if r[7] is None else {"nodeId": r[7], "kind": r[8]},
            }
            for r in needing
        ],
        "agentWork": [
            {
                "runId": r[0],
                "workflow": r[1],
                "parentRunId": r[2],
                "depth": r[3],
                "waitingOn": {"nodeId": r[4], "kind": r[5]},
                "agent": "working" if r[6] else "waiting",
            }
            for r in working
        ],
    }


def join_counts(conn: sqlite3.Connection, wait_id: str) -> dict[str, int]:
    """How many of a join's children are in each status, exactly: a started child by its
    run's user-facing status (``completed``, ``failed``, ``timed_out``, ``cancelled``,
    ``ambiguous``, ``paused``, ``waiting``, ``running``, ``queued``), one not started yet
    as ``notStarted``, one a fail-fast join never started as ``skipped``. The counts add
    up to the join's ``total``."""
    counts: dict[str, int] = {}
    for row_status, status, park, number in conn.execute(
        "SELECT c.status, r.status, r.park_reason, COUNT(*) FROM run_children c"
        " LEFT JOIN runs r ON r.run_id = c.child_run_id WHERE c.wait_id = ?"
        " GROUP BY c.status, r.status, r.park_reason",
        (wait_id,),
    ):
        if status is not None:
            key = view_status(RunStatus(status), park)
        else:
            key = NOT_STARTED if row_status == "waiting" else str(row_status)
        counts[key] = counts.get(key, 0) + int(number)
    return counts


def _children_of(conn: sqlite3.Connection, wait_id: str) -> dict[str, Any]:
    """The first children of one join in item order, each with its run's status."""
    rows = conn.execute(
        "SELECT c.item, c.child_run_id, c.status, r.status, r.park_reason, r.current_node"
        " FROM run_children c LEFT JOIN runs r ON r.run_id = c.child_run_id"
        " WHERE c.wait_id = ? ORDER BY c.item LIMIT ?",
        (wait_id, TREE_VIEW_MAX_CHILDREN + 1),
    ).fetchall()
    total = conn.execute(
        "SELECT COUNT(*) FROM run_children WHERE wait_id = ?", (wait_id,)
    ).fetchone()[0]
    listed = rows[:TREE_VIEW_MAX_CHILDREN]
    return {
        "children": [
            {
                "item": item,
                "runId": child,
                "status": row_status if status is None else view_status(RunStatus(status), park),
                "currentNode": node,
            }
            for item, child, row_status, status, park, node in listed
        ],
        "childrenOmitted": total - len(listed),
    }


__all__ = [
    "NOT_STARTED",
    "TREE_VIEW_MAX_CHILDREN",
    "TREE_VIEW_MAX_JOINS",
    "TREE_VIEW_MAX_NEEDS",
    "join_counts",
    "tree_fields",
]
