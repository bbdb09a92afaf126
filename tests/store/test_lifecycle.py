"""Lifecycle transitions: each changes run, queue, attempt, claim, event and viewer together."""

from __future__ import annotations

import json

import pytest

from pi_workflows.store import attempts, interaction_writes, interactions, lifecycle, takeover
from pi_workflows.store.claims import read_lease
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.errors import (
    DecisionResolvedError,
    InvalidTransitionError,
    LeaseHeldError,
    RequestClosedError,
)
from pi_workflows.store.interaction_writes import PROTECTED_DECISION_MESSAGE
from pi_workflows.store.interactions import InteractionDraft
from pi_workflows.store.lifecycle import Finish, GoTo
from pi_workflows.store.projection import stored_view
from pi_workflows.store.states import AttemptStatus, NextCommand, ParkReason, RunStatus

from support.store import LEASE_MS, count, problems, reserve, run_status, running, snapshot


def _events(db: Database, run_id: str) -> list[str]:
    rows = db.conn.execute(
        "SELECT type FROM events WHERE run_id = ? ORDER BY revision", (run_id,)
    ).fetchall()
    return [row[0] for row in rows]


def _queue(db: Database, run_id: str) -> tuple[str, str]:
    row = db.conn.execute(
        "SELECT status, next_command FROM run_queue WHERE run_id = ?", (run_id,)
    ).fetchone()
    return row[0], row[1]


def _add_effect(db: Database, run_id: str, effect_id: str, kind: str, status: str) -> None:
    db.conn.execute(
        "INSERT INTO effects (effect_id, run_id, effect_key, effect_type, effect_kind, node_id,"
        " visit, fingerprint, status, attempt_count, created_at, updated_at)"
        " VALUES (?, ?, ?, 'mail', ?, 'a', 1, 'fp', ?, 1, 0, 0)",
        (effect_id, run_id, f"key-{effect_id}", kind, status),
    )
    if status == "applying":
        db.conn.execute(
            "INSERT INTO effect_attempts (effect_id, attempt_no, generation, status, started_at)"
            " VALUES (?, 1, 1, 'applying', 0)",
            (effect_id,),
        )


def test_run_goes_from_reserved_to_completed(db: Database) -> None:
    """A two-node run completes; every projection agrees at every step."""
    run_id = reserve(db)
    assert (run_status(db, run_id), _queue(db, run_id)) == ("queued", ("ready", "start"))
    claimed = lifecycle.claim(db, run_id, "runner-1")
    assert claimed.next_command is NextCommand.START
    claim = claimed.claim
    first = lifecycle.start_node(db, claim, "a")
    lifecycle.finish_node(
        db, claim, first.attempt.attempt_id, AttemptStatus.COMPLETED, GoTo("b"), output={"x": 1}
    )
    second = lifecycle.start_node(db, claim, "b")
    done = lifecycle.finish_node(
        db,
        claim,
        second.attempt.attempt_id,
        AttemptStatus.COMPLETED,
        Finish(RunStatus.COMPLETED, output={"y": 2}),
        output={"y": 2},
    )
    assert done.status is RunStatus.COMPLETED
    assert _queue(db, run_id)[0] == "done"
    lease = read_lease(db.conn, run_id)
    assert lease is not None
    assert not lease.held
    row = db.conn.execute("SELECT output_json, step_count, finished_at FROM runs").fetchone()
    assert (json.loads(row[0]), row[1]) == ({"y": 2}, 2)
    assert row[2] is not None
    assert _events(db, run_id) == [
        "run.reserved",
        "run.claimed",
        "node.started",
        "node.finished",
        "node.started",
        "run.completed",
    ]
    view = stored_view(db.conn, run_id)
    assert view is not None
    assert (view["status"], view["revision"], view["generation"]) == ("completed", 6, 1)
    assert problems(db) == []


def test_finish_can_start_the_next_node_in_the_same_write(db: Database) -> None:
    """With start_next, settling node N and opening node N+1 is one revision."""
    claim = running(db)
    first = lifecycle.start_node(db, claim, "a")
    result = lifecycle.finish_node(
        db,
        claim,
        first.attempt.attempt_id,
        AttemptStatus.COMPLETED,
        GoTo("b"),
        output=1,
        start_next=True,
    )
    assert result.next_attempt is not None
    assert result.revision == first.revision + 1
    active = attempts.unfinished(db.conn, claim.run_id)
    assert active is not None
    assert active.node_id == "b"
    assert problems(db) == []


def test_checkpoint_waits_without_a_claim_and_resumes_the_same_attempt(db: Database) -> None:
    """wait parks on a request and releases the claim; answer requeues; the attempt completes."""
    claim = running(db)
    started = lifecycle.start_node(db, claim, "ask")
    _, request_id = lifecycle.wait(
        db, claim, started.attempt.attempt_id, InteractionDraft("checkpoint", {"q": "go?"})
    )
    run_id = claim.run_id
    assert (run_status(db, run_id), _queue(db, run_id)[0]) == ("waiting", "waiting")
    lease = read_lease(db.conn, run_id)
    assert lease is not None
    assert not lease.held
    view = stored_view(db.conn, run_id)
    assert view is not None
    assert json.loads(view["waiting_json"]) == {
        "requestId": request_id,
        "nodeId": "ask",
        "kind": "checkpoint",
    }
    assert problems(db) == []
    submitted = interaction_writes.submit(
        db, request_id, {"ok": True}, kinds=frozenset({"checkpoint"}), submitted_by="cli"
    )
    assert _queue(db, run_id) == ("ready", "resume")
    with pytest.raises(RequestClosedError, match="another submission is being validated"):
        interaction_writes.submit(
            db, request_id, {"ok": False}, kinds=frozenset({"checkpoint"}), submitted_by="cli"
        )
    again = lifecycle.claim(db, run_id, "runner-2").claim
    assert again.generation == 2
    active = attempts.unfinished(db.conn, run_id)
    assert active is not None
    assert active.attempt_id == started.attempt.attempt_id
    request = interactions.read_request(db.conn, request_id)
    assert request is not None
    assert request.status == "validating"
    lifecycle.finish_node(
        db,
        again,
        active.attempt_id,
        AttemptStatus.COMPLETED,
        Finish(RunStatus.COMPLETED, output={"ok": True}),
        output={"ok": True},
        submission_id=submitted.submission_id,
    )
    request = interactions.read_request(db.conn, request_id)
    assert request is not None
    assert (request.status, request.answer) == ("answered", {"ok": True})
    assert run_status(db, run_id) == "completed"
    assert problems(db) == []


def test_a_decision_takes_one_declared_choice_once(db: Database) -> None:
    """A decision accepts only a declared choice, records one resolution, and refuses a second."""
    claim = running(db)
    started = lifecycle.start_node(db, claim, "approve")
    draft = InteractionDraft("decision", {"title": "Ship?"}, choices=["yes", "no"])
    _, request_id = lifecycle.wait(db, claim, started.attempt.attempt_id, draft)
    with pytest.raises(InvalidTransitionError, match=PROTECTED_DECISION_MESSAGE):
        interaction_writes.submit(  # the model-facing path
            db, request_id, {"choice": "yes"}, kinds=frozenset({"checkpoint"}), submitted_by="m"
        )
    with pytest.raises(InvalidTransitionError, match="not one of its choices: yes, no"):
        interaction_writes.answer_decision(db, request_id, "maybe", answered_by="cli")
    interaction_writes.answer_decision(db, request_id, "no", answered_by="cli")
    with pytest.raises(DecisionResolvedError, match="already answered 'no' by cli"):
        interaction_writes.answer_decision(db, request_id, "yes", answered_by="other")
    row = db.conn.execute(
        "SELECT resolution, choice_id, resolved_by FROM human_decision_resolutions"
    ).fetchall()
    assert [tuple(r) for r in row] == [("answered", "no", "cli")]
    assert problems(db) == []


def test_park_interrupts_the_attempt_and_resume_retries_the_same_visit(db: Database) -> None:
    """A parked run keeps its reason until resumed; the node's next attempt repeats the visit."""
    claim = running(db)
    started = lifecycle.start_node(db, claim, "a")
    lifecycle.park(db, claim, ParkReason.RUNNER_NO_PROGRESS, "no progress since ready")
    run_id = claim.run_id
    row = db.conn.execute("SELECT status, park_reason, park_detail FROM runs").fetchone()
    assert tuple(row) == ("paused", "runnerNoProgress", "no progress since ready")
    first = attempts.read_attempt(db.conn, started.attempt.attempt_id)
    assert first is not None
    assert first.status is AttemptStatus.INTERRUPTED
    assert takeover.expired_running(db) == []
    lifecycle.resume(db, run_id)
    assert db.conn.execute("SELECT park_reason FROM runs").fetchone()[0] is None
    again = lifecycle.claim(db, run_id, "runner-2")
    assert again.next_command is NextCommand.RESUME
    retry = lifecycle.start_node(db, again.claim, "a")
    assert (retry.attempt.visit, retry.attempt.attempt_no) == (1, 2)
    assert problems(db) == []


def test_impossible_transitions_are_rejected_and_change_nothing(db: Database) -> None:
    """Each impossible transition raises InvalidTransitionError and leaves the rows as they were."""
    queued = reserve(db)
    claim = running(db)
    before = snapshot(db)
    impossible = [
        lambda: lifecycle.resume(db, queued),
        lambda: lifecycle.resume(db, claim.run_id),
        lambda: lifecycle.pause(db, claim.run_id),
        lambda: lifecycle.claim(db, claim.run_id, "runner-2"),
        lambda: lifecycle.wait(db, claim, "att_missing", InteractionDraft("checkpoint", {})),
    ]
    for attempt in impossible:
        with pytest.raises(InvalidTransitionError):
            attempt()
        assert snapshot(db) == before
    started = lifecycle.start_node(db, claim, "a")
    with pytest.raises(InvalidTransitionError):
        lifecycle.start_node(db, claim, "b")
    with pytest.raises(InvalidTransitionError, match="still running"):
        lifecycle.complete(db, claim, {"early": True})
    lifecycle.finish_node(
        db, claim, started.attempt.attempt_id, AttemptStatus.COMPLETED, Finish(RunStatus.COMPLETED)
    )
    for attempt in (
        lambda: lifecycle.cancel(db, claim.run_id),
        lambda: lifecycle.resume(db, claim.run_id),
        lambda: lifecycle.claim(db, claim.run_id, "runner-3"),
    ):
        with pytest.raises(InvalidTransitionError):
            attempt()
    assert problems(db) == []


def test_cancel_an_expired_running_row(db: Database, clock: FakeClock) -> None:
    """An expired running row is cancelled through a control claim; its attempt closes."""
    claim = running(db)
    started = lifecycle.start_node(db, claim, "a")
    clock.advance(LEASE_MS + 1)
    lifecycle.cancel(db, claim.run_id, reason="operator cancel")
    assert run_status(db, claim.run_id) == "cancelled"
    attempt = attempts.read_attempt(db.conn, started.attempt.attempt_id)
    assert attempt is not None
    assert attempt.status is AttemptStatus.CANCELLED
    lease = read_lease(db.conn, claim.run_id)
    assert lease is not None
    assert (lease.generation, lease.held) == (2, False)
    assert problems(db) == []


def test_cancel_a_committed_run_before_its_first_runner(db: Database) -> None:
    """A queued run is cancelled before any runner claims it; a later claim is refused."""
    run_id = reserve(db)
    lifecycle.cancel(db, run_id)
    assert (run_status(db, run_id), _queue(db, run_id)[0]) == ("cancelled", "done")
    with pytest.raises(InvalidTransitionError):
        lifecycle.claim(db, run_id, "runner-1")
    assert problems(db) == []


def test_stale_cancellation_against_a_live_owner_is_rejected(
    db: Database, clock: FakeClock
) -> None:
    """Without the live claim, cancellation cannot take a run whose claim has not expired."""
    claim = running(db)
    clock.advance(LEASE_MS - 1)
    before = snapshot(db)
    with pytest.raises(LeaseHeldError):
        lifecycle.cancel(db, claim.run_id)
    assert snapshot(db) == before
    lifecycle.cancel(db, claim.run_id, claim=claim)
    assert run_status(db, claim.run_id) == "cancelled"


def test_cancel_closes_interactions_decisions_and_effects(db: Database) -> None:
    """Cancellation cancels the open decision (one resolution), unstarted and applying effects."""
    claim = running(db)
    started = lifecycle.start_node(db, claim, "approve")
    draft = InteractionDraft("decision", {"title": "Ship?"}, choices=["yes", "no"])
    _, request_id = lifecycle.wait(db, claim, started.attempt.attempt_id, draft)
    _add_effect(db, claim.run_id, "eff_pending", "manual", "pending")
    _add_effect(db, claim.run_id, "eff_applying", "manual", "applying")
    lifecycle.cancel(db, claim.run_id)
    statuses = dict(db.conn.execute("SELECT effect_id, status FROM effects").fetchall())
    assert statuses == {"eff_pending": "cancelled", "eff_applying": "ambiguous"}
    assert count(db, "effect_attempts", "status = 'lost'") == 1
    request = interactions.read_request(db.conn, request_id)
    assert request is not None
    assert request.status == "cancelled"
    resolution = db.conn.execute("SELECT resolution FROM human_decision_resolutions").fetchall()
    assert [r[0] for r in resolution] == ["cancelled"]
    assert problems(db) == []


def test_recovery_requeues_expired_runs_and_leaves_live_ones(
    db: Database, clock: FakeClock
) -> None:
    """Startup recovery makes expired running rows claimable and never touches a live one."""
    stale = running(db, "runner-old")
    lifecycle.start_node(db, stale, "a")
    clock.advance(LEASE_MS + 1)
    live = running(db, "runner-live")
    recovered = takeover.recover_all_expired(db)
    assert [r.run_id for r in recovered] == [stale.run_id]
    assert _queue(db, stale.run_id) == ("ready", "resume")
    assert run_status(db, live.run_id) == "running"
    assert count(db, "node_attempts", "status = 'interrupted'") == 1
    assert problems(db) == []


def test_recovery_parks_a_run_whose_manual_effect_may_have_applied(
    db: Database, clock: FakeClock
) -> None:
    """An applying manual effect becomes ambiguous and parks the run until it is resolved."""
    claim = running(db)
    lifecycle.start_node(db, claim, "a")
    _add_effect(db, claim.run_id, "eff_manual", "manual", "applying")
    _add_effect(db, claim.run_id, "eff_idem", "idempotent", "applying")
    clock.advance(LEASE_MS + 1)
    takeover.recover(db, claim.run_id)
    row = db.conn.execute("SELECT status, park_reason FROM runs").fetchone()
    assert tuple(row) == ("paused", "effectAmbiguous")
    view = stored_view(db.conn, claim.run_id)
    assert view is not None
    assert view["status"] == "ambiguous"
    statuses = dict(db.conn.execute("SELECT effect_id, status FROM effects").fetchall())
    assert statuses == {"eff_manual": "ambiguous", "eff_idem": "pending"}
    with pytest.raises(InvalidTransitionError, match="ambiguous"):
        lifecycle.resume(db, claim.run_id)
    db.conn.execute("UPDATE effects SET status = 'applied' WHERE effect_id = 'eff_manual'")
    lifecycle.resume(db, claim.run_id)
    assert run_status(db, claim.run_id) == "queued"
    assert problems(db) == []


def test_pause_of_a_queued_run_needs_no_claim(db: Database) -> None:
    """A queued run pauses with userPaused and resumes to the command it had."""
    run_id = reserve(db)
    lifecycle.pause(db, run_id)
    assert db.conn.execute("SELECT park_reason FROM runs").fetchone()[0] == "userPaused"
    lifecycle.resume(db, run_id, command=NextCommand.START)
    assert _queue(db, run_id) == ("ready", "start")
    assert problems(db) == []


def test_finish_records_a_notify_message_and_the_next_deadline_in_one_write(
    db: Database, clock: FakeClock
) -> None:
    """A notify node's message and the next node's deadline commit with the node's result."""
    claim = running(db)
    started = lifecycle.start_node(db, claim, "say", timeout_ms=5_000)
    row = db.conn.execute("SELECT deadline_at FROM node_attempts").fetchone()
    assert row[0] == clock.now_ms() + 5_000
    result = lifecycle.finish_node(
        db,
        claim,
        started.attempt.attempt_id,
        AttemptStatus.COMPLETED,
        GoTo("next"),
        output={"message": "hi"},
        start_next=True,
        next_timeout_ms=7_000,
        message=("progress", "hi"),
    )
    assert result.next_attempt is not None
    deadline = db.conn.execute(
        "SELECT deadline_at FROM node_attempts WHERE attempt_id = ?",
        (result.next_attempt.attempt_id,),
    ).fetchone()[0]
    assert deadline == clock.now_ms() + 7_000
    messages = db.conn.execute("SELECT kind, body_json, source_key FROM workflow_messages")
    [(kind, body, source)] = [tuple(m) for m in messages]
    assert (kind, source) == ("notification", started.attempt.attempt_id)
    assert json.loads(body)["text"] == "hi"
    assert json.loads(body)["level"] == "progress"
    assert problems(db) == []


def test_a_server_timed_out_node_is_routed_by_the_next_runner(
    db: Database, clock: FakeClock
) -> None:
    """After the server times a node out, the next runner routes that attempt without rerunning."""
    claim = running(db)
    started = lifecycle.start_node(db, claim, "slow", timeout_ms=1_000)
    takeover.time_out_node(db, claim, started.attempt.attempt_id, "node slow timed out")
    assert run_status(db, claim.run_id) == "queued"
    again = lifecycle.claim(db, claim.run_id, "runner-2").claim
    with pytest.raises(InvalidTransitionError, match="route the timed-out node first"):
        lifecycle.start_node(db, again, "slow")
    lifecycle.finish_node(
        db,
        again,
        started.attempt.attempt_id,
        AttemptStatus.TIMED_OUT,
        GoTo("fallback"),
        error="node slow timed out",
    )
    row = db.conn.execute("SELECT unrouted_attempt, current_node, step_count FROM runs").fetchone()
    assert tuple(row) == (None, "fallback", 1)
    assert count(db, "node_attempts") == 1
    assert problems(db) == []
