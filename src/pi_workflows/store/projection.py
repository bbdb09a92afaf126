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


_INDEXED: tuple[str, ...] = ("status", "created_at", "parent_run_id")
"""The viewer columns an index of ``viewer_runs`` holds (besides ``run_id``)."""

_PLAIN: tuple[str, ...] = tuple(c for c in VIEW_COLUMNS if c != "run_id" and c not in _INDEXED)

_UPDATE_PLAIN = f"UPDATE viewer_runs SET {', '.join(f'{c} = ?' for c in _PLAIN)} WHERE run_id = ?"
_UPDATE_INDEXED = (
    f"UPDATE viewer_runs SET {', '.join(f'{c} = ?' for c in _INDEXED)} WHERE run_id = ?"
    f" AND ({' OR '.join(f'{c} IS NOT ?' for c in _INDEXED)})"
)
_INSERT_VIEW = (
    f"INSERT INTO viewer_runs ({', '.join(VIEW_COLUMNS)})"
    f" VALUES ({', '.join('?' for _ in VIEW_COLUMNS)})"
)


def write_view(conn: sqlite3.Connection, view: dict[str, Any]) -> None:
    """Store a viewer row computed by ``expected_view`` in this transaction.

    A run's row is updated in place in two statements: the columns no index holds, then
    the indexed ones only when one of them changed. SQLite rewrites every index whose
    columns an ``UPDATE`` sets, equal values or not, and each index page is one more WAL
    page of the commit; most writes (a node transition) change no indexed column, so they
    touch the row's page alone instead of four. A run without a row gets it inserted.
    """
    run_id = view["run_id"]
    cursor = conn.execute(_UPDATE_PLAIN, (*(view[c] for c in _PLAIN), run_id))
    if cursor.rowcount == 0:
        conn.execute(_INSERT_VIEW, tuple(view[column] for column in VIEW_COLUMNS))
        return
    indexed = tuple(view[c] for c in _INDEXED)
    conn.execute(_UPDATE_INDEXED, (*indexed, run_id, *indexed))


def stored_view(conn: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    """Read the stored viewer row of ``run_id``."""
    row = conn.execute(
        f"SELECT {', '.join(VIEW_COLUMNS)} FROM viewer_runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    return None if row is None else dict(zip(VIEW_COLUMNS, tuple(row), strict=True))
