"""A run deadline in the store: armed as an absolute time at reservation, armed again by a
restart, and enforced by ``lifecycle.expire`` whatever the run does (a working runner is
fenced, an applying effect is settled as for a cancel, a tree is cancelled with the
deadline as its reason). ``diagnose`` is the oracle after each."""

from __future__ import annotations

import dataclasses

import pytest

from pi_workflows.store import deadlines, forks, lifecycle
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.effect_writes import reserve_effect
from pi_workflows.store.errors import ClaimLostError
from pi_workflows.store.lifecycle import GoTo
from pi_workflows.store.states import AttemptStatus

from support.crash_states import tree_past_deadline
from support.store import chain_run, new_run, problems, walk

pytestmark = pytest.mark.timeout(30)


def _row(db: Database, sql: str, *args: object) -> tuple[object, ...]:
    return tuple(db.conn.execute(sql, args).fetchone())


def test_a_deadline_is_armed_at_reservation_from_the_definition_or_the_start(
    db: Database, clock: FakeClock
) -> None:
    """The definition's ``deadlineMs`` is armed from the reservation; a start's override
    replaces it; a run without either has none."""
    declared = dataclasses.replace(new_run(), definition={**new_run().definition,
                                                          "deadlineMs": 60_000})  # fmt: skip
    plain = lifecycle.reserve(db, new_run()).run_id
    from_definition = lifecycle.reserve(db, declared).run_id
    overridden = lifecycle.reserve(db, dataclasses.replace(declared, deadline_ms=5_000)).run_id
    now = clock.now_ms()
    assert deadlines.view(db.conn, plain) is None
    assert deadlines.view(db.conn, from_definition) == {"durationMs": 60_000, "at": now + 60_000}
    assert deadlines.view(db.conn, overridden) == {"durationMs": 5_000, "at": now + 5_000}
    assert deadlines.next_due(db.conn) == now + 5_000
    assert problems(db) == []


def test_expiring_before_the_deadline_changes_nothing(db: Database, clock: FakeClock) -> None:
    """``expire`` is a no-op (None, no event) until the deadline passes, and after the run
    ended."""
    run_id = lifecycle.reserve(db, dataclasses.replace(new_run(), deadline_ms=1_000)).run_id
    revision = _row(db, "SELECT revision FROM runs WHERE run_id = ?", run_id)
    assert lifecycle.expire(db, run_id) is None
    assert _row(db, "SELECT revision FROM runs WHERE run_id = ?", run_id) == revision
    clock.advance(1_000)
    assert deadlines.due(db.conn, clock.now_ms()) == [run_id]
    result = lifecycle.expire(db, run_id)
    assert result is not None
    assert result.status.value == "timed_out"
    assert lifecycle.expire(db, run_id) is None
    assert deadlines.due(db.conn, clock.now_ms()) == []
    assert problems(db) == []


def test_expiry_fences_the_working_runner_and_settles_its_effect_as_a_cancel(
    db: Database, clock: FakeClock
) -> None:
    """The runner's claim is used for the end and released by it: the runner's next
    proposal is refused (``ClaimLostError``), its attempt is closed ``timed_out``, and the
    manual effect it was applying is ambiguous (as a cancel leaves it)."""
    run_id = lifecycle.reserve(db, dataclasses.replace(new_run(), deadline_ms=2_000)).run_id
    claim = lifecycle.claim(db, run_id, "runner-1").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt
    reservation, _ = reserve_effect(
        db, claim, attempt_id=attempt.attempt_id, effect_type="mail", effect_kind="manual",
        fingerprint="fp",
    )  # fmt: skip
    clock.advance(2_000)
    lifecycle.expire(db, run_id, claim=claim)
    with pytest.raises(ClaimLostError):
        lifecycle.finish_node(
            db, claim, attempt.attempt_id, AttemptStatus.COMPLETED, GoTo("a"), output={}
        )
    status, error = _row(db, "SELECT status, error FROM runs WHERE run_id = ?", run_id)
    assert status == "timed_out"
    assert isinstance(error, str)
    assert error.startswith("the run deadline passed (2s after")
    assert _row(db, "SELECT status FROM node_attempts WHERE attempt_id = ?",
                attempt.attempt_id) == ("timed_out",)  # fmt: skip
    assert _row(db, "SELECT status FROM effects WHERE effect_id = ?",
                reservation.effect_id) == ("ambiguous",)  # fmt: skip
    (data,) = _row(db, "SELECT data_json FROM events WHERE run_id = ? AND type = 'run.timed_out'",
                   run_id)  # fmt: skip
    assert '"deadline":"run"' in str(data)
    assert problems(db) == []


def test_expiry_cancels_the_whole_tree_with_the_deadline_as_the_reason(
    db: Database, clock: FakeClock
) -> None:
    """The parent ends ``timed_out``; each child (one held by its runner's claim) is
    cancelled with a reason naming the run deadline, in the same commit."""
    x = tree_past_deadline(db, clock)
    lifecycle.expire(db, x["run_id"], claims={x["children"][0]: x["child_claim"]})
    rows = db.conn.execute(
        "SELECT status, error FROM runs WHERE parent_run_id = ?", (x["run_id"],)
    ).fetchall()
    assert len(rows) == 2
    for status, error in rows:
        assert status == "cancelled"
        assert "the run deadline passed" in error
        assert x["run_id"] in error
    assert problems(db) == []


def test_a_restart_arms_the_deadline_again_from_the_restart(db: Database, clock: FakeClock) -> None:
    """A run that timed out at its deadline gets the same duration again, from the restart."""
    run_id = lifecycle.reserve(db, dataclasses.replace(new_run(), deadline_ms=1_000)).run_id
    clock.advance(1_500)
    lifecycle.expire(db, run_id)
    lifecycle.restart(db, run_id)
    assert deadlines.view(db.conn, run_id) == {"durationMs": 1_000, "at": clock.now_ms() + 1_000}
    assert problems(db) == []


def test_a_fork_takes_its_source_duration_from_its_own_start_and_an_upgrade_none(
    db: Database, clock: FakeClock
) -> None:
    """A fork of a run started with a 90 s deadline override gets 90 s from the fork's
    reservation (its code declares none); a fork's own override wins."""
    source = lifecycle.reserve(db, dataclasses.replace(chain_run(), deadline_ms=90_000)).run_id
    walk(db, lifecycle.claim(db, source, "runner-1").claim, ["a", "b", "c", "d"])
    clock.advance(60_000)
    fork = forks.fork(db, source, "c", chain_run()).result.run_id
    assert deadlines.view(db.conn, fork) == {"durationMs": 90_000, "at": clock.now_ms() + 90_000}
    own = forks.fork(db, source, "c", dataclasses.replace(chain_run(), deadline_ms=5_000))
    assert deadlines.duration_of(db.conn, own.result.run_id) == 5_000
    assert problems(db) == []
