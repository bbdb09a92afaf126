"""Lease regression: fenced writes renew atomically; lost claims change nothing."""

from __future__ import annotations

import pytest

from pi_workflows.store import lifecycle, takeover
from pi_workflows.store.claims import Claim, ClaimToken, read_lease, renew
from pi_workflows.store.clock import FakeClock, SystemClock
from pi_workflows.store.database import Database
from pi_workflows.store.errors import ClaimLostError, ClaimLostReason, LeaseHeldError
from pi_workflows.store.lifecycle import GoTo
from pi_workflows.store.states import AttemptStatus, ParkReason

from support.store import LEASE_MS, count, problems, reserve, run_status, running, snapshot


def test_each_valid_write_renews_the_lease_atomically(db: Database, clock: FakeClock) -> None:
    """Over several lease intervals of writes and no renewal timer, each write renews the claim."""
    claim = running(db)
    node = "a"
    for _ in range(12):  # 12 x 2 x 9 s = 216 s, more than seven 30 s lease intervals
        clock.advance(9_000)
        started = lifecycle.start_node(db, claim, node)
        lease = read_lease(db.conn, claim.run_id)
        assert lease is not None
        assert (lease.heartbeat_at, lease.expires_at) == (clock.now_ms(), clock.now_ms() + LEASE_MS)
        clock.advance(9_000)
        lifecycle.finish_node(
            db, claim, started.attempt.attempt_id, AttemptStatus.COMPLETED, GoTo(node), output={}
        )
        lease = read_lease(db.conn, claim.run_id)
        assert lease is not None
        assert lease.expires_at == clock.now_ms() + LEASE_MS
        assert lease.generation == claim.generation == 1
    assert (
        count(
            db, "events", "type LIKE 'run.%' AND type != 'run.reserved' AND type != 'run.claimed'"
        )
        == 0
    )
    assert problems(db) == []


def test_expired_claim_cannot_renew_itself(db: Database, clock: FakeClock) -> None:
    """Once expires_at has passed, neither a renewal nor a fenced write revives the claim."""
    claim = running(db)
    clock.advance(LEASE_MS)  # expires_at == now: expired (it must be strictly later)
    before = snapshot(db)
    with pytest.raises(ClaimLostError) as caught:
        renew(db, claim)
    assert caught.value.reason is ClaimLostReason.EXPIRED
    with pytest.raises(ClaimLostError) as caught:
        lifecycle.start_node(db, claim, "a")
    assert caught.value.reason is ClaimLostReason.EXPIRED
    assert snapshot(db) == before


def test_renewal_before_expiry_extends_the_claim(db: Database, clock: FakeClock) -> None:
    """The backup renewal moves expiry forward without a revision or an event."""
    claim = running(db)
    revision = db.conn.execute("SELECT revision FROM runs").fetchone()[0]
    clock.advance(LEASE_MS - 1)
    assert renew(db, claim) == clock.now_ms() + LEASE_MS
    assert db.conn.execute("SELECT revision FROM runs").fetchone()[0] == revision


def test_new_generation_fences_the_old_token(db: Database, clock: FakeClock) -> None:
    """After a control claim takes an expired run, the old claim's writes are refused."""
    old = running(db)
    clock.advance(LEASE_MS + 1)
    new = lifecycle.control_claim(db, old.run_id)
    assert new.generation == old.generation + 1
    before = snapshot(db)
    for attempt in (lambda: renew(db, old), lambda: lifecycle.fail(db, old, "boom")):
        with pytest.raises(ClaimLostError) as caught:
            attempt()
        assert caught.value.reason is ClaimLostReason.GENERATION_CHANGED
    assert snapshot(db) == before
    lifecycle.park(db, new, ParkReason.RUNNER_CRASHED)
    assert run_status(db, old.run_id) == "paused"


def test_claim_loss_adds_no_failed_event_and_no_terminal_write(
    db: Database, clock: FakeClock
) -> None:
    """A stale runner's terminal writes raise ClaimLostError and leave no trace."""
    old = running(db)
    started = lifecycle.start_node(db, old, "a")
    clock.advance(LEASE_MS + 1)
    takeover.recover(db, old.run_id)
    new = lifecycle.claim(db, old.run_id, "runner-2").claim
    before = snapshot(db)
    attempts = [
        lambda: lifecycle.fail(db, old, "crashed"),
        lambda: lifecycle.complete(db, old, {"done": True}),
        lambda: lifecycle.time_out(db, old, "late"),
        lambda: lifecycle.finish_node(
            db, old, started.attempt.attempt_id, AttemptStatus.FAILED, GoTo("a"), error="x"
        ),
    ]
    for attempt in attempts:
        with pytest.raises(ClaimLostError):
            attempt()
    assert snapshot(db) == before
    assert count(db, "events", "type IN ('run.failed', 'run.completed', 'run.timed_out')") == 0
    assert run_status(db, old.run_id) == "running"
    assert new.generation == 3  # runner 1, the recovery's control claim, runner 2
    assert problems(db) == []


def test_every_loss_reason_is_classified(db: Database, clock: FakeClock) -> None:
    """Forged owner or token, a released claim and a missing lease each name their reason."""
    claim = running(db)
    forged_token = Claim(claim.run_id, claim.owner_type, claim.owner_id, 1, ClaimToken.new())
    other_owner = Claim(claim.run_id, claim.owner_type, "runner-9", 1, claim.token)
    never = Claim(reserve(db), claim.owner_type, "runner-1", 1, ClaimToken.new())
    cases = [
        (forged_token, ClaimLostReason.TOKEN_CHANGED),
        (other_owner, ClaimLostReason.OWNER_CHANGED),
        (never, ClaimLostReason.MISSING_AUTHORITY),
    ]
    for bad, reason in cases:
        with pytest.raises(ClaimLostError) as caught:
            renew(db, bad)
        assert caught.value.reason is reason
    lifecycle.park(db, claim, ParkReason.USER_PAUSED)
    with pytest.raises(ClaimLostError) as caught:
        renew(db, claim)
    assert caught.value.reason is ClaimLostReason.MISSING_AUTHORITY


def test_a_live_claim_is_never_taken_over(db: Database, clock: FakeClock) -> None:
    """Control claims and recovery refuse a run whose claim is live."""
    claim = running(db)
    clock.advance(LEASE_MS - 1)
    with pytest.raises(LeaseHeldError):
        lifecycle.control_claim(db, claim.run_id)
    with pytest.raises(LeaseHeldError):
        takeover.recover(db, claim.run_id)
    assert takeover.recover_all_expired(db) == []
    assert renew(db, claim) > 0


def test_tokens_never_appear_in_reprs_errors_or_the_database(
    db: Database, clock: FakeClock
) -> None:
    """Neither the token nor its hash shows in repr, str or error text; only the hash is stored."""
    claim = running(db)
    secret = claim.token._secret
    digest = claim.token.digest()
    clock.advance(LEASE_MS + 1)
    with pytest.raises(ClaimLostError) as caught:
        renew(db, claim)
    texts = [repr(claim), str(claim), str(caught.value), repr(caught.value), repr(claim.token)]
    for text in texts:
        assert secret not in text
        assert digest not in text
    db.conn.execute("PRAGMA wal_checkpoint(FULL)")
    raw = b"".join(p.read_bytes() for p in db.path.parent.iterdir() if p.is_file())
    assert secret.encode() not in raw
    stored = db.conn.execute("SELECT token_hash FROM leases").fetchone()[0]
    assert stored == digest


def test_a_wall_clock_jump_does_not_move_the_server_clock() -> None:
    """Within one server process, time follows the monotonic clock, not wall-clock steps."""
    wall = [1_800_000_000_000_000_000]
    mono = [5_000_000_000]
    clock = SystemClock(wall=lambda: wall[0], monotonic=lambda: mono[0])
    start = clock.now_ms()
    assert start == 1_800_000_000_000
    wall[0] += 3_600 * 10**9  # the wall clock jumps an hour ahead (an NTP step)
    assert clock.now_ms() == start
    mono[0] += 1_500 * 10**6  # 1.5 s really pass
    assert clock.now_ms() == start + 1_500
    wall[0] -= 7_200 * 10**9  # and two hours back
    assert clock.now_ms() == start + 1_500
