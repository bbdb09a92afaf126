"""Run deadlines: the rows' arithmetic and the due query (``runs.deadline_ms`` and
``runs.deadline_at``).

A run deadline bounds a whole run, whatever it is doing (working, waiting, paused), and
its tree. It is armed as an absolute time when the run is reserved (``armed``), armed again
from the restart by a restart (``rearm``), kept by an upgrade, and taken by a fork from its
source's duration (docs/state.md, "Run deadlines"). The server's timer asks ``next_due``
and ``due``; ``lifecycle.expire`` ends a run whose deadline passed. This module changes no
run's status and imports nothing that does.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from typing import Any

from pi_workflows.store.database import Transaction


def declared_ms(definition: dict[str, Any]) -> int | None:
    """The run deadline a definition snapshot declares (``deadlineMs``), if any."""
    value = definition.get("deadlineMs")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def armed(
    definition: dict[str, Any], override_ms: int | None, now: int
) -> tuple[int | None, int | None]:
    """The ``(deadline_ms, deadline_at)`` columns of a run reserved at ``now``: the start's
    override, else the definition's declared deadline, else none."""
    duration = override_ms if override_ms is not None else declared_ms(definition)
    if duration is None:
        return None, None
    return duration, now + duration


def rearm(tx: Transaction, run_id: str) -> None:
    """A restart starts the run again: its deadline counts from now (same duration)."""
    tx.conn.execute(
        "UPDATE runs SET deadline_at = ? + deadline_ms"
        " WHERE run_id = ? AND deadline_ms IS NOT NULL",
        (tx.now, run_id),
    )


def duration_of(conn: sqlite3.Connection, run_id: str) -> int | None:
    """The run deadline duration (ms) run ``run_id`` was started with, if any."""
    row = conn.execute("SELECT deadline_ms FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return None if row is None else row[0]


def deadline_at(conn: sqlite3.Connection, run_id: str) -> int | None:
    """When run ``run_id``'s deadline passes (store ms), if it has one."""
    row = conn.execute("SELECT deadline_at FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return None if row is None else row[0]


def view(conn: sqlite3.Connection, run_id: str) -> dict[str, int] | None:
    """``{durationMs, at}`` of run ``run_id``'s deadline for its ``RunView``, or None."""
    row = conn.execute(
        "SELECT deadline_ms, deadline_at FROM runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    if row is None or row[0] is None:
        return None
    return {"durationMs": int(row[0]), "at": int(row[1])}


_NOT_CLEANING_UP = (
    " AND NOT EXISTS (SELECT 1 FROM run_cleanups c WHERE c.run_id = r.run_id"
    " AND c.status = 'running')"
)
"""A run whose cleanup node runs was ended already (its cleanup has its own timeout)."""


def next_due(conn: sqlite3.Connection) -> int | None:
    """The earliest deadline of an unfinished run (a range of ``runs_deadline``), or None."""
    row = conn.execute(
        "SELECT MIN(deadline_at) FROM runs r WHERE deadline_at IS NOT NULL"
        " AND status IN ('queued', 'running', 'waiting', 'paused')" + _NOT_CLEANING_UP
    ).fetchone()
    return None if row is None else row[0]


def due(conn: sqlite3.Connection, now: int, limit: int = 100) -> list[str]:
    """The unfinished runs whose deadline passed at ``now``, earliest first (at most
    ``limit``; the caller asks again while a full batch comes back)."""
    rows = conn.execute(
        "SELECT run_id FROM runs r WHERE deadline_at IS NOT NULL AND deadline_at <= ?"
        " AND status IN ('queued', 'running', 'waiting', 'paused')"
        + _NOT_CLEANING_UP
        + " ORDER BY deadline_at, run_id LIMIT ?",
        (now, limit),
    ).fetchall()
    return [row[0] for row in rows]


def reason(duration_ms: int, at: int) -> str:
    """The one-line reason a run whose deadline passed ends with (and its tree is cancelled
    with): names the run deadline, its duration and when it passed."""
    when = datetime.fromtimestamp(at / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"the run deadline passed ({human(duration_ms)} after the run started, at {when})"


def human(duration_ms: int) -> str:
    """A duration as a person reads it: ``2h``, ``90m``, ``45s``, ``1d 2h``."""
    seconds = duration_ms // 1000
    if seconds < 60:
        return f"{duration_ms / 1000:g}s"
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return " ".join(parts)
