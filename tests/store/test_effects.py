"""Effect reservations: one key per visit, adopted receipts, conflicts, operator resolution."""

from __future__ import annotations

import pytest

from pi_workflows.store import lifecycle
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database
from pi_workflows.store.effect_writes import reserve_effect, resolve_effect, settle_effect
from pi_workflows.store.effects import EffectStatus, Reservation
from pi_workflows.store.errors import EffectConflictError, InvalidTransitionError
from pi_workflows.store.lifecycle import GoTo
from pi_workflows.store.states import AttemptStatus

from support.store import problems, running


def _reserve(db: Database, claim: Claim, attempt_id: str, fingerprint: str = "fp-1") -> Reservation:
    reservation, _ = reserve_effect(
        db,
        claim,
        attempt_id=attempt_id,
        effect_type="mail",
        effect_kind="manual",
        fingerprint=fingerprint,
    )
    return reservation


def test_a_settled_effect_is_adopted_not_run_again(db: Database) -> None:
    """Reserving a visit's effect after it was applied returns the receipt and no body run."""
    claim = running(db)
    first = lifecycle.start_node(db, claim, "send").attempt
    reservation = _reserve(db, claim, first.attempt_id)
    assert reservation.run_body
    settle_effect(db, claim, reservation.effect_id, EffectStatus.APPLIED, result={"sent": 1})
    lifecycle.park(db, claim, lifecycle.ParkReason.RUNNER_CRASHED)
    lifecycle.resume(db, claim.run_id)
    again_claim = lifecycle.claim(db, claim.run_id, "runner-2").claim
    retry = lifecycle.start_node(db, again_claim, "send").attempt
    assert (retry.visit, retry.attempt_no) == (1, 2)
    adopted = _reserve(db, again_claim, retry.attempt_id)
    assert not adopted.run_body
    assert adopted.result == {"sent": 1}
    assert adopted.effect_key == reservation.effect_key
    assert problems(db) == []


def test_the_same_key_with_another_request_is_a_conflict_naming_the_node(db: Database) -> None:
    """A changed fingerprint for the same visit is refused and names the node."""
    claim = running(db)
    attempt = lifecycle.start_node(db, claim, "send").attempt
    reservation = _reserve(db, claim, attempt.attempt_id)
    lifecycle.park(db, claim, lifecycle.ParkReason.RUNNER_CRASHED)
    assert problems(db) == []
    resolve_effect(db, reservation.effect_id, "retry")
    lifecycle.resume(db, claim.run_id)
    again = lifecycle.claim(db, claim.run_id, "runner-2").claim
    retry = lifecycle.start_node(db, again, "send").attempt
    with pytest.raises(EffectConflictError, match="node send"):
        _reserve(db, again, retry.attempt_id, fingerprint="fp-changed")


def test_a_loop_visit_gets_a_new_key(db: Database) -> None:
    """The next visit of the same node reserves a different effect."""
    claim = running(db)
    first = lifecycle.start_node(db, claim, "send").attempt
    one = _reserve(db, claim, first.attempt_id)
    settle_effect(db, claim, one.effect_id, EffectStatus.APPLIED, result=1)
    finished = lifecycle.finish_node(
        db,
        claim,
        first.attempt_id,
        AttemptStatus.COMPLETED,
        GoTo("send"),
        output=1,
        start_next=True,
    )
    assert finished.next_attempt is not None
    two = _reserve(db, claim, finished.next_attempt.attempt_id)
    assert two.effect_key != one.effect_key
    assert two.run_body


def test_only_an_ambiguous_effect_can_be_resolved(db: Database) -> None:
    """Operators resolve ambiguous effects only, and retry only while the run can continue."""
    claim = running(db)
    attempt = lifecycle.start_node(db, claim, "send").attempt
    reservation = _reserve(db, claim, attempt.attempt_id)
    with pytest.raises(InvalidTransitionError, match="only ambiguous"):
        resolve_effect(db, reservation.effect_id, "applied")
    lifecycle.cancel(db, claim.run_id, claim=claim)
    with pytest.raises(InvalidTransitionError, match="its run has ended"):
        resolve_effect(db, reservation.effect_id, "retry")
    resolve_effect(db, reservation.effect_id, "rejected", reason="never sent")
    row = db.conn.execute("SELECT status, error FROM effects").fetchone()
    assert tuple(row) == ("rejected", "never sent")
    assert problems(db) == []
