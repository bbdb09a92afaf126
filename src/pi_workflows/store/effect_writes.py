"""Fenced writes for managed effects: reserve before the body runs, settle after it.

Each is one run write (revision, event, projection) so an effect's status can never
disagree with the run's history. Reservation and settlement are fenced by the runner's
claim; an operator's resolution needs no claim (the run is parked).
"""

from __future__ import annotations

from typing import Any

from pi_workflows.store import attempts, effects
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.effects import EffectStatus, Reservation
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.runs import RunRow, WriteResult, write_run
from pi_workflows.store.states import RunStatus


def reserve_effect(
    db: Database,
    claim: Claim,
    *,
    attempt_id: str,
    effect_type: str,
    effect_kind: str,
    fingerprint: str,
    expected_revision: int | None = None,
) -> tuple[Reservation, WriteResult]:
    """Reserve the effect of the run's active attempt (its node and visit give the key)."""
    holder: list[Reservation] = []
    run_id = claim.run_id

    def apply(tx: Transaction, run: RunRow) -> None:
        active = attempts.unfinished(tx.conn, run_id)
        if run.status is not RunStatus.RUNNING or active is None or active.attempt_id != attempt_id:
            raise InvalidTransitionError(
                run_id, "reserve an effect for", run.status.value, f"{attempt_id} is not active"
            )
        holder.append(
            effects.reserve(
                tx,
                run_id=run_id,
                round_no=run.round,
                generation=claim.generation,
                node_attempt_id=attempt_id,
                node_id=active.node_id,
                visit=active.visit,
                effect_type=effect_type,
                effect_kind=effect_kind,
                fingerprint=fingerprint,
            )
        )

    result = write_run(
        db,
        run_id,
        name="effects.reserve",
        event_type="effect.reserved",
        event_data={"attemptId": attempt_id, "effectType": effect_type},
        claim=claim,
        expected_revision=expected_revision,
        apply=apply,
    )
    return holder[0], result


def settle_effect(
    db: Database,
    claim: Claim,
    effect_id: str,
    status: EffectStatus,
    *,
    result: Any = None,
    error: str | None = None,
    receipt: Any = None,
    expected_revision: int | None = None,
) -> WriteResult:
    """Store an effect body's outcome and receipt under the runner's claim."""
    return write_run(
        db,
        claim.run_id,
        name="effects.settle",
        event_type="effect.settled",
        event_data={"effectId": effect_id, "status": status.value},
        claim=claim,
        expected_revision=expected_revision,
        apply=lambda tx, run: effects.settle(
            tx, run.run_id, effect_id, status, result=result, error=error, receipt=receipt
        ),
    )


def resolve_effect(
    db: Database,
    effect_id: str,
    resolution: str,
    *,
    result: Any = None,
    reason: str | None = None,
) -> WriteResult:
    """An operator resolves an ambiguous effect: ``applied``, ``rejected`` or ``retry``."""
    with db.read() as conn:
        run_id = effects.run_of(conn, effect_id)
    return write_run(
        db,
        run_id,
        name="effects.resolve",
        event_type="effect.resolved",
        event_data={"effectId": effect_id, "resolution": resolution},
        claim=None,
        apply=lambda tx, run: effects.resolve(
            tx, effect_id, resolution, result=result, reason=reason
        ),
    )


def keep_receipt(
    db: Database,
    run_id: str,
    generation: int,
    effect_id: str,
    status: EffectStatus,
    *,
    result: Any = None,
    error: str | None = None,
    receipt: Any = None,
    refused: str,
) -> WriteResult | None:
    """The server refused a runner's ``effect.settle`` (``refused`` says why): keep the
    outcome it carried anyway, because the body ran and only its runner knows how it ended.

    Exact durable evidence only: the effect is the run's, still ``applying`` (or made
    ``ambiguous`` or ``pending`` by this runner's exit), and its newest attempt was opened
    by this runner's generation. Then the effect and that attempt are settled as the runner
    said, in one run write (``effect.kept``). None when that is not the case (another
    generation reserved it again, or it was settled): nothing changes.
    """
    if status not in (EffectStatus.APPLIED, EffectStatus.REJECTED):
        return None
    with db.read() as conn:
        row = conn.execute(
            "SELECT e.run_id, e.status, a.generation, a.attempt_no FROM effects e"
            " JOIN effect_attempts a ON a.effect_id = e.effect_id"
            " AND a.attempt_no = e.attempt_count WHERE e.effect_id = ?",
            (effect_id,),
        ).fetchone()
    if (
        row is None
        or row[0] != run_id
        or row[1] not in ("applying", "ambiguous", "pending")
        or row[2] != generation
    ):
        return None
    attempt_no = int(row[3])
    kept: list[bool] = []

    def apply(tx: Transaction, run: RunRow) -> None:
        settled = effects.keep(
            tx, effect_id, attempt_no, generation, status,
            result=result, error=error, receipt=receipt,
        )  # fmt: skip
        kept.append(settled)

    written = write_run(
        db,
        run_id,
        name="effects.keep",
        event_type="effect.kept",
        event_data={"effectId": effect_id, "status": status.value, "refused": refused},
        claim=None,
        apply=apply,
    )
    return written if kept and kept[0] else None
