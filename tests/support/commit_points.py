"""Crash scenarios for every declared commit point: a prepared state and one transaction.

Each ``Scenario`` names a declared transaction (``point``, see ``store/faults.py``), builds
a state with ``prepare`` (``support.crash_states``) and performs that transaction with
``run``; ``tests/store/test_commit_points.py`` crashes it just before and just after its
commit, by an exception in-process and by the exit of a forked child. ``kind`` says how the
transaction is reached: ``store`` (a store call), ``command`` (``receipts.run_command``
with the handler's store change inside, retried with the same idempotency key) or
``runner`` (``server.runner_messages.answer``, whose reply is stored with the change).
``event`` is the event type one commit appends (``events`` of them); ``writes`` is False
for the transactions that only read; ``again`` marks the ``store`` transactions that a
client, a session, the operator or the scheduler issues again after a server restart (the
others belong to the server that died, and its successor's recovery takes over).

Run as a script (``python tests/support/commit_points.py``) it lists every declared
commit point, what its commit makes durable and the scenarios that crash it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

if __name__ == "__main__":  # pragma: no cover - listing entry
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pi_workflows.server.app  # noqa: F401 - declares every server commit point
from pi_workflows.protocol import CLIENT_SCHEMA, Request
from pi_workflows.server.handlers.registry import stored_receipt
from pi_workflows.store import (
    agents,
    attempt_logs,
    cleanups,
    delivery,
    diagnose,
    faults,
    follow_ups,
    forks,
    interaction_writes,
    interactions,
    lifecycle,
    progress,
    published,
    receipts,
    retention,
    runners,
    schedule_manual,
    schedules,
    seat_feed,
    sent_signals,
    sessions,
    settings,
    signals,
    takeover,
    telemetry,
    upgrades,
)
from pi_workflows.store.claims import renew
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.effect_writes import (
    keep_receipt,
    reserve_effect,
    resolve_effect,
    settle_effect,
)
from pi_workflows.store.effects import EffectStatus
from pi_workflows.store.interactions import InteractionDraft
from pi_workflows.store.lifecycle import Finish, GoTo
from pi_workflows.store.receipts import Receipt
from pi_workflows.store.runs import write_run
from pi_workflows.store.schedules import ScheduleAction
from pi_workflows.store.states import AttemptStatus, ParkReason, RunStatus

from support import crash_states as st
from support.crash_states import (
    CHECKPOINT,
    CLIENT,
    CRASH_MESSAGE,
    FAKE_PID,
    FAKE_START,
    MODEL_KINDS,
    SESSION,
    Ctx,
)
from support.store import new_run

Kind = Literal["store", "command", "runner"]
Change = Callable[[Database, Ctx], tuple[str | None, dict[str, Any]]]
Run = Callable[[Database, FakeClock, Ctx], object]


@dataclasses.dataclass(frozen=True)
class Scenario:
    """``prepare`` builds the state; ``run`` performs the transaction named ``point``."""

    name: str
    point: str
    kind: Kind
    prepare: Callable[[Database, FakeClock], Ctx]
    run: Run
    event: str | None = None
    writes: bool = True
    again: bool = False
    events: int = 1  # events of type ``event`` one commit appends (a tree cancel: one a run)


# --- store operations ---------------------------------------------------------------------


def _finish(claim_key: str = "claim", *, accept: bool = False, end: bool = False) -> Run:
    """Finish the active attempt: route to ``b`` and start it, or (``end``) complete the run."""

    def run(db: Database, clock: FakeClock, x: Ctx) -> object:
        step = Finish(RunStatus.COMPLETED, 1) if end else GoTo("b")
        return lifecycle.finish_node(
            db,
            x[claim_key],
            x["attempt_id"],
            AttemptStatus.COMPLETED,
            step,
            output={"a": 1},
            start_next=not end,
            submission_id=x["submission_id"] if accept else None,
        )

    return run


def _wait(db: Database, clock: FakeClock, x: Ctx) -> object:
    return lifecycle.wait(db, x["claim"], x["attempt_id"], InteractionDraft("checkpoint", {}))


def _reserve_effect(db: Database, clock: FakeClock, x: Ctx) -> object:
    return reserve_effect(
        db, x["claim"], attempt_id=x["attempt_id"], effect_type="ledger",
        effect_kind="idempotent", fingerprint="fp-1",
    )  # fmt: skip


def _settle_effect(db: Database, clock: FakeClock, x: Ctx) -> object:
    return settle_effect(db, x["claim"], x["effect_id"], EffectStatus.APPLIED, result={"ok": 1})


def _keep_receipt(db: Database, clock: FakeClock, x: Ctx) -> object:
    """The receipt of a settle the server refused, kept (``runner_messages._keep_receipt``);
    once kept, the same receipt again finds nothing to keep and changes nothing."""
    return keep_receipt(
        db, x["run_id"], x["claim"].generation, x["effect_id"], EffectStatus.APPLIED,
        result={"ok": 1}, refused="revisionConflict",
    )  # fmt: skip


def _submit(db: Database, clock: FakeClock, x: Ctx) -> object:
    return interaction_writes.submit(
        db, x["request_id"], {"a": 1}, kinds=CHECKPOINT, submitted_by="test"
    )


def _report_messages(db: Database, clock: FakeClock, x: Ctx) -> object:
    present = [(x["message_id"], "entry-1")]
    return sessions.report_messages(db, SESSION, x["epoch"], present, idle=False)


def _report_aborted_turn(db: Database, clock: FakeClock, x: Ctx) -> object:
    return sessions.report_turn(
        db, SESSION, x["epoch"], event="ended", stop_reason="aborted", workflow_message_id=None
    )


def _request(db: Database, x: Ctx) -> Any:
    request = interactions.read_request(db.conn, x["request_id"])
    assert request is not None
    return request


def _present_again(db: Database, clock: FakeClock, x: Ctx) -> object:
    return delivery.present_again(db, _request(db, x), delivery.TURN_LOST)


def _turn_failed(db: Database, clock: FakeClock, x: Ctx) -> object:
    return delivery.turn_failed(
        db, _request(db, x), "500: upstream failed", retries=3, backoff_ms=1_000, detached=False
    )


def _nudge(db: Database, clock: FakeClock, x: Ctx) -> object:
    return delivery.nudge(db, _request(db, x), prompt=True)


def _register_process(db: Database, clock: FakeClock, x: Ctx) -> object:
    runners.register_process(db, x["claim"], x["runner_epoch"], FAKE_PID, FAKE_START, "sleep 1")
    return None


def _lookup(db: Database, clock: FakeClock, x: Ctx) -> object:
    """The handlers' ``stored_receipt`` for the stored pause command."""
    request = Request(
        schema=CLIENT_SCHEMA,
        request_id="req-retry",
        client_id=CLIENT,
        operation="run.pause",
        idempotency_key="key-run.pause",
        run_id=x["run_id"],
    )
    found = stored_receipt(SimpleNamespace(db=db), request)  # type: ignore[arg-type]
    if found is None:
        raise AssertionError("the stored receipt was not found")
    return found


# --- client commands: the handler's store change inside run_command ----------------------


def _command(operation: str, change: Change, payload: Callable[[Ctx], Any] | None = None) -> Run:
    """Run ``operation`` as its handler does: the store change inside ``run_command``."""

    def run(db: Database, clock: FakeClock, x: Ctx) -> Receipt:
        request = st.command_request(operation, x, payload(x) if payload else None)
        return receipts.run_command(db, request, lambda: change(db, x))

    return run


def _start(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    result = lifecycle.reserve(db, new_run())
    return result.run_id, {"runId": result.run_id, "revision": result.revision}


def _resume(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    lifecycle.resume(db, x["run_id"])
    return st.status_body(db, x["run_id"])


def _cancel(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    lifecycle.cancel(db, x["run_id"], claim=x["claim"], reason="cancelled by request")
    return st.status_body(db, x["run_id"])


def _restart(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    lifecycle.restart(db, x["run_id"])
    return st.status_body(db, x["run_id"])


def _fork(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    forked = forks.fork(db, x["run_id"], "c", x["fork_run"])
    return forked.result.run_id, {"runId": forked.result.run_id, "sourceRunId": x["run_id"]}


def _retry_run(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    forked = forks.retry(db, x["run_id"], x["fork_run"], run_id=x["fork_id"])
    return forked.result.run_id, {"runId": forked.result.run_id, "sourceRunId": x["run_id"]}


def _upgrade(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    result, plan = upgrades.upgrade(db, x["run_id"], x["new_run"])
    return x["run_id"], {**plan.to_json(), "revision": result.revision}


def _submission(kinds: frozenset[str]) -> Change:
    def change(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
        submitted = interaction_writes.submit(
            db, x["request_id"], {"answer": 1}, kinds=kinds, submitted_by=f"client:{CLIENT}"
        )
        return x["run_id"], {
            "runId": x["run_id"],
            "submissionId": submitted.submission_id,
            "revision": submitted.result.revision,
        }

    return change


def _decide(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    result = interaction_writes.answer_decision(
        db, x["request_id"], "yes", answered_by=f"client:{CLIENT}"
    )
    return x["run_id"], {"runId": x["run_id"], "choice": "yes", "revision": result.revision}


def _refuse(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    result = seat_feed.record_refusal(
        db, x["run_id"], x["request_id"], seat="channel:phone", person="telegram user 9",
        reason="not on the channel's allow list",
    )  # fmt: skip
    return x["run_id"], {"runId": x["run_id"], "revision": result.revision}


def _update(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    result = write_run(
        db,
        x["run_id"],
        name="interactions.update",
        event_type="interaction.update",
        event_data={"requestId": x["request_id"], "body": {"progress": 1}},
        claim=None,
        apply=lambda tx, run: None,
    )
    return x["run_id"], {"runId": x["run_id"], "revision": result.revision}


def _resolve(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    result = resolve_effect(db, x["effect_id"], "applied", result={"resolved": True})
    return result.run_id, {"effectId": x["effect_id"], "revision": result.revision}


def _attach(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    attached = sessions.attach(db, SESSION)
    return None, {"sessionId": SESSION, "coordinatorEpoch": attached.coordinator_epoch}


def _schedule_add(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    row = schedules.add(db, st.schedule_draft())
    return None, {"scheduleId": row.schedule_id, "status": row.status.value}


def _schedule_change(action: ScheduleAction) -> Change:
    def change(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
        row = schedules.change(db, x["name"], action)
        return None, {"scheduleId": row.schedule_id, "status": row.status.value}

    return change


def _fire(*, error: str | None = None) -> Run:
    """The scheduler's fire of the due time (a run, or a failed fire with ``error``); once
    committed, the same fire again finds the time fired and writes nothing."""

    def run(db: Database, clock: FakeClock, x: Ctx) -> object:
        made = None if error is not None else new_run()
        return schedules.fire(db, x["schedule_id"], x["fire_at"], new_run=made, error=error)

    return run


def _trigger(db: Database, clock: FakeClock, x: Ctx) -> object:
    return schedule_manual.trigger(db, x["name"], key="k-1", new_run=new_run())


def _backfill(db: Database, clock: FakeClock, x: Ctx) -> object:
    times = schedule_manual.check_window(db, x["name"], x["fire_at"], x["fire_at"] + 2_000)
    return schedule_manual.backfill(db, x["name"], times, new_run=new_run())


def _trigger_change(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    fire = schedule_manual.trigger(db, x["name"], key=None, new_run=new_run())
    return fire.run_id, {"fire": fire.to_json()}


def _backfill_change(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    times = schedule_manual.check_window(db, x["name"], x["fire_at"], x["fire_at"] + 2_000)
    done = schedule_manual.backfill(db, x["name"], times, new_run=new_run())
    return None, {"fires": [fire.to_json() for fire in done.fires], "already": done.already}


def _start_queued(db: Database, clock: FakeClock, x: Ctx) -> object:
    return schedules.start_queued(db, x["schedule_id"], x["fire_at"], new_run=new_run())


# --- runner proposals ---------------------------------------------------------------------


def _runner(kind: str, payload: Callable[[Ctx], dict[str, Any]]) -> Run:
    """Send the crash message ``kind`` as the runner recorded in the context."""

    def run(db: Database, clock: FakeClock, x: Ctx) -> object:
        return st.say(db, x, kind, payload(x), CRASH_MESSAGE)

    return run


def _node_finish(x: Ctx) -> dict[str, Any]:
    return {
        "attemptId": x["attempt_id"],
        "outcome": "completed",
        "output": {"n": 1},
        "next": {"type": "goto", "nodeId": "b"},
        "startNext": True,
    }


def _node_wait(x: Ctx) -> dict[str, Any]:
    return {"attemptId": x["attempt_id"], "kind": "checkpoint", "request": {"q": 1}}


def _effect_settle(x: Ctx) -> dict[str, Any]:
    return {"effectId": x["effect_id"], "status": "applied", "result": {"ok": 1}}


def _retry(delay_ms: int, *, exhausted: bool = False) -> Run:
    def run(db: Database, clock: FakeClock, x: Ctx) -> object:
        return lifecycle.retry(
            db, x["claim"], x["attempt_id"], AttemptStatus.FAILED, "flaky", delay_ms=delay_ms,
            exhausted=exhausted,
        )  # fmt: skip

    return run


def _send_signal(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    sent = signals.send(db, x["run_id"], "go", {"v": 1}, idempotency_key="k-1", sent_by="test")
    return x["run_id"], {"runId": x["run_id"], "signalId": sent.signal.signal_id}


def _queue_follow_up(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    queued, _ = follow_ups.queue(db, x["run_id"], "and then this", created_by="test")
    return x["run_id"], {"runId": x["run_id"], "followUpId": queued.follow_up_id}


def _remove_follow_up(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    follow_ups.remove(db, x["follow_up_id"])
    return x["run_id"], {"runId": x["run_id"], "followUpId": x["follow_up_id"]}


def _change_settings(db: Database, x: Ctx) -> tuple[str | None, dict[str, Any]]:
    made = settings.change(db, x["run_id"], st.SETTINGS_PATCH, client_id=st.CLIENT)
    return x["run_id"], {"runId": x["run_id"], "change": made.change}


def _reject(x: Ctx) -> dict[str, Any]:
    return {"submissionId": x["submission_id"], "error": "not good enough"}


# --- the table ----------------------------------------------------------------------------

S = Scenario
SCENARIOS: list[Scenario] = [
    # Lifecycle transitions.
    S("reserve", "lifecycle.reserve", "store", lambda db, c: {},
      lambda db, c, x: lifecycle.reserve(db, new_run()), "run.reserved", again=True),
    S("claim", "lifecycle.claim", "store", st.queued,
      lambda db, c, x: lifecycle.claim(db, x["run_id"], "runner-1"), "run.claimed"),
    S("control_claim", "lifecycle.control_claim", "store", st.expired,
      lambda db, c, x: lifecycle.control_claim(db, x["run_id"]), "run.controlClaimed"),
    S("fence", "lifecycle.fence", "store", st.in_node,
      lambda db, c, x: lifecycle.live_or_control(db, x["run_id"], x["claim"]), writes=False),
    S("start_node", "lifecycle.start_node", "store", st.running,
      lambda db, c, x: lifecycle.start_node(db, x["claim"], "a"), "node.started"),
    S("finish_node", "lifecycle.finish_node", "store", st.in_node, _finish(), "node.finished"),
    S("settings_change", "settings.change", "store", st.settings_in_node,
      lambda db, c, x: settings.change(db, x["run_id"], st.SETTINGS_PATCH), "settings.changed",
      again=True),
    S("settings_reevaluate", "settings.reevaluate", "store", st.settings_stale_route,
      lambda db, c, x: settings.reevaluate(db, x["claim"], x["attempt_id"]),
      "node.reevaluated"),
    S("finish_run", "lifecycle.finish_node", "store", st.in_node, _finish(end=True),
      "run.completed"),
    S("accept", "lifecycle.finish_node", "store", st.validating, _finish("claim2", accept=True),
      "node.finished"),
    S("wait", "lifecycle.wait", "store", st.in_node, _wait, "run.waiting"),
    S("park", "lifecycle.park", "store", st.in_node,
      lambda db, c, x: lifecycle.park(db, x["claim"], ParkReason.SERVER_STOPPED), "run.parked"),
    S("pause", "lifecycle.pause", "store", st.queued,
      lambda db, c, x: lifecycle.pause(db, x["run_id"]), "run.paused", again=True),
    S("pause_waiting", "lifecycle.pause", "store", st.waiting,
      lambda db, c, x: lifecycle.pause_waiting(db, x["run_id"], ParkReason.TURN_ABORTED),
      "run.paused"),
    S("resume", "lifecycle.resume", "store", st.paused,
      lambda db, c, x: lifecycle.resume(db, x["run_id"]), "run.resumed", again=True),
    S("complete", "lifecycle.complete", "store", st.running,
      lambda db, c, x: lifecycle.complete(db, x["claim"], {"ok": 1}), "run.completed"),
    S("fail", "lifecycle.fail", "store", st.in_node,
      lambda db, c, x: lifecycle.fail(db, x["claim"], "boom"), "run.failed"),
    S("time_out", "lifecycle.time_out", "store", st.in_node,
      lambda db, c, x: lifecycle.time_out(db, x["claim"], "late"), "run.timed_out"),
    S("cancel_live", "lifecycle.cancel", "store", st.in_node,
      lambda db, c, x: lifecycle.cancel(db, x["run_id"], claim=x["claim"]), "run.cancelled"),
    S("cancel_expired", "lifecycle.cancel", "store", st.expired,
      lambda db, c, x: lifecycle.cancel(db, x["run_id"]), "run.cancelled"),
    S("cancel_queued", "lifecycle.cancel", "store", st.queued,
      lambda db, c, x: lifecycle.cancel(db, x["run_id"]), "run.cancelled", again=True),
    S("expire_in_node", "lifecycle.expire", "store", st.past_deadline,
      lambda db, c, x: lifecycle.expire(db, x["run_id"], claim=x["claim"]), "run.timed_out",
      again=True),
    S("expire_tree", "lifecycle.expire", "store", st.tree_past_deadline,
      lambda db, c, x: lifecycle.expire(
          db, x["run_id"], claims={x["children"][0]: x["child_claim"]}
      ), "run.timed_out", again=True),
    S("cancel_into_cleanup", "lifecycle.cancel", "store", st.cleanup_in_node,
      lambda db, c, x: lifecycle.cancel(db, x["run_id"], claim=x["claim"], reason="stop"),
      "run.cleanup_started"),
    S("finish_cleanup", "lifecycle.finish_node", "store", st.cleaning_up,
      lambda db, c, x: lifecycle.finish_node(
          db, x["claim"], x["attempt_id"], AttemptStatus.COMPLETED,
          Finish(RunStatus.CANCELLED, None), output={"tidy": True},
      ), "run.cancelled"),
    S("give_up_cleanup", "cleanups.give_up", "store", st.cleaning_up,
      lambda db, c, x: cleanups.give_up(db, x["claim"], "it kept crashing"), "run.cancelled"),
    S("restart", "lifecycle.restart", "store", st.failed,
      lambda db, c, x: lifecycle.restart(db, x["run_id"]), "run.restarted", again=True),
    S("fork", "lifecycle.fork", "store", st.forkable,
      lambda db, c, x: forks.fork(db, x["run_id"], "c", x["fork_run"], run_id=x["fork_id"]),
      "run.forked", again=True),
    S("fork_set_outputs", "lifecycle.fork", "store", st.forkable,
      lambda db, c, x: forks.fork(db, x["run_id"], "c", x["fork_run"], run_id=x["fork_id"],
                                  outputs={"a": {"node": "set"}}),
      "run.forked", again=True),
    S("retry_fork", "lifecycle.fork", "store", st.retryable,
      lambda db, c, x: forks.retry(db, x["run_id"], x["fork_run"], run_id=x["fork_id"]),
      "run.forked", again=True),
    S("upgrade", "lifecycle.upgrade", "store", st.upgradable,
      lambda db, c, x: upgrades.upgrade(db, x["run_id"], x["new_run"]), "run.upgraded",
      again=True),
    S("recover", "lifecycle.recover", "store", st.expired,
      lambda db, c, x: takeover.recover(db, x["run_id"]), "run.recovered"),
    S("recover_applying", "lifecycle.recover", "store", st.applying,
      lambda db, c, x: takeover.recover(db, x["run_id"], claim=x["claim"]), "run.recovered"),
    S("time_out_node", "lifecycle.time_out_node", "store", st.node_late,
      lambda db, c, x: takeover.time_out_node(db, x["claim"], x["attempt_id"], "late"),
      "node.timedOut"),
    S("expire_request", "lifecycle.expire_request", "store", st.request_late,
      lambda db, c, x: takeover.expire_request(db, x["request_id"]), "interaction.timedOut"),
    S("release_dead_claims", "lifecycle.release_dead_claims", "store", st.dead_server_claim,
      lambda db, c, x: takeover.release_claims_of_dead_servers(db, x["server_epoch"])),
    # Durable waits.
    S("sleep", "lifecycle.sleep", "store", st.in_node,
      lambda db, c, x: lifecycle.sleep(db, x["claim"], x["attempt_id"], delay_ms=1_000),
      "run.waiting"),
    S("retry_later", "lifecycle.retry", "store", st.in_node, _retry(1_000), "node.retried"),
    S("retry_now", "lifecycle.retry", "store", st.in_node, _retry(0), "node.retried"),
    S("retry_exhausted", "lifecycle.retry", "store", st.in_node, _retry(0, exhausted=True),
      "run.parked"),
    S("await_event", "lifecycle.await_event", "store", st.in_node,
      lambda db, c, x: lifecycle.await_event(db, x["claim"], x["attempt_id"], "go",
                                             timeout_ms=60_000, validates=False),
      "run.waiting"),
    S("spawn", "lifecycle.spawn", "store", st.in_node,
      lambda db, c, x: lifecycle.spawn(db, x["claim"], x["attempt_id"], kind="fan_out",
                                       child=st.child_workflow(),
                                       inputs=[{"item": i} for i in range(3)], concurrency=2,
                                       fail_fast=False, detached=False),
      "run.waiting"),
    S("last_child_ends", "lifecycle.finish_node", "store", st.last_child_running,
      lambda db, c, x: lifecycle.finish_node(db, x["child_claim"], x["child_attempt"],
                                             AttemptStatus.COMPLETED,
                                             Finish(RunStatus.COMPLETED, {"done": 1}),
                                             output={"done": 1}),
      "run.completed"),
    S("refill", "lifecycle.refill", "store", st.held_back,
      lambda db, c, x: lifecycle.refill(db, x["mid"]), "children.refilled", again=True),
    S("cancel_parent_tree", "lifecycle.cancel", "store", st.joining,
      lambda db, c, x: lifecycle.cancel(db, x["run_id"]), "run.cancelled", again=True,
      events=3),
    S("fire_waits", "waits.fire", "store", st.sleep_due,
      lambda db, c, x: takeover.fire_due_waits(db), "wait.fired", again=True),
    S("fire_paced_join", "waits.fire", "store", st.paced_due,
      lambda db, c, x: takeover.fire_due_waits(db), "wait.fired", again=True),
    S("signal_send", "signals.send", "store", st.event_waiting,
      lambda db, c, x: signals.send(db, x["run_id"], "go", {"v": 1}, idempotency_key="k-1",
                                    sent_by="test"),
      "signal.woke", again=True),
    S("signal_reject", "signals.reject", "store", st.event_signalled,
      lambda db, c, x: signals.reject(db, x["claim2"], x["signal_id"], "not that one"),
      "signal.rejected"),
    # Managed effects.
    S("effect_reserve", "effects.reserve", "store", st.in_node, _reserve_effect,
      "effect.reserved"),
    S("effect_settle", "effects.settle", "store", st.applying, _settle_effect, "effect.settled"),
    S("effect_keep", "effects.keep", "store", st.applying, _keep_receipt, "effect.kept"),
    S("effect_resolve", "effects.resolve", "store", st.ambiguous,
      lambda db, c, x: resolve_effect(db, x["effect_id"], "applied", result={"ok": 1}),
      "effect.resolved", again=True),
    # Interactive requests.
    S("submit", "interactions.submit", "store", st.waiting, _submit, "interaction.submitted",
      again=True),
    S("reject", "interactions.reject", "store", st.validating,
      lambda db, c, x: interaction_writes.reject(db, x["claim2"], x["submission_id"], "no"),
      "interaction.rejected"),
    S("abandon", "interactions.abandon", "store", st.validating,
      lambda db, c, x: interaction_writes.abandon(db, x["claim2"], "the runner died"),
      "interaction.abandoned"),
    S("decide", "interactions.decide", "store", st.deciding,
      lambda db, c, x: interaction_writes.answer_decision(db, x["request_id"], "yes",
                                                          answered_by="test"),
      "interaction.answered", again=True),
    S("refuse", "seat_feed.refusal", "store", st.deciding,
      lambda db, c, x: _refuse(db, x), "decision.refused", again=True),
    # Origin sessions and headless agents.
    S("session_attach", "sessions.attach", "store", st.queued,
      lambda db, c, x: sessions.attach(db, SESSION), again=True),
    S("report_messages", "sessions.report_messages", "store", st.session_step,
      _report_messages, "message.sent", again=True),
    S("report_result_releases_follow_ups", "sessions.report_messages", "store",
      st.follow_up_result_pending, _report_messages, "message.sent", again=True),
    S("queue_follow_up", "follow_ups.change", "store", st.follow_up_queued,
      lambda db, c, x: follow_ups.queue(db, x["run_id"], "and then this"), "followUp.queued",
      again=True),
    S("remove_follow_up", "follow_ups.change", "store", st.follow_up_queued,
      lambda db, c, x: follow_ups.remove(db, x["follow_up_id"]), "followUp.removed",
      again=True),
    S("report_turn", "sessions.report_turn", "store", st.session_turn, _report_aborted_turn,
      "run.paused"),
    S("session_disconnect", "sessions.disconnect", "store", st.session_step,
      lambda db, c, x: sessions.disconnected(db, SESSION, x["epoch"]), again=True),
    S("turn_lost", "delivery.turn_lost", "store", st.session_turn,
      lambda db, c, x: delivery.close_turns(db, SESSION, sessions.seat_of(db.conn, SESSION)),
      "turn.lost", again=True),
    S("present_again", "delivery.present_again", "store", st.session_turn, _present_again,
      "step.represented", again=True),
    S("retry_due", "delivery.retry_due", "store", st.session_turn, _turn_failed,
      "step.retryDue"),
    S("drop_due", "delivery.drop_due", "store", st.paused_retry_due,
      lambda db, c, x: delivery.fire_due(db), again=True),
    S("nudge", "delivery.nudge", "store", st.session_turn, _nudge, "agent.nudged"),
    S("agent_started", "agents.started", "store", st.queued,
      lambda db, c, x: agents.record_started(db, x["run_id"], "detached", 1, FAKE_PID,
                                             FAKE_START)),
    S("agent_ended", "agents.ended", "store", st.agent_live,
      lambda db, c, x: agents.record_ended(db, x["agent_id"], 0, "bye")),
    # Server and runner records.
    S("server_epoch", "server.epoch", "store", lambda db, c: {},
      lambda db, c, x: runners.bump_server_epoch(db, FAKE_PID)),
    S("runner_launch", "runners.launch", "store", st.queued_for_launch,
      lambda db, c, x: st.launch(db, x), "run.claimed"),
    S("runner_spawned", "runners.spawned", "store", st.launched,
      lambda db, c, x: runners.mark_spawned(db, x["runner_epoch"], FAKE_PID, FAKE_START)),
    S("runner_ready", "runners.ready", "store", st.launched,
      lambda db, c, x: runners.mark_ready(db, x["runner_epoch"], x["revision"])),
    S("runner_exited", "runners.exited", "store", st.registered,
      lambda db, c, x: runners.mark_exited(db, x["runner_epoch"], "crashed", exit_code=1)),
    S("process_register", "runners.process", "store", st.runner_in_node, _register_process),
    S("process_ended", "runners.process_ended", "store", st.registered,
      lambda db, c, x: runners.end_process(db, x["runner_epoch"], FAKE_PID)),
    S("claim_renew", "claims.renew", "store", st.running_later,
      lambda db, c, x: renew(db, x["claim"])),
    S("attempt_logs", "attempt_logs.record", "store", st.in_node,
      lambda db, c, x: attempt_logs.record(db, x["claim"], x["attempt_id"], "hi\n", 3, None),
      "node.logs"),
    S("progress_first", "progress.record", "store", st.in_node,
      lambda db, c, x: progress.record(db, x["claim"], x["attempt_id"], {"pct": 10}),
      "node.update"),
    S("progress_latest", "progress.record", "store", st.in_node_progress,
      lambda db, c, x: progress.record(db, x["claim"], x["attempt_id"], {"pct": 20})),
    S("sent_signal", "sent_signals.send", "store", st.in_node_and_target,
      lambda db, c, x: sent_signals.send(db, x["claim"], x["attempt_id"], x["target"], "go",
                                         {"v": 1}, "k-1"),
      "effect.settled"),
    S("published_publish", "published.publish", "store", st.in_node,
      lambda db, c, x: published.publish(db, x["claim"], x["attempt_id"], "url", "https://x"),
      "value.published"),
    # Maintenance.
    S("repair_project", "repair.project", "store", st.viewer_stale,
      lambda db, c, x: diagnose.repair(db), again=True),
    S("repair_run", "repair.run", "store", st.queue_stale,
      lambda db, c, x: diagnose.repair(db), "state.repaired", again=True),
    S("receipts_prune", "receipts.prune", "store", st.receipt_of_ended_run,
      lambda db, c, x: receipts.prune(db, c.now_ms()), again=True),
    S("retention_prune", "retention.prune", "store", st.ended_long_ago,
      lambda db, c, x: retention.prune(db, c.now_ms()), again=True),
    # OpenTelemetry export (the server's exporter saves its cursor after a batch).
    S("telemetry_cursor", "telemetry.cursor", "store", st.completed,
      lambda db, c, x: telemetry.save_cursor(db, "otlp", 2), again=True),
    # Schedules.
    S("schedule_add", "schedules.change", "store", lambda db, c: {},
      lambda db, c, x: schedules.add(db, st.schedule_draft()), again=True),
    S("schedule_pause", "schedules.change", "store", st.schedule_added,
      lambda db, c, x: schedules.change(db, x["name"], ScheduleAction.PAUSE), again=True),
    S("schedule_delete", "schedules.change", "store", st.schedule_queued,
      lambda db, c, x: schedules.change(db, x["name"], ScheduleAction.DELETE), again=True),
    S("schedule_catch_up", "schedules.catch_up", "store", st.schedule_behind,
      lambda db, c, x: schedules.catch_up(db, x["schedule_id"], c.now_ms()), again=True),
    S("schedule_fire", "schedules.fire", "store", st.schedule_due, _fire(), "run.reserved",
      again=True),
    S("schedule_fire_failed", "schedules.fire", "store", st.schedule_due,
      _fire(error="workflowNotFound: no workflow named sample"), again=True),
    S("schedule_start_queued", "schedules.start_queued", "store", st.schedule_queued,
      _start_queued, "run.reserved", again=True),
    S("schedule_trigger", "schedules.trigger", "store", st.schedule_added, _trigger,
      "run.reserved", again=True),
    S("schedule_backfill", "schedules.backfill", "store", st.schedule_paused_later, _backfill,
      "run.reserved", again=True, events=3),
    # Client commands.
    S("command_lookup", "command.lookup", "store", st.answered_command, _lookup, writes=False,
      again=True),
    S("run_start", "command.run.start", "command", lambda db, c: {},
      _command("run.start", _start), "run.reserved"),
    S("run_pause", "command.run.pause", "command", st.queued,
      _command("run.pause", st.pause_change), "run.paused"),
    S("run_resume", "command.run.resume", "command", st.user_paused,
      _command("run.resume", _resume), "run.resumed"),
    S("run_cancel", "command.run.cancel", "command", st.in_node,
      _command("run.cancel", _cancel), "run.cancelled"),
    S("run_restart", "command.run.restart", "command", st.failed,
      _command("run.restart", _restart), "run.restarted"),
    S("run_fork", "command.run.fork", "command", st.forkable,
      _command("run.fork", _fork, lambda x: {"fromNode": "c"}), "run.forked"),
    S("run_retry", "command.run.retry", "command", st.retryable,
      _command("run.retry", _retry_run), "run.forked"),
    S("run_upgrade", "command.run.upgrade", "command", st.upgradable,
      _command("run.upgrade", _upgrade), "run.upgraded"),
    S("checkpoint_answer", "command.checkpoint.answer", "command", st.waiting,
      _command("checkpoint.answer", _submission(CHECKPOINT), lambda x: {"value": 1}),
      "interaction.submitted"),
    S("interaction_submit", "command.interaction.submit", "command", st.waiting_on_agent,
      _command("interaction.submit", _submission(MODEL_KINDS), lambda x: {"output": 1}),
      "interaction.submitted"),
    S("decision_answer", "command.decision.answer", "command", st.deciding,
      _command("decision.answer", _decide, lambda x: {"choice": "yes"}),
      "interaction.answered"),
    S("decision_refuse", "command.decision.refuse", "command", st.deciding,
      _command("decision.refuse", _refuse, lambda x: {"requestId": x["request_id"]}),
      "decision.refused"),
    S("interaction_update", "command.interaction.update", "command", st.waiting,
      _command("interaction.update", _update, lambda x: {"requestId": x["request_id"]}),
      "interaction.update"),
    S("effect_resolve_command", "command.effect.resolve", "command", st.ambiguous,
      _command("effect.resolve", _resolve, lambda x: {"effectId": x["effect_id"]}),
      "effect.resolved"),
    S("session_attach_command", "command.session.attach", "command", lambda db, c: {},
      _command("session.attach", _attach, lambda x: {"sessionId": SESSION})),
    S("run_signal", "command.run.signal", "command", st.event_waiting,
      _command("run.signal", _send_signal, lambda x: {"name": "go", "data": {"v": 1}}),
      "signal.woke"),
    S("schedule_add_command", "command.schedule.add", "command", lambda db, c: {},
      _command("schedule.add", _schedule_add, lambda x: {"name": st.SCHEDULE})),
    S("schedule_pause_command", "command.schedule.pause", "command", st.schedule_added,
      _command("schedule.pause", _schedule_change(ScheduleAction.PAUSE),
               lambda x: {"name": x["name"]})),
    S("schedule_resume_command", "command.schedule.resume", "command", st.schedule_paused,
      _command("schedule.resume", _schedule_change(ScheduleAction.RESUME),
               lambda x: {"name": x["name"]})),
    S("schedule_trigger_command", "command.schedule.trigger", "command", st.schedule_added,
      _command("schedule.trigger", _trigger_change, lambda x: {"name": x["name"]}),
      "run.reserved"),
    S("schedule_backfill_command", "command.schedule.backfill", "command",
      st.schedule_paused_later,
      _command("schedule.backfill", _backfill_change,
               lambda x: {"name": x["name"], "from": x["fire_at"], "to": x["fire_at"] + 2_000}),
      "run.reserved", events=3),
    S("schedule_delete_command", "command.schedule.delete", "command", st.schedule_added,
      _command("schedule.delete", _schedule_change(ScheduleAction.DELETE),
               lambda x: {"name": x["name"]})),
    S("run_follow_up", "command.run.followUp", "command", st.follow_up_queued,
      _command("run.followUp", _queue_follow_up, lambda x: {"text": "and then this"}),
      "followUp.queued"),
    S("run_remove_follow_up", "command.run.removeFollowUp", "command", st.follow_up_queued,
      _command("run.removeFollowUp", _remove_follow_up,
               lambda x: {"followUpId": x["follow_up_id"]}),
      "followUp.removed"),
    S("run_change_settings", "command.run.changeSettings", "command", st.settings_in_node,
      _command("run.changeSettings", _change_settings, lambda x: {"patch": st.SETTINGS_PATCH}),
      "settings.changed"),
    # Runner proposals.
    S("runner_node_start", "runner.node.start", "runner", st.launched,
      _runner("node.start", lambda x: {"nodeId": "a"}), "node.started"),
    S("runner_node_finish", "runner.node.finish", "runner", st.runner_in_node,
      _runner("node.finish", _node_finish), "node.finished"),
    S("runner_node_finish_reevaluate", "runner.node.finish", "runner", st.settings_stale_route,
      _runner("node.finish", lambda x: {**_node_finish(x), "settingsRoute": True}),
      "node.reevaluated"),
    S("runner_node_wait", "runner.node.wait", "runner", st.runner_in_node,
      _runner("node.wait", _node_wait), "run.waiting"),
    S("runner_node_update", "runner.node.update", "runner", st.runner_in_node,
      _runner("node.update", lambda x: {"attemptId": x["attempt_id"], "body": {"pct": 50}}),
      "node.update"),
    S("runner_value_publish", "runner.value.publish", "runner", st.runner_in_node,
      _runner("value.publish", lambda x: {"attemptId": x["attempt_id"], "key": "url",
                                          "value": {"u": 1}}),
      "value.published"),
    S("runner_signal_send", "runner.signal.send", "runner", st.signalling,
      _runner("signal.send", lambda x: {"attemptId": x["attempt_id"], "runId": x["target"],
                                        "name": "go", "data": {"v": 1}, "key": "k-1"}),
      "effect.settled"),
    S("runner_node_logs", "runner.node.logs", "runner", st.runner_in_node,
      _runner("node.logs", lambda x: {"attemptId": x["attempt_id"], "text": "hi\n", "bytes": 3}),
      "node.logs"),
    S("runner_run_park", "runner.run.park", "runner", st.runner_in_node,
      _runner("run.park", lambda x: {"reason": "workflowSourceChanged"}), "run.parked"),
    S("runner_effect_reserve", "runner.effect.reserve", "runner", st.runner_in_node,
      _runner("effect.reserve", st.effect_payload), "effect.reserved"),
    S("runner_effect_settle", "runner.effect.settle", "runner", st.runner_applying,
      _runner("effect.settle", _effect_settle), "effect.settled"),
    S("runner_interaction_reject", "runner.interaction.reject", "runner", st.runner_validating,
      _runner("interaction.reject", _reject), "interaction.rejected"),
    S("runner_process_register", "runner.process.register", "runner", st.runner_in_node,
      _runner("process.register", lambda x: st.process_payload())),
    S("runner_process_ended", "runner.process.ended", "runner", st.runner_process,
      _runner("process.ended", lambda x: {"pid": FAKE_PID})),
    S("runner_node_sleep", "runner.node.sleep", "runner", st.runner_in_node,
      _runner("node.sleep", lambda x: {"attemptId": x["attempt_id"], "delayMs": 1_000}),
      "run.waiting"),
    S("runner_node_retry", "runner.node.retry", "runner", st.runner_in_node,
      _runner("node.retry", lambda x: {"attemptId": x["attempt_id"], "outcome": "failed",
                                       "error": "flaky", "delayMs": 1_000}),
      "node.retried"),
    S("runner_node_await", "runner.node.await", "runner", st.runner_in_node,
      _runner("node.await", lambda x: {"attemptId": x["attempt_id"], "event": "go",
                                       "timeoutMs": 60_000}),
      "run.waiting"),
    S("runner_node_spawn", "runner.node.spawn", "runner", st.runner_in_node,
      _runner("node.spawn", st.spawn_payload), "run.waiting"),
    S("runner_signal_reject", "runner.signal.reject", "runner", st.runner_signalled,
      _runner("signal.reject", lambda x: {"signalId": x["signal_id"], "error": "no"}),
      "signal.rejected"),
]  # fmt: skip

BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}


def main() -> None:  # pragma: no cover - listing entry
    """Print every declared commit point, what it commits and the scenarios that crash it."""
    covered: dict[str, list[str]] = {}
    for scenario in SCENARIOS:
        covered.setdefault(scenario.point, []).append(scenario.name)
    for point, what in faults.declared().items():
        names = ", ".join(covered.get(point, [])) or "NO SCENARIO"
        print(f"{point}  ({what})\n    crashed by: {names}")


if __name__ == "__main__":  # pragma: no cover - listing entry
    main()
