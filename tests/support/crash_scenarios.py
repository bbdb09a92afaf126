"""Lifecycle crash scenarios: a prepared run state and one operation to crash inside.

Used in-process (the fault raises) and from a child process (the fault exits like SIGKILL).
Run as a script, ``crash_scenarios.py HOME SCENARIO PHASE`` prepares the scenario in
``HOME``, arms ``lifecycle.OP.PHASE`` with ``exit`` and runs the operation.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # pragma: no cover - child process entry
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pi_workflows.store import faults, interaction_writes, lifecycle, takeover
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.interactions import InteractionDraft
from pi_workflows.store.lifecycle import Finish, GoTo
from pi_workflows.store.states import AttemptStatus, ParkReason, RunStatus

from support.store import LEASE_MS, new_run, open_test_db

CHILD_START_MS = 1_800_000_000_000
CHECKPOINT = frozenset({"checkpoint"})


@dataclass(frozen=True)
class Scenario:
    """``prepare`` builds the state; ``run`` performs the operation named ``point``."""

    name: str
    point: str
    event: str
    prepare: Callable[[Database, FakeClock], dict[str, Any]]
    run: Callable[[Database, FakeClock, dict[str, Any]], object]


def _queued(db: Database, clock: FakeClock) -> dict[str, Any]:
    return {"run_id": lifecycle.reserve(db, new_run()).run_id}


def _running(db: Database, clock: FakeClock) -> dict[str, Any]:
    ctx = _queued(db, clock)
    ctx["claim"] = lifecycle.claim(db, ctx["run_id"], "runner-1").claim
    return ctx


def _in_node(db: Database, clock: FakeClock) -> dict[str, Any]:
    ctx = _running(db, clock)
    ctx["attempt_id"] = lifecycle.start_node(db, ctx["claim"], "a").attempt.attempt_id
    return ctx


def _waiting(db: Database, clock: FakeClock) -> dict[str, Any]:
    ctx = _in_node(db, clock)
    _, ctx["request_id"] = lifecycle.wait(
        db, ctx["claim"], ctx["attempt_id"], InteractionDraft("checkpoint", {"q": 1})
    )
    return ctx


def _validating(db: Database, clock: FakeClock) -> dict[str, Any]:
    ctx = _waiting(db, clock)
    submitted = interaction_writes.submit(
        db, ctx["request_id"], {"a": 1}, kinds=CHECKPOINT, submitted_by="test"
    )
    ctx["submission_id"] = submitted.submission_id
    ctx["claim2"] = lifecycle.claim(db, ctx["run_id"], "runner-2").claim
    return ctx


def _deciding(db: Database, clock: FakeClock) -> dict[str, Any]:
    ctx = _in_node(db, clock)
    draft = InteractionDraft("decision", {"title": "ship?"}, choices=["yes", "no"])
    _, ctx["request_id"] = lifecycle.wait(db, ctx["claim"], ctx["attempt_id"], draft)
    return ctx


def _paused(db: Database, clock: FakeClock) -> dict[str, Any]:
    ctx = _in_node(db, clock)
    lifecycle.park(db, ctx["claim"], ParkReason.RUNNER_NO_PROGRESS)
    return ctx


def _expired(db: Database, clock: FakeClock) -> dict[str, Any]:
    ctx = _in_node(db, clock)
    clock.advance(LEASE_MS + 1)
    return ctx


SCENARIOS = [
    Scenario(
        "reserve",
        "lifecycle.reserve",
        "run.reserved",
        lambda db, c: {},
        lambda db, c, x: lifecycle.reserve(db, new_run()),
    ),
    Scenario(
        "claim",
        "lifecycle.claim",
        "run.claimed",
        _queued,
        lambda db, c, x: lifecycle.claim(db, x["run_id"], "runner-1"),
    ),
    Scenario(
        "start_node",
        "lifecycle.start_node",
        "node.started",
        _running,
        lambda db, c, x: lifecycle.start_node(db, x["claim"], "a"),
    ),
    Scenario(
        "finish_node",
        "lifecycle.finish_node",
        "node.finished",
        _in_node,
        lambda db, c, x: lifecycle.finish_node(
            db,
            x["claim"],
            x["attempt_id"],
            AttemptStatus.COMPLETED,
            GoTo("b"),
            output=1,
            start_next=True,
        ),
    ),
    Scenario(
        "finish_run",
        "lifecycle.finish_node",
        "run.completed",
        _in_node,
        lambda db, c, x: lifecycle.finish_node(
            db,
            x["claim"],
            x["attempt_id"],
            AttemptStatus.COMPLETED,
            Finish(RunStatus.COMPLETED, 1),
            output=1,
        ),
    ),
    Scenario(
        "wait",
        "lifecycle.wait",
        "run.waiting",
        _in_node,
        lambda db, c, x: lifecycle.wait(
            db, x["claim"], x["attempt_id"], InteractionDraft("checkpoint", {})
        ),
    ),
    Scenario(
        "submit",
        "interactions.submit",
        "interaction.submitted",
        _waiting,
        lambda db, c, x: interaction_writes.submit(
            db, x["request_id"], {"a": 1}, kinds=CHECKPOINT, submitted_by="test"
        ),
    ),
    Scenario(
        "accept",
        "lifecycle.finish_node",
        "node.finished",
        _validating,
        lambda db, c, x: lifecycle.finish_node(
            db,
            x["claim2"],
            x["attempt_id"],
            AttemptStatus.COMPLETED,
            GoTo("b"),
            output={"a": 1},
            start_next=True,
            submission_id=x["submission_id"],
        ),
    ),
    Scenario(
        "reject",
        "interactions.reject",
        "interaction.rejected",
        _validating,
        lambda db, c, x: interaction_writes.reject(
            db, x["claim2"], x["submission_id"], "not good enough"
        ),
    ),
    Scenario(
        "abandon",
        "interactions.abandon",
        "interaction.abandoned",
        _validating,
        lambda db, c, x: interaction_writes.abandon(db, x["claim2"], "the runner died"),
    ),
    Scenario(
        "decide",
        "interactions.decide",
        "interaction.answered",
        _deciding,
        lambda db, c, x: interaction_writes.answer_decision(
            db, x["request_id"], "yes", answered_by="test"
        ),
    ),
    Scenario(
        "park",
        "lifecycle.park",
        "run.parked",
        _in_node,
        lambda db, c, x: lifecycle.park(db, x["claim"], ParkReason.SERVER_STOPPED),
    ),
    Scenario(
        "pause",
        "lifecycle.pause",
        "run.paused",
        _queued,
        lambda db, c, x: lifecycle.pause(db, x["run_id"]),
    ),
    Scenario(
        "resume",
        "lifecycle.resume",
        "run.resumed",
        _paused,
        lambda db, c, x: lifecycle.resume(db, x["claim"].run_id),
    ),
    Scenario(
        "fail",
        "lifecycle.fail",
        "run.failed",
        _in_node,
        lambda db, c, x: lifecycle.fail(db, x["claim"], "boom"),
    ),
    Scenario(
        "time_out",
        "lifecycle.time_out",
        "run.timed_out",
        _in_node,
        lambda db, c, x: lifecycle.time_out(db, x["claim"], "late"),
    ),
    Scenario(
        "complete",
        "lifecycle.complete",
        "run.completed",
        _running,
        lambda db, c, x: lifecycle.complete(db, x["claim"], {"ok": 1}),
    ),
    Scenario(
        "cancel_live",
        "lifecycle.cancel",
        "run.cancelled",
        _in_node,
        lambda db, c, x: lifecycle.cancel(db, x["claim"].run_id, claim=x["claim"]),
    ),
    Scenario(
        "cancel_expired",
        "lifecycle.cancel",
        "run.cancelled",
        _expired,
        lambda db, c, x: lifecycle.cancel(db, x["claim"].run_id),
    ),
    Scenario(
        "cancel_queued",
        "lifecycle.cancel",
        "run.cancelled",
        _queued,
        lambda db, c, x: lifecycle.cancel(db, x["run_id"]),
    ),
    Scenario(
        "recover",
        "lifecycle.recover",
        "run.recovered",
        _expired,
        lambda db, c, x: takeover.recover(db, x["claim"].run_id),
    ),
    Scenario(
        "control_claim",
        "lifecycle.control_claim",
        "run.controlClaimed",
        _expired,
        lambda db, c, x: lifecycle.control_claim(db, x["claim"].run_id),
    ),
]

BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}


def child_main(home: str, name: str, phase: str) -> None:  # pragma: no cover - child only
    """Prepare ``name`` in ``home`` and die at its commit point (``phase``)."""
    scenario = BY_NAME[name]
    clock = FakeClock(CHILD_START_MS)
    db = open_test_db(Path(home), clock)
    ctx = scenario.prepare(db, clock)
    faults.arm(f"{scenario.point}.{phase}", "exit")
    scenario.run(db, clock, ctx)
    sys.exit(3)  # the fault point should have ended the process first


if __name__ == "__main__":  # pragma: no cover - child process entry
    child_main(sys.argv[1], sys.argv[2], sys.argv[3])
