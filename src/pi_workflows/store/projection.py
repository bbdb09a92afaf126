"""The viewer projection: the one ``viewer_runs`` row per run that renderers read.

It is always rebuilt from the canonical rows inside the transaction that changed them, so
it can never disagree with them after a commit. ``expected_view`` is also diagnose's oracle.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from pi_workflows.store import jsoncol
from pi_workflows.store.states import RunStatus, view_status

VIEW_COLUMNS = (
    "run_id",
    "workflow_name",
    "status",
    "run_status",
    "queue_status",
    "park_reason",
    "current_node",
    "revision",
    "generation",
    "waiting_json",
    "created_at",
    "updated_at",
    "finished_at",
    "parent_run_id",
    "forked_from",
)


def expected_view(conn: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    """Compute the viewer row of ``run_id`` from the canonical rows (None if no run)."""
    row = conn.execute(
        "SELECT r.run_id, r.workflow_name, r.status, r.park_reason, r.current_node, r.revision,"
        " r.created_at, r.updated_at, r.finished_at, q.status, COALESCE(l.generation, 0),"
        " r.parent_run_id, r.forked_from"
        " FROM runs r LEFT JOIN run_queue q USING (run_id) LEFT JOIN leases l USING (run_id)"
        " WHERE r.run_id = ?",
        (run_id,),
    ).fetchone()
    if row is None:
        return None
    waiting = conn.execute(
        "SELECT request_id, node_id, kind FROM interactive_requests"
        " WHERE run_id = ? AND status IN ('pending', 'validating')",
        (run_id,),
    ).fetchone()
    status = RunStatus(row[2])
    return {
        "run_id": row[0],
        "workflow_name": row[1],
        "status": view_status(status, row[3]),
        "run_status": status.value,
        "queue_status": row[9] if row[9] is not None else "missing",
        "park_reason": row[3],
        "current_node": row[4],
        "revision": row[5],
        "generation": row[10],
        "waiting_json": None
        if waiting is None
        else jsoncol.dumps({"requestId": waiting[0], "nodeId": waiting[1], "kind": waiting[2]}),
        "created_at": row[6],
        "updated_at": row[7],
        "finished_at": row[8],
        "parent_run_id": row[11],
        "forked_from": row[12],
    }


def project_run(conn: sqlite3.Connection, run_id: str) -> None:
    """Rebuild the viewer row of ``run_id``. Call inside the transaction that changed it."""
    view = expected_view(conn, run_id)
    if view is not None:
        write_view(conn, view)


_WRITE_VIEW = (
    f"INSERT INTO viewer_runs ({', '.join(VIEW_COLUMNS)})"
    f" VALUES ({', '.join('?' for _ in VIEW_COLUMNS)})"
    " ON CONFLICT (run_id) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in VIEW_COLUMNS if column != "run_id")
)
"""An upsert, not ``INSERT OR REPLACE``: the row is updated in place, so only the indexes
whose columns changed are written (a replace deletes and re-inserts the row, rewriting
every index and several more pages of each run transaction's commit)."""


def write_view(conn: sqlite3.Connection, view: dict[str, Any]) -> None:
    """Store a viewer row computed by ``expected_view`` in this transaction."""
    conn.execute(_WRITE_VIEW, tuple(view[column] for column in VIEW_COLUMNS))


def stored_view(conn: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    """Read the stored viewer row of ``run_id``."""
    row = conn.execute(
        f"SELECT {', '.join(VIEW_COLUMNS)} FROM viewer_runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    return None if row is None else dict(zip(VIEW_COLUMNS, tuple(row), strict=True))
