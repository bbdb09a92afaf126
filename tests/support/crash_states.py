"""Prepared states for the commit-point crash scenarios, and the runner and client helpers.

Each ``prepare`` function builds a real state in a fresh database with the store's own
operations (and the server's ``answer`` for runner messages) and returns the context the
crashed transaction needs (run id, claims, attempt and request ids, a ``RunnerIdentity``).
Recorded pids are ``FAKE_PID`` with a start time no live process has, so recovery never
signals anything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from pi_workflows.protocol import RUNNER_SCHEMA, Outcome, RunnerMessage
from pi_workflows.server.runner_messages import RunnerIdentity, answer
from pi_workflows.store import (
    agents,
    follow_ups,
    forks,
    interaction_writes,
    lifecycle,
    progress,
    receipts,
    runners,
    schedules,
    sessions,
    settings,
    signals,
    takeover,
    upgrades,
)
from pi_workflows.store.children import ChildWorkflow
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.effect_writes import reserve_effect
from pi_workflows.store.interactions import InteractionDraft
from pi_workflows.store.lifecycle import Finish, RunEnvironment
from pi_workflows.store.receipts import CommandRequest
from pi_workflows.store.schedules import Catchup, Overlap, ScheduleAction, ScheduleDraft
from pi_workflows.store.states import AttemptStatus, ParkReason, RunStatus

from support.store import LEASE_MS, chain_run, new_run, walk, walk_until

Ctx = dict[str, Any]

CLIENT = "crash-client"
SESSION = "sess-1"
FAKE_PID = 4_000_000  # no live process has this pid and start time: never signalled
FAKE_START = 1.0
CHECKPOINT = frozenset({"checkpoint"})
MODEL_KINDS = frozenset({"agent", "assistant", "checkpoint"})
CRASH_MESSAGE = "m-crash"


# --- runner and client helpers ------------------------------------------------------------


def runner_message(ctx: Ctx, kind: str, payload: dict[str, Any], message_id: str) -> RunnerMessage:
    """A message of the runner recorded in ``ctx`` for its own generation."""
    return RunnerMessage(
        schema=RUNNER_SCHEMA,
        run_id=ctx["run_id"],
        generation=ctx["claim"].generation,
        runner_epoch=ctx["runner_epoch"],
        message_id=message_id,
        kind=kind,
        payload=payload,
    )


def say(db: Database, ctx: Ctx, kind: str, payload: dict[str, Any], message_id: str) -> Any:
    """Answer one runner message; anything but ``accepted`` is a broken scenario."""
    reply = answer(db, ctx["runner"], runner_message(ctx, kind, payload, message_id))
    if reply.outcome is not Outcome.ACCEPTED:
        raise AssertionError(f"{kind} was answered {reply.outcome}: {reply.error}")
    return reply.payload or {}


def effect_payload(ctx: Ctx) -> dict[str, Any]:
    """An ``effect.reserve`` of an idempotent ``ledger`` effect for the active attempt."""
    return {
        "attemptId": ctx["attempt_id"],
        "effectType": "ledger",
        "effectKind": "idempotent",
        "fingerprint": "fp-1",
    }


def process_payload() -> dict[str, Any]:
    """A ``process.register`` of the fake group."""
    return {"pid": FAKE_PID, "processStart": FAKE_START, "command": "sleep 1"}


def command_request(
    operation: str, ctx: Ctx, payload: dict[str, Any] | None = None
) -> CommandRequest:
    """The one logical command of a scenario (its retry uses the same key)."""
    return CommandRequest(CLIENT, f"key-{operation}", operation, ctx.get("run_id"), payload or {})


def status_body(db: Database, run_id: str) -> tuple[str | None, dict[str, Any]]:
    """The receipt body of the run commands: status and revision."""
    row = db.conn.execute(
        "SELECT status, revision FROM runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    return run_id, {"runId": run_id, "status": row[0], "revision": row[1]}


def pause_request(ctx: Ctx) -> CommandRequest:
    """The ``run.pause`` command of the run in ``ctx``."""
    return command_request("run.pause", ctx)


def pause_change(db: Database, ctx: Ctx) -> tuple[str | None, dict[str, Any]]:
    """The store change of ``run.pause`` on a queued run."""
    lifecycle.pause(db, ctx["run_id"])
    return status_body(db, ctx["run_id"])


# --- prepared states ---------------------------------------------------------------------


def reserve(db: Database, *, session: str | None = None) -> str:
    """Reserve a run (of ``session``, if given) and return its id."""
    run = new_run() if session is None else dataclasses.replace(new_run(), origin_session=session)
    return lifecycle.reserve(db, run).run_id


def queued(db: Database, clock: FakeClock) -> Ctx:
    """A queued run."""
    return {"run_id": reserve(db)}


def running(db: Database, clock: FakeClock, *, session: str | None = None) -> Ctx:
    """A run claimed by ``runner-1``."""
    run_id = reserve(db, session=session)
    return {"run_id": run_id, "claim": lifecycle.claim(db, run_id, "runner-1").claim}


def running_later(db: Database, clock: FakeClock) -> Ctx:
    """A running run a second after its claim was taken (a renewal moves the expiry)."""
    ctx = running(db, clock)
    clock.advance(1_000)
    return ctx


def in_node(db: Database, clock: FakeClock, *, session: str | None = None) -> Ctx:
    """A running run in its first attempt of node ``a``."""
    ctx = running(db, clock, session=session)
    ctx["attempt_id"] = lifecycle.start_node(db, ctx["claim"], "a").attempt.attempt_id
    return ctx


def waiting(
    db: Database,
    clock: FakeClock,
    *,
    kind: str = "checkpoint",
    session: str | None = None,
    timeout_ms: int | None = None,
    for_person: bool = False,
) -> Ctx:
    """A run waiting on a request of ``kind`` (of ``session``, with a deadline; a checkpoint
    ``for_person``: only a person answers it)."""
    ctx = in_node(db, clock, session=session)
    draft = InteractionDraft(kind, {"q": 1}, timeout_ms=timeout_ms, for_person=for_person)
    _, ctx["request_id"] = lifecycle.wait(db, ctx["claim"], ctx["attempt_id"], draft)
    return ctx


def validating(db: Database, clock: FakeClock) -> Ctx:
    """A checkpoint answer being validated by a second runner (``claim2``)."""
    ctx = waiting(db, clock)
    submitted = interaction_writes.submit(
        db, ctx["request_id"], {"a": 1}, kinds=CHECKPOINT, submitted_by="test"
    )
    ctx["submission_id"] = submitted.submission_id
    ctx["claim2"] = lifecycle.claim(db, ctx["run_id"], "runner-2").claim
    return ctx


def deciding(db: Database, clock: FakeClock) -> Ctx:
    """A run waiting on a human decision (yes or no)."""
    ctx = in_node(db, clock)
    draft = InteractionDraft("decision", {"title": "ship?"}, choices=["yes", "no"])
    _, ctx["request_id"] = lifecycle.wait(db, ctx["claim"], ctx["attempt_id"], draft)
    return ctx


def paused(db: Database, clock: FakeClock) -> Ctx:
    """A run parked by the server (its runner made no progress)."""
    ctx = in_node(db, clock)
    lifecycle.park(db, ctx["claim"], ParkReason.RUNNER_NO_PROGRESS)
    return ctx


def user_paused(db: Database, clock: FakeClock) -> Ctx:
    """A queued run a user paused."""
    ctx = queued(db, clock)
    lifecycle.pause(db, ctx["run_id"])
    return ctx


def expired(db: Database, clock: FakeClock) -> Ctx:
    """A run in a node whose runner's claim has expired."""
    ctx = in_node(db, clock)
    clock.advance(LEASE_MS + 1)
    return ctx


def failed(db: Database, clock: FakeClock) -> Ctx:
    """A run that failed in its node."""
    ctx = in_node(db, clock)
    lifecycle.fail(db, ctx["claim"], "boom")
    return ctx


def node_late(db: Database, clock: FakeClock) -> Ctx:
    """A run in a node whose one-second deadline has passed."""
    ctx = running(db, clock)
    started = lifecycle.start_node(db, ctx["claim"], "a", timeout_ms=1_000)
    ctx["attempt_id"] = started.attempt.attempt_id
    clock.advance(2_000)
    return ctx


def request_late(db: Database, clock: FakeClock) -> Ctx:
    """A run waiting on a checkpoint whose one-second deadline has passed."""
    ctx = waiting(db, clock, timeout_ms=1_000)
    clock.advance(2_000)
    return ctx


def applying(db: Database, clock: FakeClock, *, effect_kind: str = "idempotent") -> Ctx:
    """A run in a node whose effect body is applying."""
    ctx = in_node(db, clock)
    reservation, _ = reserve_effect(
        db,
        ctx["claim"],
        attempt_id=ctx["attempt_id"],
        effect_type="ledger",
        effect_kind=effect_kind,
        fingerprint="fp-1",
    )
    ctx["effect_id"] = reservation.effect_id
    return ctx


def ambiguous(db: Database, clock: FakeClock) -> Ctx:
    """A manual effect whose runner died while it applied: ambiguous, its run parked."""
    ctx = applying(db, clock, effect_kind="manual")
    takeover.recover(db, ctx["run_id"], claim=ctx["claim"])
    return ctx


def completed(db: Database, clock: FakeClock) -> Ctx:
    """A run that completed."""
    ctx = in_node(db, clock)
    lifecycle.finish_node(
        db,
        ctx["claim"],
        ctx["attempt_id"],
        AttemptStatus.COMPLETED,
        Finish(RunStatus.COMPLETED, {"ok": True}),
        output={"ok": True},
    )
    return ctx


def answered_command(db: Database, clock: FakeClock) -> Ctx:
    """A queued run paused by a command whose receipt is stored."""
    ctx = queued(db, clock)
    receipts.run_command(db, pause_request(ctx), lambda: pause_change(db, ctx))
    return ctx


def receipt_of_ended_run(db: Database, clock: FakeClock) -> Ctx:
    """A paused-by-command run that was then cancelled, a second later."""
    ctx = answered_command(db, clock)
    lifecycle.cancel(db, ctx["run_id"])
    clock.advance(1_000)
    return ctx


def ended_long_ago(db: Database, clock: FakeClock) -> Ctx:
    """A run that completed a second ago."""
    ctx = completed(db, clock)
    clock.advance(1_000)
    return ctx


def viewer_stale(db: Database, clock: FakeClock) -> Ctx:
    """A queued run whose viewer row disagrees with its run rows."""
    ctx = queued(db, clock)
    db.conn.execute(
        "UPDATE viewer_runs SET current_node = 'stale' WHERE run_id = ?", (ctx["run_id"],)
    )
    return ctx


def queue_stale(db: Database, clock: FakeClock) -> Ctx:
    """A queued run whose queue row says parked."""
    ctx = queued(db, clock)
    db.conn.execute("UPDATE run_queue SET status = 'parked' WHERE run_id = ?", (ctx["run_id"],))
    return ctx


def session_step(db: Database, clock: FakeClock) -> Ctx:
    """A run of ``SESSION`` waits on a checkpoint whose step message is pending."""
    ctx = waiting(db, clock, session=SESSION)
    ctx["epoch"] = sessions.attach(db, SESSION).coordinator_epoch
    row = db.conn.execute(
        "SELECT message_id FROM workflow_messages WHERE request_id = ?", (ctx["request_id"],)
    ).fetchone()
    ctx["message_id"] = row[0]
    return ctx


def follow_up_queued(db: Database, clock: FakeClock) -> Ctx:
    """A run of ``SESSION`` in its first node, with the follow-up ``go on`` queued."""
    ctx = in_node(db, clock, session=SESSION)
    queued, _ = follow_ups.queue(db, ctx["run_id"], "go on", created_by="test")
    ctx["follow_up_id"] = queued.follow_up_id
    return ctx


def follow_up_result_pending(db: Database, clock: FakeClock) -> Ctx:
    """``follow_up_queued``'s run completed; its result message waits for the attached
    session (whose report of it releases the follow-up)."""
    ctx = follow_up_queued(db, clock)
    lifecycle.finish_node(
        db, ctx["claim"], ctx["attempt_id"], AttemptStatus.COMPLETED,
        Finish(RunStatus.COMPLETED, {"done": True}), output={"done": True},
    )  # fmt: skip
    ctx["epoch"] = sessions.attach(db, SESSION).coordinator_epoch
    row = db.conn.execute(
        "SELECT message_id FROM workflow_messages WHERE run_id = ? AND kind = 'terminal'",
        (ctx["run_id"],),
    ).fetchone()
    ctx["message_id"] = row[0]
    return ctx


def session_turn(db: Database, clock: FakeClock) -> Ctx:
    """The step was shown and a model turn for it started."""
    ctx = session_step(db, clock)
    sessions.report_messages(
        db, SESSION, ctx["epoch"], [(ctx["message_id"], "entry-1")], idle=False
    )
    sessions.report_turn(
        db,
        SESSION,
        ctx["epoch"],
        event="started",
        stop_reason=None,
        workflow_message_id=ctx["message_id"],
    )
    return ctx


def session_retry_due(db: Database, clock: FakeClock) -> Ctx:
    """The step's turn ended with a provider error: it is due to be presented again in 1 s."""
    ctx = session_turn(db, clock)
    sessions.report_turn(
        db, SESSION, ctx["epoch"], event="ended", stop_reason="error",
        workflow_message_id=None, error_message="500: upstream failed",
        retry=sessions.TurnRetry(retries=3, backoff_ms=1_000),
    )  # fmt: skip
    return ctx


def paused_retry_due(db: Database, clock: FakeClock) -> Ctx:
    """The run of ``session_retry_due`` was paused, and the presentation's time came."""
    ctx = session_retry_due(db, clock)
    lifecycle.pause(db, ctx["run_id"])
    clock.advance(2_000)
    return ctx


def agent_live(db: Database, clock: FakeClock) -> Ctx:
    """A queued run with a live headless agent recorded."""
    ctx = queued(db, clock)
    ctx["agent_id"] = agents.record_started(
        db, ctx["run_id"], f"detached-{ctx['run_id']}", 1, FAKE_PID, FAKE_START
    )
    return ctx


def server_started(db: Database, clock: FakeClock) -> Ctx:
    """A server epoch taken."""
    return {"server_epoch": runners.bump_server_epoch(db, FAKE_PID)}


def launch(db: Database, ctx: Ctx) -> Ctx:
    """Record a runner launch for ``ctx['run_id']`` (queued) as the server would."""
    epoch = ctx.get("server_epoch") or runners.bump_server_epoch(db, FAKE_PID)
    run_id = ctx["run_id"]
    launch = runners.launch(db, run_id, epoch, lambda tx, r, g: {"runId": run_id})
    ctx.update(
        server_epoch=epoch,
        runner_epoch=launch.runner_epoch,
        claim=launch.claim,
        revision=launch.revision,
        runner=RunnerIdentity(run_id, launch.runner_epoch, launch.claim),
    )
    return ctx


def launched(db: Database, clock: FakeClock) -> Ctx:
    """A run claimed by a runner the server launched (``ctx['runner']``)."""
    return launch(db, {**server_started(db, clock), "run_id": reserve(db)})


def dead_server_claim(db: Database, clock: FakeClock) -> Ctx:
    """A runner claim of server epoch 1, then server epoch 2 started."""
    ctx = launched(db, clock)
    ctx["server_epoch"] = runners.bump_server_epoch(db, FAKE_PID)
    return ctx


def runner_in_node(db: Database, clock: FakeClock) -> Ctx:
    """A launched runner that started node ``a``."""
    ctx = launched(db, clock)
    started = say(db, ctx, "node.start", {"nodeId": "a"}, "m-start")
    ctx["attempt_id"] = started["attemptId"]
    return ctx


SETTINGS_PATCH = [{"op": "replace", "path": "/level", "value": 2}]
"""The settings change of the settings scenarios."""


def tuned_run() -> Any:
    """A chain run (``a`` then ``b``, both compute) whose workflow declares live settings
    (``{"level": 1}`` by default) and lets a person and the model change them."""
    run = chain_run("tuned", {"a": "compute", "b": "compute"}, effect_on=None)
    definition = {
        **run.definition,
        "settingsSchema": {
            "type": "object",
            "properties": {"level": {"type": "integer", "default": 1}},
            "required": ["level"],
        },
        "settingsDefaults": {"level": 1},
        "settingsChangedBy": ["model", "person"],
    }
    text = json.dumps(definition, sort_keys=True, separators=(",", ":")).encode()
    return dataclasses.replace(
        run, definition=definition, definition_digest=hashlib.sha256(text).hexdigest()
    )


def settings_in_node(db: Database, clock: FakeClock) -> Ctx:
    """A launched runner of a run with settings, in its first attempt of node ``a``."""
    ctx = launch(
        db, {**server_started(db, clock), "run_id": lifecycle.reserve(db, tuned_run()).run_id}
    )
    started = say(db, ctx, "node.start", {"nodeId": "a"}, "m-start")
    ctx["attempt_id"] = started["attemptId"]
    return ctx


def settings_stale_route(db: Database, clock: FakeClock) -> Ctx:
    """``settings_in_node`` whose settings changed after its attempt started: a
    ``settings_route`` attempt there is evaluated again before its route commits."""
    ctx = settings_in_node(db, clock)
    settings.change(db, ctx["run_id"], SETTINGS_PATCH)
    return ctx


def runner_progress(db: Database, clock: FakeClock) -> Ctx:
    """A launched runner whose attempt published three progress values (the first sampled
    into history, the other two kept as the latest only)."""
    ctx = runner_in_node(db, clock)
    for pct in (10, 20, 30):
        payload = {"attemptId": ctx["attempt_id"], "body": {"pct": pct}, "published": pct}
        say(db, ctx, "node.update", payload, f"m-update-{pct}")
    return ctx


def in_node_progress(db: Database, clock: FakeClock) -> Ctx:
    """A running attempt that published one progress value (history sampled it)."""
    ctx = in_node(db, clock)
    progress.record(db, ctx["claim"], ctx["attempt_id"], {"pct": 10})
    return ctx


def runner_applying(db: Database, clock: FakeClock) -> Ctx:
    """A launched runner whose idempotent effect is applying."""
    ctx = runner_in_node(db, clock)
    reserved = say(db, ctx, "effect.reserve", effect_payload(ctx), "m-reserve")
    ctx["effect_id"] = reserved["effectId"]
    return ctx


def runner_process(db: Database, clock: FakeClock) -> Ctx:
    """A launched runner that registered a process group."""
    ctx = runner_in_node(db, clock)
    say(db, ctx, "process.register", process_payload(), "m-register")
    return ctx


def runner_validating(db: Database, clock: FakeClock) -> Ctx:
    """A runner launched to validate a checkpoint answer."""
    ctx = validating(db, clock)
    lifecycle.park(db, ctx["claim2"], ParkReason.SERVER_STOPPED)
    lifecycle.resume(db, ctx["run_id"])
    return launch(db, ctx)


def registered(db: Database, clock: FakeClock) -> Ctx:
    """A launched runner in node ``a`` with a process group recorded live."""
    ctx = launched(db, clock)
    lifecycle.start_node(db, ctx["claim"], "a")
    runners.register_process(db, ctx["claim"], ctx["runner_epoch"], FAKE_PID, FAKE_START, "sleep 1")
    return ctx


def queued_for_launch(db: Database, clock: FakeClock) -> Ctx:
    """A server epoch taken and a queued run for it to launch."""
    return {**server_started(db, clock), **queued(db, clock)}


def waiting_on_agent(db: Database, clock: FakeClock) -> Ctx:
    """A run waiting on an agent step's submission."""
    return waiting(db, clock, kind="agent")


def sleeping(db: Database, clock: FakeClock) -> Ctx:
    """A run whose sleep node waits one second."""
    ctx = in_node(db, clock)
    lifecycle.sleep(db, ctx["claim"], ctx["attempt_id"], delay_ms=1_000)
    return ctx


def sleep_due(db: Database, clock: FakeClock) -> Ctx:
    """A sleeping run whose wake time has passed (the server has not fired it yet)."""
    ctx = sleeping(db, clock)
    clock.advance(2_000)
    return ctx


def event_waiting(db: Database, clock: FakeClock) -> Ctx:
    """A run whose wait_event node waits for the event ``go`` (a minute's timeout)."""
    ctx = in_node(db, clock)
    lifecycle.await_event(
        db, ctx["claim"], ctx["attempt_id"], "go", timeout_ms=60_000, validates=True
    )
    return ctx


def signalling(db: Database, clock: FakeClock) -> Ctx:
    """A run in node ``a`` (its runner launched) and another run that waits for ``go``:
    the first may signal the second (``ctx['target']``)."""
    target = event_waiting(db, clock)
    ctx = runner_in_node(db, clock)
    ctx["target"] = target["run_id"]
    return ctx


def in_node_and_target(db: Database, clock: FakeClock) -> Ctx:
    """``in_node``, and another run waiting for ``go`` (``ctx['target']``)."""
    target = event_waiting(db, clock)
    ctx = in_node(db, clock)
    ctx["target"] = target["run_id"]
    return ctx


def child_workflow() -> ChildWorkflow:
    """The workflow every child of the crash scenarios' joins runs (one compute node)."""
    run = new_run("child")
    return ChildWorkflow(run.workflow_name, run.definition, run.definition_digest, run.source)


def spawn_payload(ctx: Ctx, items: int = 3, concurrency: int = 2) -> dict[str, Any]:
    """A runner's ``node.spawn`` of ``items`` children of ``child_workflow``."""
    child = child_workflow()
    return {
        "attemptId": ctx["attempt_id"],
        "kind": "fan_out",
        "child": {
            "workflowName": child.workflow_name,
            "definition": child.definition,
            "definitionDigest": child.definition_digest,
            "source": {"kind": child.source.kind, "ref": child.source.ref,
                       "revision": child.source.revision},
        },
        "inputs": [{"item": i} for i in range(items)],
        "concurrency": concurrency,
        "failFast": False,
    }  # fmt: skip


def joining(db: Database, clock: FakeClock, *, items: int = 3, fail_fast: bool = False) -> Ctx:
    """A parent whose fan_out node waits on ``items`` children, two at a time
    (``ctx['children']``: the ids of the started ones, in item order)."""
    ctx = in_node(db, clock)
    lifecycle.spawn(
        db, ctx["claim"], ctx["attempt_id"], kind="fan_out", child=child_workflow(),
        inputs=[{"item": i} for i in range(items)], concurrency=2, fail_fast=fail_fast,
        detached=False,
    )  # fmt: skip
    ctx["children"] = [
        row[0]
        for row in db.conn.execute(
            "SELECT child_run_id FROM run_children WHERE child_run_id IS NOT NULL ORDER BY item"
        )
    ]
    return ctx


def paced_due(db: Database, clock: FakeClock) -> Ctx:
    """A parent whose ``fan_out(rate="1/s")`` node started one of three children; the
    rate's window has passed, so its join's wait is due (the server has not fired it)."""
    ctx = in_node(db, clock)
    lifecycle.spawn(
        db, ctx["claim"], ctx["attempt_id"], kind="fan_out", child=child_workflow(),
        inputs=[{"item": i} for i in range(3)], concurrency=3, fail_fast=False,
        detached=False, rate=(1, 1_000),
    )  # fmt: skip
    clock.advance(1_000)
    return ctx


def past_deadline(db: Database, clock: FakeClock) -> Ctx:
    """A run in its node ``a`` (its runner's claim still live) whose 1 s run deadline
    passed."""
    run_id = lifecycle.reserve(db, dataclasses.replace(new_run(), deadline_ms=1_000)).run_id
    claim = lifecycle.claim(db, run_id, "runner-1").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt.attempt_id
    clock.advance(1_001)
    return {"run_id": run_id, "claim": claim, "attempt_id": attempt}


def tree_past_deadline(db: Database, clock: FakeClock) -> Ctx:
    """A parent waiting on its fan_out of two children (one claimed by its runner, in its
    node) whose 1 s run deadline passed."""
    run_id = lifecycle.reserve(db, dataclasses.replace(new_run(), deadline_ms=1_000)).run_id
    claim = lifecycle.claim(db, run_id, "runner-1").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt.attempt_id
    lifecycle.spawn(
        db, claim, attempt, kind="fan_out", child=child_workflow(),
        inputs=[{"item": i} for i in range(2)], concurrency=2, fail_fast=False, detached=False,
    )  # fmt: skip
    child = db.conn.execute(
        "SELECT child_run_id FROM run_children WHERE child_run_id IS NOT NULL ORDER BY item"
    ).fetchone()[0]
    child_claim = lifecycle.claim(db, child, "runner-child").claim
    lifecycle.start_node(db, child_claim, "a")
    clock.advance(1_001)
    return {"run_id": run_id, "children": [child], "child_claim": child_claim}


def cleanup_run() -> lifecycle.NewRun:
    """A run whose workflow declares the cleanup node ``z`` (``Workflow(on_cancel="z")``)."""
    definition = {
        "name": "tidy", "start": "a", "onCancel": "z", "edges": [],
        "nodes": {"a": {"kind": "compute"}, "z": {"kind": "compute"}},
    }  # fmt: skip
    text = json.dumps(definition, sort_keys=True, separators=(",", ":")).encode()
    return dataclasses.replace(
        new_run("tidy"), definition=definition, definition_digest=hashlib.sha256(text).hexdigest()
    )


def cleanup_in_node(db: Database, clock: FakeClock) -> Ctx:
    """A run with a cleanup node, in its node ``a`` under its runner's claim."""
    run_id = lifecycle.reserve(db, cleanup_run()).run_id
    claim = lifecycle.claim(db, run_id, "runner-1").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt.attempt_id
    return {"run_id": run_id, "claim": claim, "attempt_id": attempt}


def cleaning_up(db: Database, clock: FakeClock) -> Ctx:
    """A cancelled run whose cleanup node ``z`` runs under a new runner's claim."""
    ctx = cleanup_in_node(db, clock)
    lifecycle.cancel(db, ctx["run_id"], claim=ctx["claim"], reason="stop")
    claim = lifecycle.claim(db, ctx["run_id"], "runner-2").claim
    attempt = lifecycle.start_node(db, claim, "z").attempt.attempt_id
    return {"run_id": ctx["run_id"], "claim": claim, "attempt_id": attempt}


def last_child_running(db: Database, clock: FakeClock) -> Ctx:
    """A parent waiting on one child: the child runs node ``a`` (``child_claim``,
    ``child_attempt``), so its end is the join's last."""
    ctx = joining(db, clock, items=1)
    child = ctx["children"][0]
    claimed = lifecycle.claim(db, child, "runner-child").claim
    ctx["child_claim"] = claimed
    ctx["child_attempt"] = lifecycle.start_node(db, claimed, "a").attempt.attempt_id
    return ctx


def held_back(db: Database, clock: FakeClock) -> Ctx:
    """Depth 3: a root paused while its child ``mid`` still ran; ``mid``'s fan_out then
    recorded three children and started none, and the root was resumed (``ctx['mid']``):
    ``lifecycle.refill`` of ``mid`` starts two."""
    ctx = in_node(db, clock)
    lifecycle.spawn(
        db, ctx["claim"], ctx["attempt_id"], kind="subworkflow", child=child_workflow(),
        inputs=[{"item": 0}], concurrency=1, fail_fast=False, detached=False,
    )  # fmt: skip
    (mid,) = db.conn.execute(
        "SELECT run_id FROM runs WHERE parent_run_id = ?", (ctx["run_id"],)
    ).fetchone()
    claim = lifecycle.claim(db, mid, "runner-mid").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt.attempt_id
    lifecycle.pause(db, ctx["run_id"])
    lifecycle.spawn(
        db, claim, attempt, kind="fan_out", child=child_workflow(),
        inputs=[{"item": i} for i in range(3)], concurrency=2, fail_fast=False, detached=False,
    )  # fmt: skip
    lifecycle.resume(db, ctx["run_id"])
    ctx["mid"] = mid
    return ctx


def event_signalled(db: Database, clock: FakeClock) -> Ctx:
    """The event ``go`` woke the run; a second runner (``claim2``) validates it."""
    ctx = event_waiting(db, clock)
    sent = signals.send(db, ctx["run_id"], "go", {"v": 1}, idempotency_key=None, sent_by="test")
    ctx["signal_id"] = sent.signal.signal_id
    ctx["claim2"] = lifecycle.claim(db, ctx["run_id"], "runner-2").claim
    return ctx


def runner_signalled(db: Database, clock: FakeClock) -> Ctx:
    """A runner launched for a run the event ``go`` woke."""
    ctx = event_waiting(db, clock)
    sent = signals.send(db, ctx["run_id"], "go", {"v": 1}, idempotency_key=None, sent_by="test")
    ctx["signal_id"] = sent.signal.signal_id
    return launch(db, {**server_started(db, clock), **ctx})


# --- schedules ---------------------------------------------------------------------------

SCHEDULE = "nightly"


def schedule_draft(name: str = SCHEDULE, overlap: Overlap = Overlap.SKIP) -> ScheduleDraft:
    """A schedule of the test workflow ``sample`` every second, read in UTC."""
    return ScheduleDraft(
        name=name,
        workflow_spec="sample",
        workflow_name="sample",
        project_dir=None,
        input={"from": "schedule"},
        every_ms=1000,
        cron=None,
        timezone="UTC",
        overlap=overlap,
        catchup=Catchup.LATEST,
        environment=RunEnvironment(None, {"PATH": "/usr/bin:/bin"}),
    )


def schedule_added(
    db: Database, clock: FakeClock, *, overlap: Overlap = Overlap.SKIP, name: str = SCHEDULE
) -> Ctx:
    """An active schedule whose first fire time has not come yet."""
    row = schedules.add(db, schedule_draft(name, overlap=overlap))
    return {"schedule_id": row.schedule_id, "name": row.name, "fire_at": row.next_fire_at}


def schedule_paused(db: Database, clock: FakeClock) -> Ctx:
    """A paused schedule."""
    ctx = schedule_added(db, clock)
    schedules.change(db, SCHEDULE, ScheduleAction.PAUSE)
    return ctx


def schedule_paused_later(db: Database, clock: FakeClock) -> Ctx:
    """An ``allow`` schedule paused before its first fire, ten seconds of fire times ago:
    a backfill of its first three fire times may start a run for each."""
    ctx = schedule_added(db, clock, overlap=Overlap.ALLOW, name="backfilled")
    schedules.change(db, "backfilled", ScheduleAction.PAUSE)
    clock.advance(ctx["fire_at"] - clock.now_ms() + 10_000)
    return ctx


def schedule_due(db: Database, clock: FakeClock) -> Ctx:
    """An active schedule whose next fire time has just come."""
    ctx = schedule_added(db, clock)
    clock.advance(ctx["fire_at"] - clock.now_ms() + 100)
    return ctx


def schedule_behind(db: Database, clock: FakeClock) -> Ctx:
    """An active schedule ten fire times behind (a server was down): catch-up is due."""
    ctx = schedule_added(db, clock)
    clock.advance(ctx["fire_at"] - clock.now_ms() + 9_500)
    return ctx


def schedule_queued(db: Database, clock: FakeClock) -> Ctx:
    """An ``overlap queue`` schedule whose second fire is queued behind a first run that has
    just completed: the queued fire may start."""
    ctx = schedule_added(db, clock, overlap=Overlap.QUEUE, name="queued-nightly")
    clock.advance(ctx["fire_at"] - clock.now_ms() + 100)
    first = schedules.fire(db, ctx["schedule_id"], ctx["fire_at"], new_run=new_run())
    assert first.run_id is not None
    clock.advance(1000)
    second = schedules.fire(db, ctx["schedule_id"], ctx["fire_at"] + 1000, new_run=new_run())
    assert second.outcome is schedules.FireOutcome.QUEUED
    claim = lifecycle.claim(db, first.run_id, "runner-1").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt
    lifecycle.finish_node(
        db, claim, attempt.attempt_id, AttemptStatus.COMPLETED,
        Finish(RunStatus.COMPLETED, {"ok": True}), output={"ok": True},
    )  # fmt: skip
    return {**ctx, "fire_at": ctx["fire_at"] + 1000, "run_id": first.run_id}


def scheduled_run(db: Database, clock: FakeClock) -> Ctx:
    """A run a schedule started (queued), with its provenance."""
    ctx = schedule_due(db, clock)
    fired = schedules.fire(db, ctx["schedule_id"], ctx["fire_at"], new_run=new_run())
    return {**ctx, "run_id": fired.run_id}


# --- forks and upgrades -------------------------------------------------------------------

FORK_ID = "run_forked-in-a-crash"
"""The id a crashed fork scenario gives its fork (a retry after the commit finds it taken)."""
UPGRADE_KINDS = {"a": "compute", "b": "checkpoint", "c": "compute"}


def forkable(db: Database, clock: FakeClock) -> Ctx:
    """A completed run of the chain a, b (its ``ledger`` effect applied), c, d, with the run
    a fork of it runs (``fork_run``) and the id it gets (``fork_id``)."""
    run_id = lifecycle.reserve(db, chain_run()).run_id
    walk(db, lifecycle.claim(db, run_id, "runner-f").claim, ["a", "b", "c", "d"])
    return {"run_id": run_id, "fork_id": FORK_ID, "fork_run": chain_run()}


def retryable(db: Database, clock: FakeClock) -> Ctx:
    """A run of the chain that failed at c (a and b settled, b's ``ledger`` effect applied),
    with the run a retry of it runs (``fork_run``) and the id it gets (``fork_id``)."""
    run_id = lifecycle.reserve(db, chain_run()).run_id
    claim = lifecycle.claim(db, run_id, "runner-r").claim
    last = walk_until(db, claim, ["a", "b", "c"])
    lifecycle.finish_node(
        db, claim, last, AttemptStatus.FAILED, Finish(RunStatus.FAILED, error="boom"),
        error="boom",
    )  # fmt: skip
    return {"run_id": run_id, "fork_id": FORK_ID, "fork_run": chain_run()}


def upgradable(db: Database, clock: FakeClock) -> Ctx:
    """A run waiting on a checkpoint at b (a settled) whose workflow code changed since:
    ``new_run`` is the same graph at another source revision."""
    run_id = lifecycle.reserve(db, chain_run(kinds=UPGRADE_KINDS, effect_on=None)).run_id
    claim = lifecycle.claim(db, run_id, "runner-u").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt
    nxt = lifecycle.finish_node(
        db, claim, attempt.attempt_id, AttemptStatus.COMPLETED, lifecycle.GoTo("b"),
        output={"node": "a"}, start_next=True,
    ).next_attempt  # fmt: skip
    assert nxt is not None
    _, request_id = lifecycle.wait(
        db, claim, nxt.attempt_id, InteractionDraft("checkpoint", {"q": 1})
    )
    new = chain_run(kinds=UPGRADE_KINDS, effect_on=None, revision="test-2")
    return {"run_id": run_id, "claim": claim, "request_id": request_id, "new_run": new}


def forked(db: Database, clock: FakeClock) -> Ctx:
    """A queued fork (at c) of a completed run of the chain; ``source`` is that run."""
    ctx = forkable(db, clock)
    fork_id = forks.fork(db, ctx["run_id"], "c", ctx["fork_run"]).result.run_id
    return {"run_id": fork_id, "source": ctx["run_id"]}


def upgraded(db: Database, clock: FakeClock) -> Ctx:
    """A run upgraded while it waited on its checkpoint (queued to present it again)."""
    ctx = upgradable(db, clock)
    upgrades.upgrade(db, ctx["run_id"], ctx["new_run"])
    return ctx


def restarted_fork(db: Database, clock: FakeClock) -> Ctx:
    """A fork that completed and was restarted: queued at its fork point in round 1."""
    ctx = forked(db, clock)
    walk(db, lifecycle.claim(db, ctx["run_id"], "runner-r").claim, ["c", "d"], effect_on=None)
    lifecycle.restart(db, ctx["run_id"])
    return ctx
