"""Runs end to end through the real server, real runner children and the real client."""

from __future__ import annotations

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
