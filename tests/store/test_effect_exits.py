"""Every way a run leaves ``running`` settles the effects its runner may be applying alike.

The matrix: park (pause, server stop, crash limit), recovery after a lost runner, the
server's node deadline, and the terminal transitions, each against an idempotent and a
manual effect whose body may be running. ``diagnose`` is the oracle after each.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pi_workflows.store import lifecycle, takeover
from pi_workflows.store.claims import Claim
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.effect_writes import reserve_effect, resolve_effect, settle_effect
from pi_workflows.store.effects import EffectStatus
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.interactions import InteractionDraft
from pi_workflows.store.states import ParkReason

from support.store import LEASE_MS, problems, running

Exit = Callable[[Database, FakeClock, Claim, str], object]


def _applying(db: Database, kind: str) -> tuple[Claim, str, str]:
    claim = running(db)
    attempt = lifecycle.start_node(db, claim, "send").attempt
    reservation, _ = reserve_effect(
        db,
        claim,
        attempt_id=attempt.attempt_id,
        effect_type="mail",
        effect_kind=kind,
        fingerprint="fp",
    )
    assert reservation.run_body
    return claim, attempt.attempt_id, reservation.effect_id


def _row(db: Database, sql: str, *args: object) -> tuple[object, ...]:
    return tuple(db.conn.execute(sql, args).fetchone())


def _park(reason: ParkReason) -> Exit:
    return lambda db, clock, claim, attempt_id: lifecycle.park(db, claim, reason)


def _recover(db: Database, clock: FakeClock, claim: Claim, attempt_id: str) -> object:
    clock.advance(LEASE_MS + 1)
    return takeover.recover(db, claim.run_id)


def _deadline(db: Database, clock: FakeClock, claim: Claim, attempt_id: str) -> object:
    return takeover.time_out_node(db, claim, attempt_id, "node send did not finish in time")


NON_TERMINAL: dict[str, Exit] = {
    "pause": _park(ParkReason.USER_PAUSED),
    "server stop": _park(ParkReason.SERVER_STOPPED),
    "crash limit": _park(ParkReason.RUNNER_CRASHED),
    "no progress": _park(ParkReason.RUNNER_NO_PROGRESS),
    "claim lost": _recover,
    "recover under the runner's claim": lambda db, c, claim, a: takeover.recover(
        db, claim.run_id, claim=claim
    ),
}


@pytest.mark.parametrize("path", sorted(NON_TERMINAL))
def test_an_uncertain_manual_effect_parks_the_run_whatever_the_exit(
    db: Database, clock: FakeClock, path: str
) -> None:
    """Any non-terminal exit with a manual body in flight marks it ambiguous and parks."""
    claim, attempt_id, effect_id = _applying(db, "manual")
    NON_TERMINAL[path](db, clock, claim, attempt_id)
    status, reason, detail = _row(
        db, "SELECT status, park_reason, park_detail FROM runs WHERE run_id = ?", claim.run_id
    )
    assert (status, reason) == ("paused", "effectAmbiguous")
    assert effect_id in str(detail)
    assert _row(db, "SELECT status FROM effects WHERE effect_id = ?", effect_id) == ("ambiguous",)
    assert _row(db, "SELECT status FROM effect_attempts WHERE effect_id = ?", effect_id) == (
        "lost",
    )
    assert _row(db, "SELECT status FROM node_attempts WHERE attempt_id = ?", attempt_id) == (
        "interrupted",
    )
    assert problems(db) == []
    with pytest.raises(InvalidTransitionError, match="ambiguous"):
        lifecycle.resume(db, claim.run_id)


@pytest.mark.parametrize("path", sorted(NON_TERMINAL))
def test_an_idempotent_effect_in_flight_becomes_pending_whatever_the_exit(
    db: Database, clock: FakeClock, path: str
) -> None:
    """Any non-terminal exit resets an idempotent body to pending; the run is not trapped."""
    claim, attempt_id, effect_id = _applying(db, "idempotent")
    NON_TERMINAL[path](db, clock, claim, attempt_id)
    assert _row(db, "SELECT status FROM effects WHERE effect_id = ?", effect_id) == ("pending",)
    status, reason = _row(db, "SELECT status, park_reason FROM runs WHERE run_id = ?", claim.run_id)
    assert reason != "effectAmbiguous"
    assert problems(db) == []
    if status == "paused":
        lifecycle.resume(db, claim.run_id)
    again = lifecycle.claim(db, claim.run_id, "runner-2").claim
    retry = lifecycle.start_node(db, again, "send").attempt
    reservation, _ = reserve_effect(
        db,
        again,
        attempt_id=retry.attempt_id,
        effect_type="mail",
        effect_kind="idempotent",
        fingerprint="fp",
    )
    assert (reservation.effect_id, reservation.run_body, reservation.attempt_no) == (
        effect_id,
        True,
        2,
    )


def test_a_node_deadline_never_routes_past_an_uncertain_manual_effect(
    db: Database, clock: FakeClock
) -> None:
    """Window: the server killed a manual body at its deadline; the node is not timed out,
    so a ``timed_out`` route cannot run the body again: the run parks for the operator."""
    claim, attempt_id, effect_id = _applying(db, "manual")
    _deadline(db, clock, claim, attempt_id)
    status, reason, unrouted = _row(
        db,
        "SELECT status, park_reason, unrouted_attempt FROM runs WHERE run_id = ?",
        claim.run_id,
    )
    assert (status, reason, unrouted) == ("paused", "effectAmbiguous", None)
    assert _row(db, "SELECT status FROM node_attempts WHERE attempt_id = ?", attempt_id) == (
        "interrupted",
    )
    assert problems(db) == []
    # The operator's resolution is what the rerun of the same visit adopts.
    resolve_effect(db, effect_id, "applied", result={"sent": True})
    lifecycle.resume(db, claim.run_id)
    again = lifecycle.claim(db, claim.run_id, "runner-2").claim
    retry = lifecycle.start_node(db, again, "send").attempt
    assert retry.visit == 1
    adopted, _ = reserve_effect(
        db,
        again,
        attempt_id=retry.attempt_id,
        effect_type="mail",
        effect_kind="manual",
        fingerprint="fp",
    )
    assert (adopted.effect_id, adopted.run_body, adopted.result) == (
        effect_id,
        False,
        {"sent": True},
    )


@pytest.mark.parametrize("kind", ["idempotent", "manual"])
def test_a_node_deadline_after_the_effect_applied_adopts_it_instead_of_timing_out(
    db: Database, clock: FakeClock, kind: str
) -> None:
    """Window (campaign seed 31): the body returned late and the runner recorded its effect
    applied, then the server's deadline killed it before it finished the node. The node is
    not timed out (a ``timed_out`` route would apply it again under a new visit): the run is
    queued and the same visit adopts the stored result."""
    claim, attempt_id, effect_id = _applying(db, kind)
    settle_effect(db, claim, effect_id, EffectStatus.APPLIED, result={"charged": 7})
    _deadline(db, clock, claim, attempt_id)
    status, unrouted = _row(
        db, "SELECT status, unrouted_attempt FROM runs WHERE run_id = ?", claim.run_id
    )
    assert (status, unrouted) == ("queued", None)
    assert _row(db, "SELECT status FROM node_attempts WHERE attempt_id = ?", attempt_id) == (
        "interrupted",
    )
    event = _row(
        db, "SELECT data_json FROM events WHERE run_id = ? AND type = 'node.timedOut'",
        claim.run_id,
    )  # fmt: skip
    assert effect_id in str(event[0])
    assert problems(db) == []
    again = lifecycle.claim(db, claim.run_id, "runner-2").claim
    retry = lifecycle.start_node(db, again, "send").attempt
    assert retry.visit == 1
    adopted, _ = reserve_effect(
        db,
        again,
        attempt_id=retry.attempt_id,
        effect_type="mail",
        effect_kind=kind,
        fingerprint="fp",
    )
    assert (adopted.effect_id, adopted.run_body, adopted.result) == (
        effect_id,
        False,
        {"charged": 7},
    )


def test_a_node_deadline_rejects_an_idempotent_body_as_timed_out(
    db: Database, clock: FakeClock
) -> None:
    """The killed idempotent body is settled with its timed-out node, never left pending."""
    claim, attempt_id, effect_id = _applying(db, "idempotent")
    _deadline(db, clock, claim, attempt_id)
    assert _row(db, "SELECT status, result_json FROM effects WHERE effect_id = ?", effect_id) == (
        "rejected",
        '{"outcome":"timed_out"}',
    )
    status, unrouted = _row(
        db, "SELECT status, unrouted_attempt FROM runs WHERE run_id = ?", claim.run_id
    )
    assert (status, unrouted) == ("queued", attempt_id)
    assert problems(db) == []


@pytest.mark.parametrize("kind", ["idempotent", "manual"])
@pytest.mark.parametrize("ending", ["cancel", "fail", "time out"])
def test_a_terminal_exit_leaves_a_body_in_flight_ambiguous(
    db: Database, kind: str, ending: str
) -> None:
    """An ended run cannot retry: an applying body of either kind waits for an operator."""
    claim, _, effect_id = _applying(db, kind)
    if ending == "cancel":
        lifecycle.cancel(db, claim.run_id, claim=claim)
    elif ending == "fail":
        lifecycle.fail(db, claim, "boom")
    else:
        lifecycle.time_out(db, claim, "late")
    assert _row(db, "SELECT status FROM effects WHERE effect_id = ?", effect_id) == ("ambiguous",)
    assert problems(db) == []


def test_a_run_cannot_wait_while_an_effect_is_applying(db: Database) -> None:
    """Waiting releases the claim, so it is refused while a body may still be running."""
    claim, attempt_id, _ = _applying(db, "idempotent")
    with pytest.raises(InvalidTransitionError, match="still applying"):
        lifecycle.wait(db, claim, attempt_id, InteractionDraft("checkpoint", {"question": "?"}))


def test_a_restart_cancels_pending_effects_of_the_old_round(db: Database) -> None:
    """Pending idempotent effects never block a restart; their old-round keys are retired."""
    claim, _, effect_id = _applying(db, "idempotent")
    lifecycle.park(db, claim, ParkReason.RUNNER_CRASHED)
    lifecycle.restart(db, claim.run_id)
    assert _row(db, "SELECT status FROM effects WHERE effect_id = ?", effect_id) == ("cancelled",)
    assert problems(db) == []
