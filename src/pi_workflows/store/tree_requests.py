"""Where an answer addressed to a parent run goes: the open requests of the runs below it.

Reads only. A parent that waits on its children (``subworkflow``, ``fan_out``) has no
request of its own while a child asks something; a person who answers "the run" they
started means the child's question. ``open_below`` lists the open (pending or validating)
requests of every run below a run, shallowest first; ``is_below`` says whether a run is in
a run's tree. The handlers (``server/handlers/interactions.py``) route an answer to the
one such request, or refuse with one line naming each child when there are several.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from pi_workflows.store.interactions import Interaction, read_request

MAX_LISTED: Final = 20
"""Most open requests below a run that one refusal names."""

_BELOW = (
    "WITH RECURSIVE tree(run_id) AS (SELECT run_id FROM runs WHERE parent_run_id = ?"
    " UNION ALL SELECT r.run_id FROM runs r JOIN tree t ON r.parent_run_id = t.run_id)"
)


def open_below(conn: sqlite3.Connection, run_id: str, limit: int = MAX_LISTED) -> list[Interaction]:
    """The open requests of the runs below ``run_id`` (children, theirs, ...), shallowest
    run first, then oldest; at most ``limit``."""
    rows = conn.execute(
        f"{_BELOW} SELECT q.request_id FROM tree t JOIN runs r USING (run_id)"
        " JOIN interactive_requests q ON q.run_id = r.run_id"
        " WHERE q.status IN ('pending', 'validating')"
        " ORDER BY r.depth, q.created_at, q.request_id LIMIT ?",
        (run_id, limit),
    ).fetchall()
    found = [read_request(conn, str(row[0])) for row in rows]
    return [request for request in found if request is not None]


def is_below(conn: sqlite3.Connection, ancestor: str, run_id: str) -> bool:
    """Whether ``run_id`` is a run below ``ancestor`` (its child, grandchild, ...)."""
    return (
        conn.execute(f"{_BELOW} SELECT 1 FROM tree WHERE run_id = ?", (ancestor, run_id)).fetchone()
        is not None
    )
