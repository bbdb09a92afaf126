"""Managed effects as the lifecycle sees them: what cancellation and recovery do to them.

Owns ``effects`` and ``effect_attempts``. Functions here run inside a run write's
transaction. An ``applying`` effect whose runner is gone is never assumed to have failed or
succeeded: an idempotent one becomes pending again (its rerun is safe), a manual one
becomes ambiguous and waits for an operator.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from enum import StrEnum

from pi_workflows.store.database import Transaction


class EffectStatus(StrEnum):
    """The status of a managed effect."""

    PENDING = "pending"  # reserved or reset; its body has not run (or may run again safely)
    APPLYING = "applying"  # its body may be running right now
    APPLIED = "applied"  # terminal: receipt stored
    REJECTED = "rejected"  # terminal: the body failed, error stored
    AMBIGUOUS = "ambiguous"  # the body may or may not have run; only an operator decides
    CANCELLED = "cancelled"  # terminal: it never started


@dataclass(frozen=True)
class EffectSummary:
    """One effect as ``run show`` lists it."""

    effect_id: str
    effect_type: str
    effect_kind: str
    node_id: str
    visit: int
    status: EffectStatus


def list_for_run(conn: sqlite3.Connection, run_id: str) -> list[EffectSummary]:
    """The run's effects, oldest first."""
    rows = conn.execute(
        "SELECT effect_id, effect_type, effect_kind, node_id, visit, status FROM effects"
        " WHERE run_id = ? ORDER BY created_at, rowid",
        (run_id,),
    ).fetchall()
    return [
        EffectSummary(row[0], row[1], row[2], row[3], row[4], EffectStatus(row[5])) for row in rows
    ]


def _lose_applying_attempts(tx: Transaction, effect_ids: list[str]) -> None:
    for effect_id in effect_ids:
        tx.conn.execute(
            "UPDATE effect_attempts SET status = 'lost', finished_at = ?"
            " WHERE effect_id = ? AND status = 'applying'",
            (tx.now, effect_id),
        )


def cancel_for_run(tx: Transaction, run_id: str) -> tuple[list[str], list[str]]:
    """On a terminal transition: unstarted effects are cancelled, applying ones ambiguous.

    Returns (cancelled ids, ambiguous ids).
    """
    pending = [
        row[0]
        for row in tx.conn.execute(
            "SELECT effect_id FROM effects WHERE run_id = ? AND status = 'pending'", (run_id,)
        )
    ]
    applying = [
        row[0]
        for row in tx.conn.execute(
            "SELECT effect_id FROM effects WHERE run_id = ? AND status = 'applying'", (run_id,)
        )
    ]
    tx.conn.execute(
        "UPDATE effects SET status = 'cancelled', updated_at = ?"
        " WHERE run_id = ? AND status = 'pending'",
        (tx.now, run_id),
    )
    tx.conn.execute(
        "UPDATE effects SET status = 'ambiguous', updated_at = ?"
        " WHERE run_id = ? AND status = 'applying'",
        (tx.now, run_id),
    )
    _lose_applying_attempts(tx, applying)
    return pending, applying


def settle_lost_runner(tx: Transaction, run_id: str) -> list[str]:
    """The run's runner is gone: reset applying idempotent effects, mark manual ones ambiguous.

    Returns the ids that became ambiguous (the run must then park with effectAmbiguous).
    """
    applying = tx.conn.execute(
        "SELECT effect_id, effect_kind FROM effects WHERE run_id = ? AND status = 'applying'",
        (run_id,),
    ).fetchall()
    ambiguous: list[str] = []
    for effect_id, kind in applying:
        status = EffectStatus.PENDING if kind == "idempotent" else EffectStatus.AMBIGUOUS
        tx.conn.execute(
            "UPDATE effects SET status = ?, updated_at = ? WHERE effect_id = ?",
            (status.value, tx.now, effect_id),
        )
        if status is EffectStatus.AMBIGUOUS:
            ambiguous.append(effect_id)
    _lose_applying_attempts(tx, [row[0] for row in applying])
    return ambiguous


def unresolved_ambiguous(conn: sqlite3.Connection, run_id: str) -> int:
    """How many of the run's effects are still ambiguous."""
    row = conn.execute(
        "SELECT COUNT(*) FROM effects WHERE run_id = ? AND status = 'ambiguous'", (run_id,)
    ).fetchone()
    return int(row[0])
