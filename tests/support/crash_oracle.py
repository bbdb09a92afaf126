"""After a crash: restart as a new server would, drive every run to its end, check the oracle.

``restart`` reopens the state directory and runs the server's start-up (a new epoch, then
``server.recovery.recover``); ``settle_crashed_runner`` is what the supervisor does when a
runner conversation fails in a server that survives; ``drive_to_end`` plays runner,
operator and user until every run has ended; ``check_oracle`` asserts that ``diagnose`` is
clean and nothing was done twice.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pi_workflows.server import recovery
from pi_workflows.server.runner_messages import RunnerIdentity
from pi_workflows.store import (
    attempts,
    cleanups,
    interaction_writes,
    interactions,
    lifecycle,
    runners,
    signals,
    takeover,
    waits,
)
from pi_workflows.store.claims import Claim
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.effect_writes import reserve_effect, resolve_effect, settle_effect
from pi_workflows.store.effects import EffectStatus
from pi_workflows.store.errors import LeaseHeldError
from pi_workflows.store.lifecycle import Finish
from pi_workflows.store.runs import read_run
from pi_workflows.store.states import TERMINAL_STATUSES, AttemptStatus, RunStatus

from support.store import LEASE_MS, open_test_db, problems

SERVER_PID = 4_000_002  # recorded as the restarted server's pid; never signalled
OUTPUT = {"ok": True}
MAX_ROUNDS = 8


def restart(home: Path, clock: FakeClock) -> Database:
    """Open the state directory as a new server: bump the epoch, then run start-up recovery."""
    db = open_test_db(home, clock)
    epoch = runners.bump_server_epoch(db, SERVER_PID)
    asyncio.run(recovery.recover(db, epoch, grace_seconds=0.1))
    return db


def settle_crashed_runner(db: Database, runner: RunnerIdentity) -> None:
    """The supervisor's settlement of a runner whose conversation raised: exit, then fate."""
    runners.mark_exited(db, runner.runner_epoch, "crashed")
    if read_run(db.conn, runner.run_id).status is not RunStatus.RUNNING:
        return
    try:
        fence = lifecycle.live_or_control(db, runner.run_id, runner.claim)
    except LeaseHeldError:
        return
    if interaction_writes.abandon(db, fence, "the runner crashed") is None:
        takeover.recover(db, runner.run_id, claim=fence)


def open_runs(db: Database) -> list[tuple[str, RunStatus]]:
    """Every run that has not ended, with its status."""
    rows = db.conn.execute("SELECT run_id, status FROM runs ORDER BY created_at, run_id")
    return [(r[0], RunStatus(r[1])) for r in rows if RunStatus(r[1]) not in TERMINAL_STATUSES]


def drive_to_end(db: Database, clock: FakeClock) -> None:
    """Answer, resolve, resume and run every run to completion, as its users and runners would."""
    for _ in range(MAX_ROUNDS):
        clock.advance(LEASE_MS + 1)
        takeover.recover_all_expired(db)
        recovery.expire_due_requests(db)
        takeover.fire_due_waits(db)
        remaining = open_runs(db)
        if not remaining:
            return
        for run_id, status in remaining:
            if status is RunStatus.PAUSED:
                _resolve_and_resume(db, run_id)
            elif status is RunStatus.WAITING:
                _answer(db, run_id)
            elif status is RunStatus.QUEUED:
                _run_to_completion(db, lifecycle.claim(db, run_id, "driver").claim)
    raise AssertionError(f"runs did not end: {open_runs(db)}")


def _resolve_and_resume(db: Database, run_id: str) -> None:
    for (effect_id,) in db.conn.execute(
        "SELECT effect_id FROM effects WHERE run_id = ? AND status = 'ambiguous'", (run_id,)
    ).fetchall():
        resolve_effect(db, effect_id, "applied", result={"resolved": True})
    lifecycle.resume(db, run_id)


def _answer(db: Database, run_id: str) -> None:
    wait = waits.pending_of(db.conn, run_id)
    if wait is not None:  # a sleep or retry delay fires as the clock moves; an event is sent
        if wait.kind == "event" and wait.event_name is not None:
            signals.send(db, run_id, wait.event_name, OUTPUT, idempotency_key=None,
                         sent_by="driver")  # fmt: skip
        return
    request = interactions.open_request_of(db.conn, run_id)
    assert request is not None, f"{run_id} waits on no request"
    assert request.status == "pending", f"{run_id} waits on {request}"
    if request.kind == "decision":
        interaction_writes.answer_decision(db, request.request_id, "yes", answered_by="driver")
    else:
        interaction_writes.submit(
            db, request.request_id, {"answer": 1}, kinds=frozenset({request.kind}),
            submitted_by="driver",
        )  # fmt: skip


def _run_to_completion(db: Database, claim: Claim) -> None:
    """As a runner: route a timed-out attempt, or finish the open (or a new) attempt."""
    run = read_run(db.conn, claim.run_id)
    cleanup = cleanups.active(db.conn, claim.run_id)  # a cleanup node ends its run as ended
    finish = Finish(RunStatus.COMPLETED, OUTPUT) if cleanup is None else Finish(cleanup.ends_as)
    if run.unrouted_attempt is not None:
        lifecycle.finish_node(
            db, claim, run.unrouted_attempt, AttemptStatus.TIMED_OUT, finish, output=OUTPUT
        )
        return
    submission = interactions.validating_of(db.conn, claim.run_id)
    attempt = attempts.unfinished(db.conn, claim.run_id) or (
        lifecycle.start_node(db, claim, run.current_node or "a").attempt
    )
    wait = waits.of_attempt(db.conn, attempt.attempt_id)
    event = (
        None
        if wait is None or wait.kind != "event" or wait.event_name is None
        else signals.next_pending(db.conn, claim.run_id, wait.event_name)
    )
    for effect_type, kind, fingerprint in db.conn.execute(
        "SELECT effect_type, effect_kind, fingerprint FROM effects WHERE run_id = ?"
        " AND node_id = ? AND visit = ? AND status = 'pending'",
        (claim.run_id, attempt.node_id, attempt.visit),
    ).fetchall():
        reservation, _ = reserve_effect(
            db, claim, attempt_id=attempt.attempt_id, effect_type=effect_type,
            effect_kind=kind, fingerprint=fingerprint,
        )  # fmt: skip
        settle_effect(db, claim, reservation.effect_id, EffectStatus.APPLIED, result=OUTPUT)
    lifecycle.finish_node(
        db,
        claim,
        attempt.attempt_id,
        AttemptStatus.COMPLETED,
        finish,
        output=OUTPUT,
        submission_id=None if submission is None else submission.submission_id,
        signal_id=None if event is None else event.signal_id,
    )


def check_oracle(db: Database) -> None:
    """Every run ended, ``diagnose`` clean, each node visit completed and each effect applied
    at most once."""
    assert open_runs(db) == []
    assert problems(db) == []
    twice = db.conn.execute(
        "SELECT run_id, round, node_id, visit, COUNT(*) FROM node_attempts"
        " WHERE status = 'completed' GROUP BY run_id, round, node_id, visit HAVING COUNT(*) > 1"
    ).fetchall()
    assert [tuple(row) for row in twice] == []
    applied_twice = db.conn.execute(
        "SELECT effect_id, COUNT(*) FROM effect_attempts WHERE status = 'applied'"
        " GROUP BY effect_id HAVING COUNT(*) > 1"
    ).fetchall()
    assert [tuple(row) for row in applied_twice] == []
