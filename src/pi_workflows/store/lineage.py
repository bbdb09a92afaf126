"""A run's lineage, read both ways: where it came from (a fork's source, a child's parent,
the rounds its restarts began) and what came from it (its forks, its children, their
forks and children: ``run list --lineage``).

Reads only; every list is bounded. The relations it reads are set once when a run is
reserved (``runs.parent_run_id``, ``runs.forked_from``) and by restarts (``run.restarted``
events); each step of a walk is an index search (``runs_by_parent``, ``runs_by_fork``).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from pi_workflows.store import jsoncol

__all__ = ["LINEAGE_MAX_FORKS", "LINEAGE_MAX_ROUNDS", "descendants", "lineage_of"]

LINEAGE_MAX_FORKS: Final = 50
"""The newest forks of a run one view lists (the rest are counted)."""

LINEAGE_MAX_ROUNDS: Final = 50
"""The newest restarts of a run one view lists (the rest are counted)."""


def lineage_of(conn: sqlite3.Connection, run_id: str) -> dict[str, Any]:
    """``{kind, parentRunId, forkedFrom, forks, forksOmitted, rounds, roundsOmitted,
    carriedAttempts}`` of one run.

    ``kind`` is ``fork`` (``parentRunId`` is its source), ``child`` (``parentRunId`` is the
    run whose node started it) or ``root``. ``forkedFrom``: ``{runId, nodeId, visit,
    exists}`` (the source may have been pruned). ``forks``: the runs forked from this one,
    newest first. ``rounds``: each restart, oldest first, as ``{round, at, from}`` (the
    status the round before it ended in)."""
    row = conn.execute(
        "SELECT parent_run_id, forked_from, fork_node, fork_visit FROM runs WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    parent, source, node_id, visit = row
    forked_from = None
    if source is not None:
        exists = conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (source,)).fetchone()
        forked_from = {
            "runId": source,
            "nodeId": node_id,
            "visit": visit,
            "exists": exists is not None,
        }
    forks = conn.execute(
        "SELECT r.run_id, r.fork_node, r.fork_visit, v.status, r.created_at FROM runs r"
        " JOIN viewer_runs v USING (run_id) WHERE r.forked_from = ?"
        " ORDER BY r.created_at DESC, r.run_id DESC LIMIT ?",
        (run_id, LINEAGE_MAX_FORKS + 1),
    ).fetchall()
    fork_total = (
        len(forks)
        if len(forks) <= LINEAGE_MAX_FORKS
        else conn.execute("SELECT COUNT(*) FROM runs WHERE forked_from = ?", (run_id,)).fetchone()[
            0
        ]
    )
    restarts = conn.execute(
        "SELECT at, data_json FROM events WHERE run_id = ? AND type = 'run.restarted'"
        " ORDER BY revision",
        (run_id,),
    ).fetchall()
    rounds = []
    for number, (at, data) in enumerate(restarts, start=1):
        facts = jsoncol.loads(data) or {}
        rounds.append({"round": facts.get("round", number), "at": at, "from": facts.get("from")})
    carried = conn.execute(
        "SELECT COUNT(*) FROM node_attempts WHERE run_id = ? AND round = 0"
        " AND carried_from IS NOT NULL",
        (run_id,),
    ).fetchone()[0]
    kind = "fork" if source is not None else "child" if parent is not None else "root"
    return {
        "kind": kind,
        "parentRunId": source if source is not None else parent,
        "forkedFrom": forked_from,
        "forks": [
            {"runId": r[0], "nodeId": r[1], "visit": r[2], "status": r[3], "createdAt": r[4]}
            for r in forks[:LINEAGE_MAX_FORKS]
        ],
        "forksOmitted": fork_total - min(len(forks), LINEAGE_MAX_FORKS),
        "rounds": rounds[-LINEAGE_MAX_ROUNDS:],
        "roundsOmitted": max(0, len(rounds) - LINEAGE_MAX_ROUNDS),
        "carriedAttempts": carried if source is not None else 0,
    }


_DESCENDANTS = (
    "WITH RECURSIVE below(run_id, via, parent, level) AS ("
    " SELECT run_id, 'child', parent_run_id, 1 FROM runs WHERE parent_run_id = ?"
    " UNION ALL SELECT run_id, 'fork', forked_from, 1 FROM runs WHERE forked_from = ?"
    " UNION ALL SELECT r.run_id, 'child', r.parent_run_id, b.level + 1 FROM runs r"
    "  JOIN below b ON r.parent_run_id = b.run_id WHERE b.level < ?"
    " UNION ALL SELECT r.run_id, 'fork', r.forked_from, b.level + 1 FROM runs r"
    "  JOIN below b ON r.forked_from = b.run_id WHERE b.level < ?)"
    " SELECT run_id, via, parent, level FROM below LIMIT ?"
)

MAX_LINEAGE_DEPTH: Final = 64
"""How many generations of forks and children ``descendants`` follows."""


def descendants(conn: sqlite3.Connection, run_id: str, limit: int) -> list[dict[str, Any]]:
    """The runs that came from ``run_id``: its children and forks, theirs, and so on, at
    most ``limit``, each as ``{runId, via, from, generation}`` (``via``: ``child`` or
    ``fork``; ``from``: the run it came from), oldest generation first, then by age."""
    rows = conn.execute(
        _DESCENDANTS, (run_id, run_id, MAX_LINEAGE_DEPTH, MAX_LINEAGE_DEPTH, limit)
    ).fetchall()
    return [{"runId": row[0], "via": row[1], "from": row[2], "generation": row[3]} for row in rows]
