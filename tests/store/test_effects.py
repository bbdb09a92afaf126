"""Effect reservations: one key per visit, adopted receipts, conflicts, operator resolution."""

from __future__ import annotations

from typing import Any

import pytest

from pi_workflows.store import lifecycle
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database
from pi_workflows.store.effect_writes import reserve_effect, resolve_effect, settle_effect
from pi_workflows.store.effects import EffectStatus, Reservation
from pi_workflows.store.errors import EffectConflictError, InvalidTransitionError
from pi_workflows.store.lifecycle import GoTo
from pi_workflows.store.next_steps import next_step
from pi_workflows.store.states import AttemptStatus
from pi_workflows.store.views import run_view

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


def get_run(db: Database, run_id: str) -> dict[str, Any]:
    with db.read() as conn:
        return run_view(conn, run_id)


def test_resolving_the_last_ambiguous_effect_leaves_a_run_to_resume(db: Database) -> None:
    """A run parked on two ambiguous effects shows `ambiguous` until both are resolved; the
    last resolve parks it `effectsResolved` in the same transaction: status `paused`, and
    the next step is `run resume`, never a decision on an effect that is no longer there."""
    claim = running(db)
    attempt = lifecycle.start_node(db, claim, "send").attempt
    mail = _reserve(db, claim, attempt.attempt_id)
    sms, _ = reserve_effect(
        db, claim, attempt_id=attempt.attempt_id, effect_type="sms", effect_kind="manual",
        fingerprint="fp-2",
    )  # fmt: skip
    lifecycle.park(db, claim, lifecycle.ParkReason.RUNNER_CRASHED)
    parked = get_run(db, claim.run_id)
    assert (parked["status"], parked["parkReason"]) == ("ambiguous", "effectAmbiguous")
    resolve_effect(db, mail.effect_id, "applied", result={"sent": 1})
    one_left = get_run(db, claim.run_id)
    assert (one_left["status"], one_left["parkReason"]) == ("ambiguous", "effectAmbiguous")
    assert sms.effect_id in str(next_step(one_left))
    resolve_effect(db, sms.effect_id, "rejected", reason="never sent")
    settled = get_run(db, claim.run_id)
    assert (settled["status"], settled["parkReason"]) == ("paused", "effectsResolved")
    assert next_step(settled) == f"pi-workflows run resume {claim.run_id}"
    assert problems(db) == []
    lifecycle.resume(db, claim.run_id)
    assert get_run(db, claim.run_id)["status"] == "queued"
