"""Client commands against live runs: stale revisions, and the runner-exit window."""

from __future__ import annotations

from pathlib import Path

import pytest

from pi_workflows.client import ConflictError

from support.server import ServerProcess, wait_for

STEPS = """
import time
from pathlib import Path
from pi_workflows import Workflow, checkpoint, choice, compute, edge, human_decision

GATE = Path({gate!r})

def slow(ctx):
    while not GATE.exists():
        time.sleep(0.02)
    return {{"slow": True}}

workflow = Workflow(
    "steps",
    start="slow",
    nodes={{
        "slow": compute(slow),
        "ask": checkpoint(lambda ctx: {{"question": "go?"}}),
        "decide": human_decision(title="ship?", choices=[choice("yes"), choice("no")]),
        "done": compute(lambda ctx: {{"decided": ctx.outputs["decide"]["choice"]}}),
    }},
    edges=[edge("slow", "ask"), edge("ask", "decide"), edge("decide", "done")],
)
"""


def _conflict(server: ServerProcess, operation: str, payload: dict[str, object],
              run_id: str | None, revision: int) -> str:  # fmt: skip
    with server.client() as client, pytest.raises(ConflictError) as caught:
        client.call(operation, payload, run_id=run_id, expected_revision=revision)
    return caught.value.code


def test_every_command_honours_expected_revision(server: ServerProcess, tmp_path: Path) -> None:
    """A stale ``expectedRevision`` is a typed ``revisionConflict`` for pause of a running run,
    checkpoint and decision answers and effect resolution; the current one is accepted."""
    gate = tmp_path / "gate"
    server.write_workflow("steps", STEPS.format(gate=str(gate)))
    run_id = server.start_run("steps")
    view = server.wait_status(run_id, "running")
    wait_for(lambda: server.run(run_id)["attempts"], 30, "the first node to start")
    stale = int(view["revision"]) - 1
    assert _conflict(server, "run.pause", {}, run_id, stale) == "revisionConflict"
    assert server.run(run_id)["status"] == "running"
    gate.write_text("open")
    view = server.wait_status(run_id, "waiting")
    current = int(view["revision"])
    value = {"value": {"go": True}}
    assert _conflict(server, "checkpoint.answer", value, run_id, current - 1) == "revisionConflict"
    assert server.run(run_id)["status"] == "waiting"
    with server.client() as client:
        client.call("checkpoint.answer", value, run_id=run_id, expected_revision=current)
    view = server.wait_status(run_id, "waiting")
    assert view["waitingOn"]["kind"] == "decision"
    current = int(view["revision"])
    choice = {"choice": "yes"}
    assert _conflict(server, "decision.answer", choice, run_id, current - 1) == "revisionConflict"
    with server.client() as client:
        client.call("decision.answer", choice, run_id=run_id, expected_revision=current)
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"decided": "yes"}
    assert server.diagnose() == []


WAITER = """
from pi_workflows import Workflow, checkpoint

workflow = Workflow(
    "waiter",
    start="ask",
    nodes={"ask": checkpoint(lambda ctx: {"question": "go?"})},
    edges=[],
)
"""


def test_cancel_right_after_a_runner_committed_its_wait_takes_control_not_claim_lost(
    server_process: ServerProcess,
) -> None:
    """Window: the runner committed ``node.wait`` (its claim is released) and has not exited
    yet; a cancel then must commit through a control claim instead of answering claimLost."""
    server_process.write_workflow("waiter", WAITER)
    server_process.start(faults="supervisor.delay_reply_after.node.wait=flag")
    run_id = server_process.start_run("waiter")
    server_process.wait_status(run_id, "waiting")
    assert server_process.run(run_id)["runner"] is not None  # still inside the held reply
    with server_process.client() as client:
        receipt = client.cancel(run_id)
    assert receipt["status"] == "cancelled"
    view = server_process.wait_status(run_id, "cancelled")
    assert view["waitingOn"] is None
    wait_for(lambda: server_process.run(run_id)["runner"] is None, 30, "the runner to exit")
    assert server_process.diagnose() == []


KILLED = """
import os
from pi_workflows import Workflow, action, manual_effect

def send(ctx):
    os.kill(os.getpid(), 9)

workflow = Workflow(
    "killed",
    start="send",
    nodes={"send": action(send, effect=manual_effect("mail"))},
    edges=[],
)
"""


def test_effect_resolve_honours_the_revision_of_the_effects_run(server: ServerProcess) -> None:
    """``effect.resolve`` has no ``runId``; its ``expectedRevision`` is the effect's run's."""
    server.write_workflow("killed", KILLED)
    run_id = server.start_run("killed")
    view = server.wait_status(run_id, "ambiguous")
    [effect] = view["effects"]
    payload = {"effectId": effect["effectId"], "resolution": "rejected", "reason": "checked"}
    current = int(view["revision"])
    assert _conflict(server, "effect.resolve", payload, None, current - 1) == "revisionConflict"
    with server.client() as client:
        client.call("effect.resolve", payload, expected_revision=current)
    assert [e["status"] for e in server.run(run_id)["effects"]] == ["rejected"]
