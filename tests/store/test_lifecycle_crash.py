"""Crashes before and after every lifecycle commit leave consistent, retryable state."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

from pi_workflows.store import faults, interaction_writes, interactions, lifecycle, takeover
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.errors import StoreError
from pi_workflows.store.states import RunStatus

from support.crash_scenarios import CHILD_START_MS, SCENARIOS, Scenario
from support.store import LEASE_MS, count, open_test_db, problems, snapshot

CHILD = Path(__file__).resolve().parents[1] / "support" / "crash_scenarios.py"
IDS = [scenario.name for scenario in SCENARIOS]


def _drive_to_an_end(db: Database, clock: FakeClock) -> None:
    """Recover, resume, answer and run every run to completion, as a restarted server would."""
    clock.advance(LEASE_MS + 1)
    takeover.recover_all_expired(db)
    for (run_id,) in db.conn.execute("SELECT run_id FROM runs").fetchall():
        status = RunStatus(
            db.conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0]
        )
        if status is RunStatus.PAUSED:
            lifecycle.resume(db, run_id)
        elif status is RunStatus.WAITING:
            request_id, kind = db.conn.execute(
                "SELECT request_id, kind FROM interactive_requests WHERE run_id = ?"
                " AND status = 'pending'",
                (run_id,),
            ).fetchone()
            if kind == "decision":
                interaction_writes.answer_decision(db, request_id, "yes", answered_by="test")
            else:
                interaction_writes.submit(
                    db, request_id, {"answer": 1}, kinds=frozenset({kind}), submitted_by="test"
                )
        elif status is not RunStatus.QUEUED:
            continue
        claim = lifecycle.claim(db, run_id, "runner-after").claim
        submission = interactions.validating_of(db.conn, run_id)
        open_attempt = db.conn.execute(
            "SELECT attempt_id FROM node_attempts WHERE run_id = ?"
            " AND status IN ('running', 'waiting')",
            (run_id,),
        ).fetchone()
        attempt_id = (
            open_attempt[0]
            if open_attempt
            else lifecycle.start_node(db, claim, "a").attempt.attempt_id
        )
        lifecycle.finish_node(
            db,
            claim,
            attempt_id,
            lifecycle.AttemptStatus.COMPLETED,
            lifecycle.Finish(RunStatus.COMPLETED, {"ok": True}),
            output={"ok": True},
            submission_id=None if submission is None else submission.submission_id,
        )
    assert problems(db) == []
    assert count(db, "runs", "status NOT IN ('completed', 'failed', 'timed_out', 'cancelled')") == 0


@pytest.mark.parametrize("phase", ["before_commit", "after_commit"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
def test_exception_at_commit_keeps_state_consistent(
    db: Database, clock: FakeClock, scenario: Scenario, phase: str
) -> None:
    """An exception just before (nothing changes) or just after (all changed) a commit."""
    ctx = scenario.prepare(db, clock)
    before = snapshot(db)
    faults.arm(f"{scenario.point}.{phase}")
    with pytest.raises(faults.InjectedFault):
        scenario.run(db, clock, ctx)
    faults.disarm_all()
    assert problems(db, timed=False) == []
    events = count(db, "events", "type = ?", scenario.event)
    if phase == "before_commit":
        assert snapshot(db) == before
        assert events == 0
        scenario.run(db, clock, ctx)  # the operation can simply be retried
        assert count(db, "events", "type = ?", scenario.event) == 1
    else:
        assert events == 1
        with contextlib.suppress(StoreError):  # a retry is refused or a new, valid operation
            scenario.run(db, clock, ctx)
    assert problems(db, timed=False) == []
    _drive_to_an_end(db, clock)


@pytest.mark.parametrize("phase", ["before_commit", "after_commit"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
def test_process_exit_at_commit_keeps_state_consistent(
    tmp_path: Path, scenario: Scenario, phase: str
) -> None:
    """A process that dies like SIGKILL at a commit leaves a database that is clean and usable."""
    home = tmp_path / "state"
    child = subprocess.run(
        [sys.executable, str(CHILD), str(home), scenario.name, phase],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == faults.EXIT_STATUS, child.stderr
    clock = FakeClock(CHILD_START_MS + 10 * LEASE_MS)
    db = open_test_db(home, clock)
    try:
        assert problems(db, timed=False) == []
        expected = 1 if phase == "after_commit" else 0
        assert count(db, "events", "type = ?", scenario.event) == expected
        _drive_to_an_end(db, clock)
    finally:
        db.close()
