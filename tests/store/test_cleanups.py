"""Cleanup on cancel in the store: a cancel or a run deadline of a run with a cleanup node
queues it for that node in one commit, only that node's end ends the run (as it was ended,
its outcome recorded), a second cancel abandons it, and nothing else moves a run in cleanup
to its end. ``diagnose`` is the oracle after each."""

from __future__ import annotations

import dataclasses

import pytest

from pi_workflows.store import cleanups, deadlines, lifecycle
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.lifecycle import Finish, GoTo
from pi_workflows.store.states import AttemptStatus, ParkReason, RunStatus

from support.crash_states import cleaning_up, cleanup_in_node, cleanup_run
from support.store import problems

pytestmark = pytest.mark.timeout(30)


def _run(db: Database, run_id: str) -> tuple[object, ...]:
    return tuple(
        db.conn.execute(
            "SELECT status, current_node, error FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
    )


def _cleanup(db: Database, run_id: str) -> tuple[object, ...]:
    return tuple(
        db.conn.execute(
            "SELECT status, ends_as, reason, error FROM run_cleanups WHERE run_id = ?", (run_id,)
        ).fetchone()
    )


def test_a_cancel_queues_the_cleanup_node_and_ends_the_working_node(
    db: Database, clock: FakeClock
) -> None:
    """The working attempt is ``cancelled``, the run queued at its cleanup node with the
    reason as its error, and its runner's view names the cleanup."""
    x = cleanup_in_node(db, clock)
    result = lifecycle.cancel(db, x["run_id"], claim=x["claim"], reason="stop now")
    assert result.status is RunStatus.QUEUED
    assert _run(db, x["run_id"]) == ("queued", "z", "stop now")
    assert _cleanup(db, x["run_id"]) == ("running", "cancelled", "stop now", None)
    assert tuple(
        db.conn.execute(
            "SELECT status FROM node_attempts WHERE attempt_id = ?", (x["attempt_id"],)
        ).fetchone()
    ) == ("cancelled",)
    assert cleanups.runner_view(db.conn, x["run_id"]) == {
        "nodeId": "z", "reason": "stop now", "endsAs": "cancelled",
    }  # fmt: skip
    assert problems(db) == []


def test_a_run_cancelled_before_it_started_ends_at_once(db: Database) -> None:
    """Nothing ran, so nothing needs releasing: no cleanup, ``cancelled`` at once."""
    run_id = lifecycle.reserve(db, cleanup_run()).run_id
    assert lifecycle.cancel(db, run_id).status is RunStatus.CANCELLED
    assert tuple(db.conn.execute("SELECT COUNT(*) FROM run_cleanups").fetchone()) == (0,)
    assert problems(db) == []


@pytest.mark.parametrize(
    "step", [GoTo("a"), Finish(RunStatus.COMPLETED, {}), Finish(RunStatus.TIMED_OUT)]
)
def test_only_the_end_it_was_given_ends_a_run_in_cleanup(
    db: Database, clock: FakeClock, step: GoTo | Finish
) -> None:
    """A route, a completion or another end of the cleanup attempt is refused, changing
    nothing."""
    x = cleaning_up(db, clock)
    with pytest.raises(InvalidTransitionError, match="cleanup node ends the run cancelled"):
        lifecycle.finish_node(db, x["claim"], x["attempt_id"], AttemptStatus.COMPLETED, step)
    assert _run(db, x["run_id"])[0] == "running"
    assert problems(db) == []


@pytest.mark.parametrize(
    ("outcome", "recorded"),
    [(AttemptStatus.COMPLETED, "completed"), (AttemptStatus.FAILED, "failed"),
     (AttemptStatus.TIMED_OUT, "timed_out")],
)  # fmt: skip
def test_the_cleanup_outcome_is_recorded_and_the_run_stays_cancelled(
    db: Database, clock: FakeClock, outcome: AttemptStatus, recorded: str
) -> None:
    """Whatever the cleanup node's outcome, the run ends ``cancelled`` with the reason."""
    x = cleaning_up(db, clock)
    error = None if outcome is AttemptStatus.COMPLETED else "it broke"
    lifecycle.finish_node(
        db, x["claim"], x["attempt_id"], outcome, Finish(RunStatus.CANCELLED), error=error
    )
    assert _run(db, x["run_id"])[0::2] == ("cancelled", "stop")
    assert _cleanup(db, x["run_id"]) == (recorded, "cancelled", "stop", error)
    assert problems(db) == []


def test_a_second_cancel_abandons_the_cleanup(db: Database, clock: FakeClock) -> None:
    """Cancelling a run in cleanup ends it at once, with the first reason."""
    x = cleaning_up(db, clock)
    lifecycle.cancel(db, x["run_id"], claim=x["claim"], reason="really stop")
    assert _run(db, x["run_id"])[0::2] == ("cancelled", "stop")
    status, _, _, error = _cleanup(db, x["run_id"])
    assert status == "abandoned"
    assert "really stop" in str(error)
    assert problems(db) == []


def test_a_deadline_runs_the_cleanup_then_no_longer_applies(db: Database, clock: FakeClock) -> None:
    """The run deadline queues the cleanup (``timed_out`` then); while it runs, the passed
    deadline is not due again, and its end is ``timed_out``."""
    run_id = lifecycle.reserve(db, dataclasses.replace(cleanup_run(), deadline_ms=1_000)).run_id
    claim = lifecycle.claim(db, run_id, "runner-1").claim
    lifecycle.start_node(db, claim, "a")
    clock.advance(1_000)
    lifecycle.expire(db, run_id, claim=claim)
    assert _cleanup(db, run_id)[:2] == ("running", "timed_out")
    assert deadlines.due(db.conn, clock.now_ms()) == []
    assert deadlines.next_due(db.conn) is None
    assert lifecycle.expire(db, run_id) is None
    second = lifecycle.claim(db, run_id, "runner-2").claim
    attempt = lifecycle.start_node(db, second, "z").attempt.attempt_id
    lifecycle.finish_node(db, second, attempt, AttemptStatus.COMPLETED, Finish(RunStatus.TIMED_OUT))
    assert _run(db, run_id)[0] == "timed_out"
    assert problems(db) == []


def test_a_cleanup_that_keeps_crashing_is_given_up(db: Database, clock: FakeClock) -> None:
    """``give_up`` records the cleanup ``failed`` and ends the run as it was ended."""
    x = cleaning_up(db, clock)
    cleanups.give_up(db, x["claim"], "it stopped its runner 3 times")
    assert _run(db, x["run_id"])[0] == "cancelled"
    assert _cleanup(db, x["run_id"])[::3] == ("failed", "it stopped its runner 3 times")
    assert cleanups.give_up(db, x["claim"], "again") is None
    assert problems(db) == []


def test_a_restart_of_a_run_paused_in_its_cleanup_abandons_it(
    db: Database, clock: FakeClock
) -> None:
    """A new round runs its graph: the old round's unfinished cleanup is ``abandoned``."""
    x = cleaning_up(db, clock)
    lifecycle.park(db, x["claim"], ParkReason.USER_PAUSED)
    lifecycle.restart(db, x["run_id"])
    assert _cleanup(db, x["run_id"])[0] == "abandoned"
    assert cleanups.runner_view(db.conn, x["run_id"]) is None
    assert problems(db) == []
