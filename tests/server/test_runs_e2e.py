"""Runs end to end through the real server, real runner children and the real client."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from pi_workflows.client import RejectedError

from support.server import ServerProcess, wait_for

CHAIN = """
from pi_workflows import Workflow, compute, edge

def add(ctx):
    return {"total": ctx.input["start"] + 1}

def double(ctx):
    return {"total": ctx.outputs["add"]["total"] * 2}

workflow = Workflow(
    "chain",
    start="add",
    nodes={"add": compute(add), "double": compute(double)},
    edges=[edge("add", "double")],
)
"""

ASK = """
from pi_workflows import Workflow, checkpoint, compute, edge

workflow = Workflow(
    "ask",
    start="ask",
    nodes={
        "ask": checkpoint(lambda ctx: {"question": "name?"}),
        "greet": compute(lambda ctx: {"greeting": "hello " + ctx.outputs["ask"]["name"]}),
    },
    edges=[edge("ask", "greet")],
)
"""


def test_a_compute_chain_completes_with_one_attempt_per_node(server: ServerProcess) -> None:
    """Two compute nodes run in a runner child; the run completes with their output."""
    server.write_workflow("chain", CHAIN)
    run_id = server.start_run("chain", {"start": 4})
    view = server.wait_status(run_id, {"completed", "failed"})
    assert view["status"] == "completed", view
    assert view["output"] == {"total": 10}
    assert [(a["nodeId"], a["status"]) for a in view["attempts"]] == [
        ("add", "completed"),
        ("double", "completed"),
    ]
    assert view["queueStatus"] == "done"
    wait_for(lambda: server.run(run_id)["runner"] is None, 30, "the runner to exit")
    assert server.diagnose() == []


def test_run_show_has_every_documented_field(server: ServerProcess) -> None:
    """The run view carries the documented fields with their documented types."""
    server.write_workflow("chain", CHAIN)
    view = server.wait_status(server.start_run("chain", {"start": 1}), "completed")
    for field in (
        "runId",
        "workflow",
        "status",
        "runStatus",
        "queueStatus",
        "parkReason",
        "revision",
        "generation",
        "currentNode",
        "waitingOn",
        "output",
        "error",
        "attempts",
        "effects",
        "runner",
    ):
        assert field in view, field
    assert view["workflow"] == "chain"
    assert view["generation"] == 1


def test_a_checkpoint_waits_without_a_runner_and_resumes_after_an_answer(
    server: ServerProcess,
) -> None:
    """The run waits with no runner or claim; the answer resumes the same attempt."""
    server.write_workflow("ask", ASK)
    run_id = server.start_run("ask")
    waiting = server.wait_status(run_id, "waiting")
    assert waiting["waitingOn"]["kind"] == "checkpoint"
    assert waiting["waitingOn"]["nodeId"] == "ask"
    assert waiting["waitingOn"]["request"] == {"question": "name?"}
    wait_for(lambda: server.run(run_id)["runner"] is None, 30, "the runner to exit")
    assert server.query("SELECT status FROM leases WHERE run_id = ?", run_id) == [("released",)]
    with server.client() as client:
        client.answer_checkpoint(run_id, {"name": "Ada"})
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"greeting": "hello Ada"}
    asks = [a for a in done["attempts"] if a["nodeId"] == "ask"]
    assert [a["status"] for a in asks] == ["completed"]
    assert server.diagnose() == []


def test_answering_a_run_that_does_not_wait_is_rejected(server: ServerProcess) -> None:
    """A checkpoint answer to a finished run is a one-line rejection; nothing changes."""
    server.write_workflow("chain", CHAIN)
    run_id = server.start_run("chain", {"start": 1})
    before = server.wait_status(run_id, "completed")
    with server.client() as client, pytest.raises(RejectedError, match="not waiting"):
        client.answer_checkpoint(run_id, {"x": 1})
    assert server.run(run_id)["revision"] == before["revision"]


def test_start_with_the_same_idempotency_key_returns_the_same_run(server: ServerProcess) -> None:
    """A retried run.start with the same client, key and payload adopts the first run."""
    server.write_workflow("chain", CHAIN)
    with server.client(client_id="tester") as client:
        first = client.start_run(
            "chain", {"start": 1}, project_dir=server.project, idempotency_key="k"
        )
        again = client.start_run(
            "chain", {"start": 1}, project_dir=server.project, idempotency_key="k"
        )
    assert first["runId"] == again["runId"]
    assert again.adopted
    with server.client() as client:
        assert len(client.list_runs()) == 1


def test_a_decision_answered_by_a_person_routes_on_the_choice(server: ServerProcess) -> None:
    """`decision answer` resolves the decision once and the run follows that choice."""
    server.write_workflow(
        "approve",
        """
        from pi_workflows import Workflow, choice, compute, human_decision, minutes, switch

        workflow = Workflow(
            "approve",
            start="ask",
            nodes={
                "ask": human_decision(
                    title=lambda ctx: "Ship it?",
                    choices=[choice("yes", "Ship"), choice("no", "Hold")],
                    on_timeout=(minutes(30), "no"),
                ),
                "ship": compute(lambda ctx: {"shipped": True}),
                "hold": compute(lambda ctx: {"shipped": False}),
            },
            edges=[switch("ask", on="$.choice", cases={"yes": "ship", "no": "hold"})],
        )
        """,
    )
    run_id = server.start_run("approve")
    waiting = server.wait_status(run_id, "waiting")
    assert waiting["waitingOn"]["kind"] == "decision"
    with server.client() as client:
        with pytest.raises(RejectedError, match=r"^Protected human decisions cannot be answered"):
            client.answer_checkpoint(run_id, {"choice": "yes"})
        with pytest.raises(RejectedError, match="not one of its choices: yes, no"):
            client.answer_decision(run_id, "maybe")
        client.answer_decision(run_id, "yes")
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"shipped": True}
    resolutions = server.query("SELECT resolution, choice_id FROM human_decision_resolutions")
    assert resolutions == [("answered", "yes")]


def test_a_decision_deadline_takes_its_default_choice(server: ServerProcess) -> None:
    """With nobody answering, the durable deadline resolves the decision to its default."""
    server.write_workflow(
        "lapse",
        """
        from pi_workflows import Workflow, choice, compute, human_decision, seconds, switch

        workflow = Workflow(
            "lapse",
            start="ask",
            nodes={
                "ask": human_decision(
                    title=lambda ctx: "Ship it?",
                    choices=[choice("yes"), choice("no")],
                    on_timeout=(seconds(1), "no"),
                ),
                "ship": compute(lambda ctx: {"shipped": True}),
                "hold": compute(lambda ctx: {"shipped": False, "why": ctx.outputs["ask"]}),
            },
            edges=[switch("ask", on="$.choice", cases={"yes": "ship", "no": "hold"})],
        )
        """,
    )
    run_id = server.start_run("lapse")
    done = server.wait_status(run_id, {"completed", "failed"}, 60)
    assert done["status"] == "completed", done
    assert done["output"]["shipped"] is False
    assert done["output"]["why"]["choice"] == "no"
    resolutions = server.query("SELECT resolution, choice_id FROM human_decision_resolutions")
    assert resolutions == [("timedOut", "no")]
    assert server.diagnose() == []


def test_pause_stops_a_running_node_and_resume_finishes_the_run(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Pausing parks the run at its last boundary, with the person's reason as its detail;
    resuming reruns the interrupted node."""
    started, gate = tmp_path / "started", tmp_path / "gate"
    server.write_workflow(
        "gated",
        f"""
        import time
        from pathlib import Path
        from pi_workflows import Workflow, compute

        def wait_gate(ctx):
            Path({str(started)!r}).write_text("x")
            while not Path({str(gate)!r}).exists():
                time.sleep(0.02)
            return {{"through": True}}

        workflow = Workflow("gated", start="g", nodes={{"g": compute(wait_gate)}}, edges=[])
        """,
    )
    run_id = server.start_run("gated")
    wait_for(started.exists, 30, "the node to start")
    with server.client() as client:
        assert client.pause(run_id, "the release is frozen")["status"] == "paused"
    paused = server.wait_status(run_id, "paused")
    assert (paused["parkReason"], paused["parkDetail"]) == ("userPaused", "the release is frozen")
    wait_for(lambda: server.run(run_id)["runner"] is None, 30, "the runner to stop")
    gate.write_text("open")
    with server.client() as client:
        client.resume(run_id)
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"through": True}
    assert [a["status"] for a in done["attempts"]] == ["interrupted", "completed"]
    assert server.diagnose() == []


def test_restart_runs_a_failed_run_again_from_its_start(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A failed run restarts in a new round with the code as it is now."""
    fixed = tmp_path / "fixed"
    server.write_workflow(
        "flaky",
        f"""
        from pathlib import Path
        from pi_workflows import Workflow, compute

        def check(ctx):
            if not Path({str(fixed)!r}).exists():
                raise RuntimeError("not fixed yet")
            return {{"fixed": True}}

        workflow = Workflow("flaky", start="c", nodes={{"c": compute(check)}}, edges=[])
        """,
    )
    run_id = server.start_run("flaky")
    failed = server.wait_status(run_id, {"failed", "completed"})
    assert failed["status"] == "failed"
    assert "not fixed yet" in failed["error"]
    fixed.write_text("yes")
    with server.client() as client:
        client.restart(run_id)
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["status"] == "completed", done
    assert done["error"] is None
    assert [(a["round"], a["status"]) for a in done["attempts"]] == [
        (0, "failed"),
        (1, "completed"),
    ]
    assert server.diagnose() == []


def test_a_node_that_stalls_its_runner_is_timed_out_by_the_server(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """A runner frozen past a node deadline is killed; the timeout routes via $result.outcome."""
    once = tmp_path / "stalled-once"
    server_process.write_workflow(
        "stall",
        f"""
        import os, signal
        from pathlib import Path
        from pi_workflows import Workflow, compute, seconds, switch

        def stall(ctx):
            if not Path({str(once)!r}).exists():
                Path({str(once)!r}).write_text("x")
                os.kill(os.getpid(), signal.SIGSTOP)
            return {{"stalled": False}}

        workflow = Workflow(
            "stall",
            start="stall",
            nodes={{
                "stall": compute(stall, timeout=seconds(1)),
                "late": compute(lambda ctx: {{"outcome": ctx.results["stall"]["outcome"]}}),
                "fine": compute(lambda ctx: {{"outcome": "ok"}}),
            }},
            edges=[
                switch(
                    "stall",
                    on="$result.outcome",
                    cases={{"ok": "fine", "timed_out": "late", "failed": "late"}},
                )
            ],
        )
        """,
    )
    server_process.start(PI_WORKFLOWS_NODE_GRACE_SECONDS="0.5")
    run_id = server_process.start_run("stall")
    done = server_process.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert done["status"] == "completed", done
    assert done["output"] == {"outcome": "timed_out"}
    outcomes = [o for (o,) in server_process.query("SELECT outcome FROM run_runners")]
    assert outcomes[0] == "timedOut"
    assert server_process.diagnose() == []


def test_pauses_do_not_count_as_crashes_of_a_node(server: ServerProcess, tmp_path: Path) -> None:
    """A node interrupted twice by a person's pause and then once by a runner crash is
    retried (only crashes count toward the three tries that park ``runnerCrashed``), and
    the run completes; the paused attempts say why they ended."""
    started, gate = tmp_path / "started", tmp_path / "gate"
    server.write_workflow(
        "gated",
        f"""
        import time
        from pathlib import Path
        from pi_workflows import Workflow, compute

        def wait_gate(ctx):
            with open({str(started)!r}, "a") as out:
                out.write("x\\n")
            while not Path({str(gate)!r}).exists():
                time.sleep(0.02)
            return {{"through": True}}

        workflow = Workflow("gated", start="g", nodes={{"g": compute(wait_gate)}}, edges=[])
        """,
    )
    run_id = server.start_run("gated")

    def tries() -> int:
        return len(started.read_text().splitlines()) if started.exists() else 0

    for round_no in (1, 2):
        wait_for(lambda n=round_no: tries() == n, 30, f"try {round_no} to start")
        with server.client() as client:
            assert client.pause(run_id)["status"] == "paused"
            wait_for(lambda: server.run(run_id)["runner"] is None, 30, "the runner to stop")
            client.resume(run_id)
    wait_for(lambda: tries() == 3, 30, "try 3 to start")
    [(pid,)] = server.query(
        "SELECT pid FROM run_runners WHERE run_id = ? AND status != 'exited'", run_id
    )
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: tries() == 4, 30, "try 4 after the crash")
    gate.write_text("open")
    done = server.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert done["status"] == "completed", done
    errors = [a["error"] for a in done["attempts"] if a["status"] == "interrupted"]
    assert errors == ["parked (userPaused)", "parked (userPaused)", None]
    assert server.diagnose() == []


POLL = """
from pathlib import Path
from pi_workflows import Workflow, compute, seconds, sleep, switch

def probe(ctx):
    tries = Path(ctx.input["tries"])
    count = len(tries.read_text()) if tries.exists() else 0
    tries.write_text("x" * (count + 1))
    if count == 0:
        raise RuntimeError("the probe broke")
    return {"healthy": count >= 2, "count": count}

workflow = Workflow("poll", start="probe", max_steps=12, nodes={
    "probe": compute(probe),
    "wait": sleep(seconds(0.1)),
    "done": compute(lambda ctx: ctx.outputs["probe"]),
}, edges=[
    switch("probe", on="$.healthy", cases={True: "done", False: "wait"}, failed="wait"),
    switch("wait", on="$result.outcome", cases={"ok": "probe"}),
])
"""


def test_one_switch_routes_a_poll_loop_by_value_and_by_failure(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The probe fails once (``failed=`` routes it to the sleep), reports unhealthy once
    (the ``False`` case), then healthy: no extra node counts the loop."""
    server.write_workflow("poll", POLL)
    run_id = server.start_run("poll", {"tries": str(tmp_path / "tries")})
    done = server.wait_status(run_id, "completed")
    assert done["output"] == {"healthy": True, "count": 2}
    visited = [a["nodeId"] for a in done["attempts"]]
    assert visited == ["probe", "wait", "probe", "wait", "probe", "done"]
    assert done["attempts"][0]["status"] == "failed"
