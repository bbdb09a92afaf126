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
    " WHERE (r.status = 'paused' AND r.park_reason != 'userPaused') OR q.request_id IS NOT NULL"
    " ORDER BY r.depth, r.created_at, r.run_id LIMIT ?"
)


def tree_fields(conn: sqlite3.Connection, run_id: str) -> dict[str, Any]:
    """``parentRunId``, ``rootRunId``, ``depth``, ``joins`` (newest last: each join's
    progress and its children in item order) and ``needsPerson`` (runs anywhere below that
    are parked for a person or wait on an answer, shallowest first)."""
    row = conn.execute(
        "SELECT parent_run_id, COALESCE(root_run_id, run_id), depth FROM runs WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    joins = children.joins_of(conn, run_id)
    shown = joins[-TREE_VIEW_MAX_JOINS:]
    needing = conn.execute(_NEEDS_PERSON, (run_id, TREE_VIEW_MAX_NEEDS)).fetchall()
    return {
        "parentRunId": row[0],
        "rootRunId": row[1],
        "depth": row[2],
        "joins": [{**join.progress(), **_children_of(conn, join.wait_id)} for join in shown],
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
    }


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


__all__ = ["TREE_VIEW_MAX_CHILDREN", "TREE_VIEW_MAX_JOINS", "TREE_VIEW_MAX_NEEDS", "tree_fields"]
