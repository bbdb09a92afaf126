"""Diagnose finds contradictory rows; repair fixes only what exact evidence proves."""

from __future__ import annotations

from pi_workflows.store import lifecycle
from pi_workflows.store.database import Database
from pi_workflows.store.diagnose import diagnose, repair
from pi_workflows.store.interactions import InteractionDraft
from pi_workflows.store.lifecycle import Finish
from pi_workflows.store.states import AttemptStatus, RunStatus

from support.store import count, problems, reserve, run_status, running, snapshot


def _codes(db: Database) -> set[str]:
    return {code.split(":")[0] for code in problems(db)}


def _completed(db: Database) -> str:
    claim = running(db)
    started = lifecycle.start_node(db, claim, "a")
    lifecycle.finish_node(
        db, claim, started.attempt.attempt_id, AttemptStatus.COMPLETED, Finish(RunStatus.COMPLETED)
    )
    return claim.run_id


def test_a_clean_database_has_no_problems(db: Database) -> None:
    """Runs in every status, made only through the lifecycle, diagnose clean."""
    reserve(db)
    _completed(db)
    claim = running(db)
    started = lifecycle.start_node(db, claim, "ask")
    lifecycle.wait(db, claim, started.attempt.attempt_id, InteractionDraft("checkpoint", {}))
    assert problems(db) == []


def test_terminal_queue_row_under_a_running_run_is_found_and_repaired(db: Database) -> None:
    """A done queue row under a running run is reported and repaired from the run row."""
    claim = running(db)
    db.conn.execute("UPDATE run_queue SET status = 'done'")
    assert _codes(db) == {"queueMismatch", "viewerStale"}
    report = repair(db)
    assert sorted(p.code for p in report.fixed) == ["queueMismatch", "viewerStale"]
    assert problems(db) == []
    assert run_status(db, claim.run_id) == "running"


def test_failed_event_while_running_is_reported_and_not_invented_away(db: Database) -> None:
    """The original bug's shape: a failed event on a running run is left for a person."""
    claim = running(db)
    revision = db.conn.execute("SELECT revision FROM runs").fetchone()[0]
    db.conn.execute("UPDATE runs SET revision = ?", (revision + 1,))
    db.conn.execute(
        "INSERT INTO events (run_id, revision, type, run_status, data_json, at)"
        " VALUES (?, ?, 'run.failed', 'failed', '{}', 0)",
        (claim.run_id, revision + 1),
    )
    assert "eventContradictsRun" in _codes(db)
    before = snapshot(db)
    report = repair(db)
    assert report.fixed == []
    assert {p.code for p in report.remaining} >= {"eventContradictsRun"}
    assert snapshot(db) == before


def test_live_claim_on_a_waiting_run_is_released(db: Database) -> None:
    """A held claim on a waiting run is a contradiction that repair releases."""
    claim = running(db)
    started = lifecycle.start_node(db, claim, "ask")
    lifecycle.wait(db, claim, started.attempt.attempt_id, InteractionDraft("checkpoint", {}))
    db.conn.execute("UPDATE leases SET status = 'held', released_at = NULL")
    assert "claimOnInactiveRun" in _codes(db)
    repair(db)
    assert problems(db) == []
    assert count(db, "leases", "status = 'held'") == 0
    assert run_status(db, claim.run_id) == "waiting"


def test_two_unfinished_attempts_are_reported(db: Database) -> None:
    """Two open attempts on one run are found even if the unique index were bypassed."""
    claim = running(db)
    lifecycle.start_node(db, claim, "a")
    db.conn.execute("DROP INDEX node_attempts_one_unfinished")
    db.conn.execute(
        "INSERT INTO node_attempts (attempt_id, run_id, node_id, visit, attempt_no, generation,"
        " status, started_at) VALUES ('att_x', ?, 'b', 1, 1, 1, 'running', 0)",
        (claim.run_id,),
    )
    assert "twoUnfinishedAttempts" in _codes(db)
    with db.read() as conn:
        assert any(not p.repairable for p in diagnose(conn))


def test_repair_never_invents_successful_work(db: Database) -> None:
    """An attempt left running under a finished run is closed as interrupted, not completed."""
    run_id = _completed(db)
    db.conn.execute(
        "INSERT INTO node_attempts (attempt_id, run_id, node_id, visit, attempt_no, generation,"
        " status, started_at) VALUES ('att_late', ?, 'b', 1, 1, 1, 'running', 0)",
        (run_id,),
    )
    assert "attemptOpenOnInactiveRun" in _codes(db)
    repair(db)
    assert problems(db) == []
    row = db.conn.execute("SELECT status FROM node_attempts WHERE attempt_id = 'att_late'")
    assert row.fetchone()[0] == "interrupted"
    assert count(db, "node_attempts", "status = 'completed'") == 1
    assert run_status(db, run_id) == "completed"


def test_running_run_without_a_claim_is_made_claimable(db: Database) -> None:
    """A running run whose claim row was released is recovered to queued by repair."""
    claim = running(db)
    db.conn.execute("UPDATE leases SET status = 'released', released_at = 1")
    assert "runningWithoutClaim" in _codes(db)
    repair(db)
    assert problems(db) == []
    assert run_status(db, claim.run_id) == "queued"


def test_stale_viewer_row_is_rebuilt(db: Database) -> None:
    """A viewer row that disagrees with the run is rebuilt without a new revision."""
    run_id = reserve(db)
    db.conn.execute("UPDATE viewer_runs SET status = 'completed'")
    assert _codes(db) == {"viewerStale"}
    repair(db)
    assert problems(db) == []
    assert (
        db.conn.execute("SELECT revision FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0] == 1
    )
