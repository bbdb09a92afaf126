"""Managed effects as the lifecycle sees them: what cancellation and recovery do to them.

Owns ``effects`` and ``effect_attempts``. Functions here run inside a run write's
transaction. An ``applying`` effect whose runner is gone is never assumed to have failed or
succeeded: an idempotent one becomes pending again (its rerun is safe), a manual one
becomes ambiguous and waits for an operator. ``settle_on_exit`` is the one place that
decides this, for every way a run leaves ``running``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from pi_workflows.protocol.effects import TIMED_OUT_RESULT, effect_key
from pi_workflows.store import jsoncol, values
from pi_workflows.store.database import Transaction
from pi_workflows.store.errors import (
    EffectConflictError,
    EffectNotFoundError,
    InvalidTransitionError,
)
from pi_workflows.store.ids import new_id
from pi_workflows.store.states import ParkReason, RunStatus


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


def _lose_applying_attempts(tx: Transaction, effect_ids: list[str], status: str = "lost") -> None:
    for effect_id in effect_ids:
        tx.conn.execute(
            "UPDATE effect_attempts SET status = ?, finished_at = ?"
            " WHERE effect_id = ? AND status = 'applying'",
            (status, tx.now, effect_id),
        )


@dataclass(frozen=True)
class Uncertain:
    """A manual effect whose body may or may not have run: the run must stop for review."""

    effect_id: str
    effect_type: str
    node_id: str

    def describe(self) -> str:
        """One line for the run's park detail."""
        return (
            f"effect {self.effect_id} ({self.effect_type} of node {self.node_id}) may or may not"
            " have been applied"
        )


def settle_on_exit(tx: Transaction, run_id: str, *, terminal: bool) -> list[Uncertain]:
    """The run leaves ``running``: settle every effect its runner may still be applying.

    The one rule every exit from ``running`` goes through (``transitions.apply_transition``
    calls it): an ``applying`` body is never assumed to have failed or succeeded.

    - The run ends (``terminal``): effects that never started are cancelled, applying ones
      of either kind become ambiguous (an operator resolves them; nothing runs again).
    - The run parks, is recovered or waits: an applying idempotent effect becomes pending
      (running it again under the same key is safe), an applying manual one ambiguous.

    Returns the manual effects that became ambiguous on a non-terminal exit: the caller must
    then park the run with ``effectAmbiguous`` instead of letting it continue.
    """
    rows = tx.conn.execute(
        "SELECT effect_id, effect_kind, effect_type, node_id, status FROM effects"
        " WHERE run_id = ? AND status IN ('pending', 'applying') ORDER BY created_at, rowid",
        (run_id,),
    ).fetchall()
    uncertain: list[Uncertain] = []
    lost: list[str] = []
    for effect_id, kind, effect_type, node_id, status in rows:
        if status == EffectStatus.PENDING:
            target = EffectStatus.CANCELLED if terminal else None
        elif terminal or kind == "manual":
            target = EffectStatus.AMBIGUOUS
        else:
            target = EffectStatus.PENDING
        if target is None:
            continue
        tx.conn.execute(
            "UPDATE effects SET status = ?, updated_at = ? WHERE effect_id = ?",
            (target.value, tx.now, effect_id),
        )
        if status == EffectStatus.APPLYING:
            lost.append(effect_id)
            if target is EffectStatus.AMBIGUOUS and not terminal:
                uncertain.append(Uncertain(effect_id, effect_type, node_id))
    _lose_applying_attempts(tx, lost)
    return uncertain


def applying(conn: sqlite3.Connection, run_id: str) -> list[tuple[str, str]]:
    """``(effect id, kind)`` of every effect of the run whose body may be running now."""
    rows = conn.execute(
        "SELECT effect_id, effect_kind FROM effects WHERE run_id = ? AND status = 'applying'",
        (run_id,),
    ).fetchall()
    return [(row[0], row[1]) for row in rows]


def reject_timed_out(tx: Transaction, run_id: str, error: str) -> list[str]:
    """The node deadline killed the body of an idempotent effect: settle it as timed out.

    Its node is recorded ``timed_out`` in the same transaction, so the effect is never
    reserved again under that visit; it is ``rejected`` with ``TIMED_OUT_RESULT`` exactly as
    when the runner stops a body at its own deadline. Manual effects are not touched (their
    run parks instead, see ``settle_on_exit``). Returns the settled ids.
    """
    ids = [
        row[0]
        for row in tx.conn.execute(
            "SELECT effect_id FROM effects WHERE run_id = ? AND status = 'applying'"
            " AND effect_kind = 'idempotent'",
            (run_id,),
        )
    ]
    for effect_id in ids:
        tx.conn.execute(
            "UPDATE effects SET status = 'rejected', result_json = ?, error = ?, updated_at = ?"
            " WHERE effect_id = ?",
            (jsoncol.dumps(TIMED_OUT_RESULT), error, tx.now, effect_id),
        )
    _lose_applying_attempts(tx, ids, "rejected")
    return ids


def check_retryable(conn: sqlite3.Connection, run_id: str, attempt_id: str) -> None:
    """A retry policy may try ``attempt_id``'s node visit again only when its effect is a
    settled (or pending) idempotent one: refused while one is applying or ambiguous, or
    when it is a manual effect (never repeated automatically). Changes nothing: the effect
    keeps its outcome until the next try reserves it (``reserve``)."""
    rows = conn.execute(
        "SELECT effect_id, effect_kind, status FROM effects WHERE node_attempt_id = ?",
        (attempt_id,),
    ).fetchall()
    for effect_id, kind, status in rows:
        if kind == "manual" or status not in ("applied", "rejected", "pending"):
            raise InvalidTransitionError(
                run_id,
                f"retry attempt {attempt_id} of",
                "running",
                f"its {kind} effect {effect_id} is {status}; a retry repeats only settled"
                " idempotent effects",
            )


def _tried_again(conn: sqlite3.Connection, last_attempt_id: str | None, attempt_id: str) -> bool:
    """Whether ``attempt_id`` is a later try of the visit whose ``last_attempt_id`` a retry
    policy settled ``retried`` or ``exhausted``."""
    if last_attempt_id is None or last_attempt_id == attempt_id:
        return False
    row = conn.execute(
        "SELECT status FROM node_attempts WHERE attempt_id = ?", (last_attempt_id,)
    ).fetchone()
    return row is not None and row[0] in ("retried", "exhausted")


def unresolved_ambiguous(conn: sqlite3.Connection, run_id: str) -> int:
    """How many of the run's effects are still ambiguous."""
    row = conn.execute(
        "SELECT COUNT(*) FROM effects WHERE run_id = ? AND status = 'ambiguous'", (run_id,)
    ).fetchone()
    return int(row[0])


@dataclass(frozen=True)
class Reservation:
    """The answer to an effect reservation.

    ``run_body`` is True when the caller must execute the body now (status ``applying``);
    otherwise the stored outcome (``applied`` with ``result`` or ``rejected`` with
    ``error``) is adopted and the body must not run again.
    """

    effect_id: str
    effect_key: str
    status: EffectStatus
    run_body: bool
    attempt_no: int
    result: Any = None
    error: str | None = None


def list_effects(
    conn: sqlite3.Connection, run_id: str | None = None, *, after: int = 0, limit: int = 1000
) -> list[dict[str, Any]]:
    """Effects of one run, or of every run, oldest first: at most ``limit`` after the cursor
    ``after``. A result over ``values.INLINE_LIMIT`` is ``null`` with its ``resultRef``."""
    sql = (
        "SELECT effect_id, run_id, effect_key, effect_type, effect_kind, node_id, visit, status,"
        " attempt_count, result_json, error, updated_at, result_ref, rowid FROM effects"
        " WHERE rowid > ?"
    )
    if run_id is None:
        rows = conn.execute(f"{sql} ORDER BY rowid LIMIT ?", (after, limit)).fetchall()
    else:
        rows = conn.execute(
            f"{sql} AND run_id = ? ORDER BY rowid LIMIT ?", (after, run_id, limit)
        ).fetchall()
    return [_wire(conn, row) for row in rows]


def effect_record(conn: sqlite3.Connection, effect_id: str) -> dict[str, Any]:
    """One effect as ``list_effects`` gives it; ``EffectNotFoundError`` when there is none."""
    row = conn.execute(
        "SELECT effect_id, run_id, effect_key, effect_type, effect_kind, node_id, visit, status,"
        " attempt_count, result_json, error, updated_at, result_ref, rowid FROM effects"
        " WHERE effect_id = ?",
        (effect_id,),
    ).fetchone()
    if row is None:
        raise EffectNotFoundError(effect_id)
    return _wire(conn, row)


def _wire(conn: sqlite3.Connection, row: sqlite3.Row) -> dict[str, Any]:
    result_ref = row[12]
    return {
        "cursor": row[13],
        "effectId": row[0],
        "runId": row[1],
        "effectKey": row[2],
        "type": row[3],
        "kind": row[4],
        "nodeId": row[5],
        "visit": row[6],
        "status": row[7],
        "attempts": row[8],
        "result": jsoncol.loads(row[9]),
        "resultRef": None if result_ref is None else values.reference(conn, result_ref).to_json(),
        "error": row[10],
        "updatedAt": row[11],
    }


UPGRADED_PREFIX: Final = "upgraded:"
"""Marks a stored fingerprint that the next reservation of its key may replace: the run was
upgraded to new code (``upgrades.release_fingerprints``), whose request for the same node
visit legitimately differs."""


def release_fingerprints(tx: Transaction, run_id: str, round_no: int) -> int:
    """Let the new code of an upgraded run reserve its current round's keys again with its
    own request (a pending effect whose body runs again, the next try of a retried one, an
    applied one the visit adopts): their stored fingerprints are marked, not compared. An
    effect whose outcome is open (applying, ambiguous) is left alone."""
    cursor = tx.conn.execute(
        "UPDATE effects SET fingerprint = ? || fingerprint WHERE run_id = ?"
        " AND status IN ('pending', 'applied', 'rejected') AND fingerprint NOT LIKE ?"
        " AND node_attempt_id IN (SELECT attempt_id FROM node_attempts WHERE run_id = ?"
        " AND round = ?)",
        (UPGRADED_PREFIX, run_id, UPGRADED_PREFIX + "%", run_id, round_no),
    )
    return cursor.rowcount


def reserve(
    tx: Transaction,
    *,
    run_id: str,
    round_no: int,
    generation: int,
    node_attempt_id: str,
    node_id: str,
    visit: int,
    effect_type: str,
    effect_kind: str,
    fingerprint: str,
) -> Reservation:
    """Reserve (or find) the effect of one node visit inside a fenced write.

    A new key, or a pending one (an idempotent effect reset after its runner died), becomes
    ``applying`` with a new attempt and the body must run. An applied or rejected key returns
    its stored outcome. The same key with another fingerprint is ``EffectConflictError``;
    an ambiguous, cancelled or still-applying key cannot be reserved.
    """
    key = effect_key(run_id, round_no, node_id, visit, effect_type)
    row = tx.conn.execute(
        "SELECT effect_id, fingerprint, status, attempt_count, result_json, error, result_ref,"
        " effect_kind, node_attempt_id FROM effects WHERE effect_key = ?",
        (key,),
    ).fetchone()
    if row is None:
        effect_id = new_id("eff")
        tx.conn.execute(
            "INSERT INTO effects (effect_id, run_id, effect_key, node_attempt_id, effect_type,"
            " effect_kind, node_id, visit, fingerprint, status, attempt_count, created_at,"
            " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'applying', 1, ?, ?)",
            (
                effect_id,
                run_id,
                key,
                node_attempt_id,
                effect_type,
                effect_kind,
                node_id,
                visit,
                fingerprint,
                tx.now,
                tx.now,
            ),
        )
        _open_attempt(tx, effect_id, 1, generation, node_attempt_id)
        return Reservation(effect_id, key, EffectStatus.APPLYING, True, 1)
    effect_id, stored_fingerprint, status, attempt_count, result_json, error, result_ref = tuple(
        row[:7]
    )
    kind, last_attempt = row[7], row[8]
    if stored_fingerprint != fingerprint:
        if not str(stored_fingerprint).startswith(UPGRADED_PREFIX):
            raise EffectConflictError(run_id, node_id, effect_type)
        # The run was upgraded since the key was reserved (``upgrades.upgrade``): the new
        # code's request takes the key over, with the outcome rules below.
        tx.conn.execute(
            "UPDATE effects SET fingerprint = ?, effect_kind = ? WHERE effect_id = ?",
            (fingerprint, effect_kind, effect_id),
        )
        kind = effect_kind
    status = EffectStatus(status)
    retried = kind == "idempotent" and _tried_again(tx.conn, last_attempt, node_attempt_id)
    if status in (EffectStatus.APPLIED, EffectStatus.REJECTED) and not retried:
        # The adopting attempt becomes the effect's last: when a retry policy tries the
        # visit again after it, that next try runs the body again (``_tried_again``), as it
        # would after the attempt that ran the body. (A runner that died after its body's
        # outcome settled leaves it to the next runner's attempt of the same try.)
        if last_attempt != node_attempt_id:
            tx.conn.execute(
                "UPDATE effects SET node_attempt_id = ? WHERE effect_id = ?",
                (node_attempt_id, effect_id),
            )
        return Reservation(
            effect_id,
            key,
            status,
            False,
            attempt_count,
            values.load(tx.conn, result_json, result_ref),
            error,
        )
    if status is EffectStatus.PENDING or retried:
        # A pending key (its runner died), or the next try of a visit a retry policy tries
        # again: the body runs again under the same key, and the outside system dedupes.
        attempt_no = attempt_count + 1
        tx.conn.execute(
            "UPDATE effects SET status = 'applying', attempt_count = ?, node_attempt_id = ?,"
            " updated_at = ? WHERE effect_id = ?",
            (attempt_no, node_attempt_id, tx.now, effect_id),
        )
        _open_attempt(tx, effect_id, attempt_no, generation, node_attempt_id)
        return Reservation(effect_id, key, EffectStatus.APPLYING, True, attempt_no)
    raise InvalidTransitionError(
        run_id,
        f"reserve effect {effect_id} of node {node_id}",
        status.value,
        "resolve it with 'pi-workflows effect resolve' first"
        if status is EffectStatus.AMBIGUOUS
        else "",
    )


def _open_attempt(
    tx: Transaction, effect_id: str, attempt_no: int, generation: int, node_attempt_id: str
) -> None:
    tx.conn.execute(
        "INSERT INTO effect_attempts (effect_id, attempt_no, generation, node_attempt_id, status,"
        " started_at) VALUES (?, ?, ?, ?, 'applying', ?)",
        (effect_id, attempt_no, generation, node_attempt_id, tx.now),
    )


def settle(
    tx: Transaction,
    run_id: str,
    effect_id: str,
    status: EffectStatus,
    *,
    result: Any = None,
    error: str | None = None,
    receipt: Any = None,
) -> None:
    """Record the outcome of an applying effect's body (``applied`` or ``rejected``)."""
    if status not in (EffectStatus.APPLIED, EffectStatus.REJECTED):
        raise ValueError(f"an effect body settles as applied or rejected, not {status}")
    cursor = tx.conn.execute(
        "UPDATE effects SET status = ?, result_json = ?, result_ref = ?, error = ?,"
        " updated_at = ? WHERE effect_id = ? AND run_id = ? AND status = 'applying'",
        (
            status.value,
            *values.store(tx, result),
            error,
            tx.now,
            effect_id,
            run_id,
        ),
    )
    if cursor.rowcount != 1:
        raise InvalidTransitionError(run_id, f"settle effect {effect_id}", "not applying")
    tx.conn.execute(
        "UPDATE effect_attempts SET status = ?, receipt_json = ?, finished_at = ?"
        " WHERE effect_id = ? AND status = 'applying'",
        (status.value, None if receipt is None else jsoncol.dumps(receipt), tx.now, effect_id),
    )


def run_of(conn: sqlite3.Connection, effect_id: str) -> str:
    """The run an effect belongs to; ``EffectNotFoundError`` when there is no such effect."""
    row = conn.execute("SELECT run_id FROM effects WHERE effect_id = ?", (effect_id,)).fetchone()
    if row is None:
        raise EffectNotFoundError(effect_id)
    return str(row[0])


def resolve(
    tx: Transaction,
    effect_id: str,
    resolution: str,
    *,
    result: Any = None,
    reason: str | None = None,
) -> str:
    """An operator's decision on an ambiguous effect: ``applied``, ``rejected`` or ``retry``.

    ``retry`` makes it pending, so the body runs again (a duplicate is possible). Returns the
    run id.
    """
    row = tx.conn.execute(
        "SELECT run_id, status FROM effects WHERE effect_id = ?", (effect_id,)
    ).fetchone()
    if row is None:
        raise EffectNotFoundError(effect_id)
    run_id, status = row
    live = tx.conn.execute(
        "SELECT COUNT(*) FROM run_runners WHERE run_id = ? AND status != 'exited'", (run_id,)
    ).fetchone()[0]
    if live:
        raise InvalidTransitionError(
            run_id,
            f"resolve effect {effect_id}",
            "owned by a runner",
            "a runner of the run (or a command it started) may still be alive; resolve the"
            " effect once 'pi-workflows run show' lists no runner",
        )
    if status != EffectStatus.AMBIGUOUS:
        raise InvalidTransitionError(
            run_id, f"resolve effect {effect_id}", status, "only ambiguous effects are resolved"
        )
    if resolution == "retry":
        run_status = tx.conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,))
        if run_status.fetchone()[0] in ("completed", "failed", "timed_out", "cancelled"):
            raise InvalidTransitionError(
                run_id,
                f"retry effect {effect_id}",
                "finished",
                "its run has ended; resolve it as applied or rejected",
            )
    target = {"applied": "applied", "rejected": "rejected", "retry": "pending"}[resolution]
    tx.conn.execute(
        "UPDATE effects SET status = ?, result_json = ?, result_ref = ?, error = ?,"
        " updated_at = ? WHERE effect_id = ?",
        (
            target,
            *values.store(tx, result),
            reason if resolution == "rejected" else None,
            tx.now,
            effect_id,
        ),
    )
    _settle_park(tx, str(run_id))
    return str(run_id)


def _settle_park(tx: Transaction, run_id: str) -> None:
    """A run parked ``effectAmbiguous`` whose last ambiguous effect was just resolved is
    parked ``effectsResolved`` from now on: every view then says it is paused and waits for
    ``run resume``, not that an effect still needs a decision."""
    left = tx.conn.execute(
        "SELECT COUNT(*) FROM effects WHERE run_id = ? AND status = 'ambiguous'", (run_id,)
    ).fetchone()[0]
    if left:
        return
    tx.conn.execute(
        "UPDATE runs SET park_reason = ?, park_detail = ? WHERE run_id = ? AND status = ?"
        " AND park_reason = ?",
        (
            ParkReason.EFFECTS_RESOLVED.value,
            "every effect that may or may not have been applied was resolved; resume the run",
            run_id,
            RunStatus.PAUSED.value,
            ParkReason.EFFECT_AMBIGUOUS.value,
        ),
    )


def keep(
    tx: Transaction,
    effect_id: str,
    attempt_no: int,
    generation: int,
    status: EffectStatus,
    *,
    result: Any = None,
    error: str | None = None,
    receipt: Any = None,
) -> bool:
    """Settle an effect from the receipt of a runner the server refused
    (``effect_writes.keep_receipt``): only while its newest attempt is still
    ``attempt_no`` of ``generation`` and the effect is not settled. Returns whether it was."""
    cursor = tx.conn.execute(
        "UPDATE effects SET status = ?, result_json = ?, result_ref = ?, error = ?,"
        " updated_at = ? WHERE effect_id = ? AND attempt_count = ?"
        " AND status IN ('applying', 'ambiguous', 'pending')",
        (status.value, *values.store(tx, result), error, tx.now, effect_id, attempt_no),
    )
    if cursor.rowcount != 1:
        return False
    tx.conn.execute(
        "UPDATE effect_attempts SET status = ?, receipt_json = ?, finished_at = ?"
        " WHERE effect_id = ? AND attempt_no = ? AND generation = ?",
        (
            status.value,
            None if receipt is None else jsoncol.dumps(receipt),
            tx.now,
            effect_id,
            attempt_no,
            generation,
        ),
    )
    return True
