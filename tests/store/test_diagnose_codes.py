"""Every problem code ``diagnose`` can report has a state that makes it report it.

Each builder makes one contradiction by hand (what a bug or a foreign writer could leave)
in an otherwise clean database; the test checks that the code is reported for that run. A
meta-test keeps the table complete: a new code in ``store/diagnose.py`` without a builder
here fails.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

import pi_workflows.store.diagnose as diagnose_module
from pi_workflows.store import diagnose_tree, interaction_writes, lifecycle, sessions
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.diagnose import STALL_REPORT_MS
from pi_workflows.store.effect_writes import reserve_effect, settle_effect
from pi_workflows.store.effects import EffectStatus
from pi_workflows.store.interactions import InteractionDraft
from pi_workflows.store.lifecycle import Finish
from pi_workflows.store.runners import launch, register_process
from pi_workflows.store.states import AttemptStatus, ParkReason, RunStatus

from support import crash_states as st
from support.store import LEASE_MS, problems, reserve, running

Builder = Callable[[Database, FakeClock], str]


def _completed(db: Database, clock: FakeClock) -> str:
    claim = running(db)
    attempt = lifecycle.start_node(db, claim, "a").attempt
    lifecycle.finish_node(
        db, claim, attempt.attempt_id, AttemptStatus.COMPLETED, Finish(RunStatus.COMPLETED)
    )
    return claim.run_id


def _waiting(db: Database, clock: FakeClock) -> str:
    claim = running(db)
    attempt = lifecycle.start_node(db, claim, "ask").attempt
    lifecycle.wait(db, claim, attempt.attempt_id, InteractionDraft("checkpoint", {"q": 1}))
    return claim.run_id


def _sql(db: Database, *statements: str) -> None:
    for statement in statements:
        db.conn.execute(statement)


def _sleeping(db: Database, clock: FakeClock) -> str:
    claim = running(db)
    attempt = lifecycle.start_node(db, claim, "nap").attempt
    lifecycle.sleep(db, claim, attempt.attempt_id, delay_ms=60_000)
    return claim.run_id


def _request_and_wait(db: Database, clock: FakeClock) -> str:
    run_id = _waiting(db, clock)
    _sql(
        db,
        "INSERT INTO run_waits (wait_id, run_id, attempt_id, node_id, kind, due_at, status,"
        f" created_at) SELECT 'wt_x', '{run_id}', attempt_id, node_id, 'sleep', 1, 'pending', 0"
        " FROM node_attempts WHERE status = 'waiting'",
    )
    return run_id


def _effect_outcome_lost(db: Database, clock: FakeClock) -> str:
    claim = running(db)
    attempt = lifecycle.start_node(db, claim, "a").attempt
    reservation, _ = reserve_effect(
        db, claim, attempt_id=attempt.attempt_id, effect_type="t", effect_kind="idempotent",
        fingerprint="f",
    )  # fmt: skip
    settle_effect(db, claim, reservation.effect_id, EffectStatus.APPLIED, result={"ok": 1})
    _sql(db, f"UPDATE effects SET status = 'cancelled' WHERE effect_id = '{reservation.effect_id}'")
    return claim.run_id


def _wait_pending_active(db: Database, clock: FakeClock) -> str:
    run_id = _sleeping(db, clock)
    _sql(db, "UPDATE runs SET status = 'completed', finished_at = 1")
    return run_id


def _queue_mismatch(db: Database, clock: FakeClock) -> str:
    run_id = reserve(db)
    _sql(db, "UPDATE run_queue SET status = 'done'")
    return run_id


def _claim_on_inactive(db: Database, clock: FakeClock) -> str:
    run_id = _waiting(db, clock)
    _sql(db, "UPDATE leases SET status = 'held', released_at = NULL")
    return run_id


def _running_without_claim(db: Database, clock: FakeClock) -> str:
    claim = running(db)
    _sql(db, "UPDATE leases SET status = 'released', released_at = 1")
    return claim.run_id


def _finish_time(db: Database, clock: FakeClock) -> str:
    run_id = _completed(db, clock)
    _sql(db, "UPDATE runs SET finished_at = NULL")
    return run_id


def _viewer_stale(db: Database, clock: FakeClock) -> str:
    run_id = reserve(db)
    _sql(db, "UPDATE viewer_runs SET current_node = 'elsewhere'")
    return run_id


def _revision_without_event(db: Database, clock: FakeClock) -> str:
    run_id = reserve(db)
    _sql(db, "UPDATE runs SET revision = revision + 1")
    return run_id


def _event_contradicts(db: Database, clock: FakeClock) -> str:
    claim = running(db)
    _sql(db, "DROP TRIGGER events_are_immutable_update")
    _sql(db, "UPDATE events SET run_status = 'failed' WHERE revision = 2")
    return claim.run_id


def _two_unfinished(db: Database, clock: FakeClock) -> str:
    claim = running(db)
    lifecycle.start_node(db, claim, "a")
    _sql(
        db,
        "DROP INDEX node_attempts_one_unfinished",
        "INSERT INTO node_attempts (attempt_id, run_id, node_id, visit, attempt_no, generation,"
        f" status, started_at) VALUES ('att_x', '{claim.run_id}', 'b', 1, 1, 1, 'running', 0)",
    )
    return claim.run_id


def _attempt_open(db: Database, clock: FakeClock) -> str:
    run_id = _completed(db, clock)
    _sql(
        db,
        "INSERT INTO node_attempts (attempt_id, run_id, node_id, visit, attempt_no, generation,"
        f" status, started_at) VALUES ('att_late', '{run_id}', 'b', 1, 1, 1, 'running', 0)",
    )
    return run_id


def _waiting_without_request(db: Database, clock: FakeClock) -> str:
    run_id = _waiting(db, clock)
    _sql(db, "UPDATE interactive_requests SET status = 'answered', settled_at = 1")
    return run_id


def _request_open_finished(db: Database, clock: FakeClock) -> str:
    run_id = _waiting(db, clock)
    _sql(db, "UPDATE runs SET status = 'cancelled', finished_at = 1")
    return run_id


def _request_pending_active(db: Database, clock: FakeClock) -> str:
    run_id = _waiting(db, clock)
    _sql(db, "UPDATE runs SET status = 'queued'")
    return run_id


def _decision_mismatch(db: Database, clock: FakeClock) -> str:
    claim = running(db)
    attempt = lifecycle.start_node(db, claim, "decide").attempt
    draft = InteractionDraft("decision", {"title": "?"}, choices=["yes", "no"])
    lifecycle.wait(db, claim, attempt.attempt_id, draft)
    _sql(db, "UPDATE human_decisions SET status = 'resolved'")
    return claim.run_id


def _effect(db: Database, kind: str) -> tuple[str, str]:
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
    return claim.run_id, reservation.effect_id


def _effect_open_finished(db: Database, clock: FakeClock) -> str:
    run_id, _ = _effect(db, "idempotent")
    _sql(db, "UPDATE runs SET status = 'cancelled', finished_at = 1")
    return run_id


def _effect_applying_without_runner(db: Database, clock: FakeClock) -> str:
    run_id, _ = _effect(db, "idempotent")
    _sql(db, "UPDATE runs SET status = 'paused', park_reason = 'userPaused'")
    return run_id


def _queue_without_run(db: Database, clock: FakeClock) -> str:
    _sql(
        db,
        "PRAGMA foreign_keys = OFF",
        "INSERT INTO run_queue (run_id, status, next_command, available_at, enqueued_at,"
        " updated_at) VALUES ('run_ghost', 'ready', 'start', 0, 0, 0)",
    )
    return "run_ghost"


def _expired_claim(db: Database, clock: FakeClock) -> str:
    claim = running(db)
    clock.advance(LEASE_MS + 1)
    return claim.run_id


def _step_stalled(db: Database, clock: FakeClock) -> str:
    """A step its seat proved it holds, with no turn on it and nothing due, for too long
    (a seat that never started a turn and never reported itself idle)."""
    ctx = st.waiting(db, clock, kind="agent", session=st.SESSION)
    epoch = sessions.attach(db, st.SESSION, "seat-a").coordinator_epoch
    (message_id,) = db.conn.execute(
        "SELECT message_id FROM workflow_messages WHERE request_id = ?", (ctx["request_id"],)
    ).fetchone()
    sessions.report_messages(db, st.SESSION, epoch, [(message_id, "entry-1")], idle=False)
    clock.advance(STALL_REPORT_MS + 1)
    return str(ctx["run_id"])


def _ambiguous_unparked(db: Database, clock: FakeClock) -> str:
    run_id, _ = _effect(db, "manual")
    _sql(db, "UPDATE effects SET status = 'ambiguous'")
    return run_id


def _process_after_exit(db: Database, clock: FakeClock) -> str:
    run_id = reserve(db)
    started = launch(db, run_id, 1, lambda tx, epoch, generation: {})
    register_process(db, started.claim, started.runner_epoch, 4242, 1.0, "sleep")
    _sql(db, "UPDATE run_runners SET status = 'exited', outcome = 'crashed'")
    lifecycle.park(db, started.claim, ParkReason.RUNNER_CRASHED)
    return run_id


def _validating(db: Database, clock: FakeClock) -> tuple[str, str]:
    claim = running(db)
    attempt = lifecycle.start_node(db, claim, "ask").attempt
    _, request_id = lifecycle.wait(
        db, claim, attempt.attempt_id, InteractionDraft("checkpoint", {"question": "?"})
    )
    interaction_writes.submit(
        db, request_id, {"a": 1}, kinds=frozenset({"checkpoint"}), submitted_by="test"
    )
    return claim.run_id, request_id


def _submission_mismatch(db: Database, clock: FakeClock) -> str:
    run_id, _ = _validating(db, clock)
    _sql(db, "UPDATE interactive_submissions SET status = 'rejected', error = 'x', settled_at = 1")
    return run_id


def _validation_stranded(db: Database, clock: FakeClock) -> str:
    run_id, _ = _validating(db, clock)
    _sql(db, "UPDATE runs SET status = 'waiting'", "UPDATE run_queue SET status = 'waiting'")
    return run_id


def _message_of_closed_request(db: Database, clock: FakeClock) -> str:
    run_id = _waiting(db, clock)
    _sql(db, "UPDATE interactive_requests SET status = 'cancelled', settled_at = 1")
    return run_id


def _scheduled(db: Database, clock: FakeClock) -> dict[str, object]:
    return st.scheduled_run(db, clock)


def _fire_without_run(db: Database, clock: FakeClock) -> str:
    _scheduled(db, clock)
    _sql(db, "UPDATE schedule_fires SET run_id = 'run_gone'")
    return "run_gone"


def _fire_run_mismatch(db: Database, clock: FakeClock) -> str:
    ctx = _scheduled(db, clock)
    _sql(db, "UPDATE runs SET schedule_fire_at = schedule_fire_at + 7")
    return str(ctx["run_id"])


def _fire_after_next_fire(db: Database, clock: FakeClock) -> str:
    _scheduled(db, clock)
    _sql(db, "UPDATE schedules SET next_fire_at = next_fire_at - 1000")
    return "None"  # a schedule's problem: no run is involved


def _queued_fire_of_deleted(db: Database, clock: FakeClock) -> str:
    st.schedule_queued(db, clock)
    _sql(
        db,
        "UPDATE schedules SET status = 'deleted', next_fire_at = NULL, deleted_at = 1",
    )
    return "None"  # a schedule's problem: no run is involved


def _joining(db: Database, clock: FakeClock) -> dict[str, object]:
    return st.joining(db, clock)


def _live_child_of_ended_parent(db: Database, clock: FakeClock) -> str:
    ctx = _joining(db, clock)
    child = ctx["children"][0]
    _sql(
        db,
        f"UPDATE runs SET status = 'failed', finished_at = 1 WHERE run_id = '{ctx['run_id']}'",
    )
    return str(child)


def _child_end_not_joined(db: Database, clock: FakeClock) -> str:
    ctx = _joining(db, clock)
    child = str(ctx["children"][0])
    _sql(db, f"UPDATE runs SET status = 'completed', finished_at = 1 WHERE run_id = '{child}'")
    return child


def _join_count_mismatch(db: Database, clock: FakeClock) -> str:
    ctx = _joining(db, clock)
    _sql(db, "UPDATE run_joins SET ended = 1")
    return str(ctx["run_id"])


def _join_stalled(db: Database, clock: FakeClock) -> str:
    ctx = _joining(db, clock)
    _sql(db, "UPDATE run_joins SET status = 'joined', joined_at = 1")
    return str(ctx["run_id"])


def _settings_out_of_step(db: Database, clock: FakeClock) -> str:
    ctx = st.settings_in_node(db, clock)
    _sql(db, "UPDATE runs SET settings_json = '{\"level\":9}'")
    return str(ctx["run_id"])


def _follow_up_out_of_step(db: Database, clock: FakeClock) -> str:
    ctx = st.follow_up_queued(db, clock)
    _sql(db, "UPDATE runs SET status = 'failed', finished_at = 1")
    return str(ctx["run_id"])


BUILDERS: dict[str, Builder] = {
    "submissionMismatch": _submission_mismatch,
    "validationStranded": _validation_stranded,
    "messageOfClosedRequest": _message_of_closed_request,
    "queueMismatch": _queue_mismatch,
    "claimOnInactiveRun": _claim_on_inactive,
    "runningWithoutClaim": _running_without_claim,
    "finishTimeMismatch": _finish_time,
    "viewerStale": _viewer_stale,
    "revisionWithoutEvent": _revision_without_event,
    "eventContradictsRun": _event_contradicts,
    "twoUnfinishedAttempts": _two_unfinished,
    "attemptOpenOnInactiveRun": _attempt_open,
    "waitingWithoutRequest": _waiting_without_request,
    "requestOpenOnFinishedRun": _request_open_finished,
    "requestPendingOnActiveRun": _request_pending_active,
    "decisionResolutionMismatch": _decision_mismatch,
    "effectOpenOnFinishedRun": _effect_open_finished,
    "effectApplyingWithoutRunner": _effect_applying_without_runner,
    "queueWithoutRun": _queue_without_run,
    "expiredClaimOnRunningRun": _expired_claim,
    "ambiguousEffectOnUnparkedRun": _ambiguous_unparked,
    "processLiveAfterRunnerExit": _process_after_exit,
    "requestAndWaitOpen": _request_and_wait,
    "waitPendingOnActiveRun": _wait_pending_active,
    "effectOutcomeLost": _effect_outcome_lost,
    "fireWithoutRun": _fire_without_run,
    "fireRunMismatch": _fire_run_mismatch,
    "fireAfterNextFire": _fire_after_next_fire,
    "queuedFireOfDeletedSchedule": _queued_fire_of_deleted,
    "liveChildOfEndedParent": _live_child_of_ended_parent,
    "childEndNotJoined": _child_end_not_joined,
    "joinCountMismatch": _join_count_mismatch,
    "joinStalled": _join_stalled,
    "stepStalled": _step_stalled,
    "settingsOutOfStep": _settings_out_of_step,
    "followUpOutOfStep": _follow_up_out_of_step,
}


@pytest.mark.parametrize("code", sorted(BUILDERS))
def test_each_problem_code_is_reported_for_the_state_it_names(
    db: Database, clock: FakeClock, code: str
) -> None:
    """The contradiction the builder made is reported with its code and its run."""
    assert problems(db) == []
    run_id = BUILDERS[code](db, clock)
    assert f"{code}:{run_id}" in problems(db)


def test_every_code_diagnose_can_report_has_a_builder() -> None:
    """The table above names exactly the codes ``store/diagnose.py`` (with its tree checks,
    ``store/diagnose_tree.py``) can report."""
    source = Path(diagnose_module.__file__).read_text() + Path(diagnose_tree.__file__).read_text()
    codes = set(re.findall(r'[Pp]roblem\(\s*"(\w+)"', source))
    assert codes == set(BUILDERS)
