"""A retry policy never repeats an effect whose outcome is open or that is manual: the
store refuses the retry in the same transaction and changes nothing (the crash path, not
the policy, settles an effect left applying)."""

from __future__ import annotations

import pytest

from pi_workflows.store import lifecycle, wait_steps
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database
from pi_workflows.store.effect_writes import reserve_effect, settle_effect
from pi_workflows.store.effects import EffectStatus
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.states import AttemptStatus, ParkReason

from support.store import problems, running, snapshot

pytestmark = pytest.mark.timeout(60)


def _with_effect(db: Database, kind: str, settled: EffectStatus | None) -> tuple[Claim, str]:
    claim = running(db)
    attempt = lifecycle.start_node(db, claim, "a").attempt
    reservation, _ = reserve_effect(
        db, claim, attempt_id=attempt.attempt_id, effect_type="t", effect_kind=kind,
        fingerprint="f",
    )  # fmt: skip
    if settled is not None:
        settle_effect(db, claim, reservation.effect_id, settled, result={"ok": 1})
    return claim, attempt.attempt_id


@pytest.mark.parametrize(
    ("kind", "settled", "why"),
    [
        ("idempotent", None, "an effect is applying"),
        ("manual", None, "an effect is applying"),
        ("manual", EffectStatus.APPLIED, "its manual effect"),
    ],
)
def test_a_retry_is_refused_while_the_effect_is_open_or_manual(
    db: Database, kind: str, settled: EffectStatus | None, why: str
) -> None:
    claim, attempt_id = _with_effect(db, kind, settled)
    before = snapshot(db)
    with pytest.raises(InvalidTransitionError, match=why):
        wait_steps.retry(db, claim, attempt_id, AttemptStatus.FAILED, "boom", delay_ms=0)
    assert snapshot(db) == before
    assert problems(db, timed=False) == []


def test_a_settled_idempotent_effect_is_tried_again(db: Database) -> None:
    claim, attempt_id = _with_effect(db, "idempotent", EffectStatus.APPLIED)
    retried = wait_steps.retry(db, claim, attempt_id, AttemptStatus.FAILED, "boom", delay_ms=0)
    assert retried.next_attempt is not None


def test_a_try_that_adopted_a_rejection_is_followed_by_one_that_runs_the_body_again(
    db: Database,
) -> None:
    """A runner died after its idempotent body's rejection settled but before its node did:
    the next runner's attempt of the same try adopts the rejection (the body is not run
    again for that try), and the retry policy's next try runs the body again under the same
    key. (Before, every later try adopted the old rejection, and the visit could never
    succeed.)"""
    claim, _ = _with_effect(db, "idempotent", EffectStatus.REJECTED)
    lifecycle.park(db, claim, ParkReason.SERVER_STOPPED)  # the crash: the attempt is cut off
    lifecycle.resume(db, claim.run_id)
    claim = lifecycle.claim(db, claim.run_id, "runner-2").claim
    again = lifecycle.start_node(db, claim, "a").attempt
    adopted, _ = reserve_effect(
        db, claim, attempt_id=again.attempt_id, effect_type="t", effect_kind="idempotent",
        fingerprint="f",
    )  # fmt: skip
    assert (adopted.status, adopted.run_body) == (EffectStatus.REJECTED, False)
    retried = wait_steps.retry(
        db, claim, again.attempt_id, AttemptStatus.FAILED, "boom", delay_ms=0
    )
    assert retried.next_attempt is not None
    next_try, _ = reserve_effect(
        db, claim, attempt_id=retried.next_attempt.attempt_id, effect_type="t",
        effect_kind="idempotent", fingerprint="f",
    )  # fmt: skip
    assert (next_try.status, next_try.run_body) == (EffectStatus.APPLYING, True)
    assert problems(db, timed=False) == []
