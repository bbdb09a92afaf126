"""Bounded state and replies: large values travel by reference, never as one huge frame.

Five legal 250 KiB outputs used to make every resume fail (the ``state.get`` reply exceeded
the 1 MiB frame); large inputs, outputs and answers are now stored once as blobs, sent as
digest-checked references the runner reads in chunks, and a run's total state has a cap.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from pi_workflows.protocol import Outcome, Request
from pi_workflows.server.handlers import registry as handlers

from support.server import ServerProcess

BIG = """
from pi_workflows import Workflow, checkpoint, compute, edge

NAMES = ["a", "b", "c", "d", "e"]

def big(name):
    return compute(lambda ctx: {"name": name, "fill": name * 250_000})

def total(ctx):
    return {
        "outputs": sum(len(ctx.outputs[n]["fill"]) for n in NAMES),
        "input": len(ctx.input["blob"]),
        "answer": len(ctx.outputs["ask"]["text"]),
    }

workflow = Workflow(
    "big",
    start="a",
    nodes={**{n: big(n) for n in NAMES},
            "ask": checkpoint(lambda ctx: {"question": "more?"}),
            "total": compute(total)},
    edges=[edge("a", "b"), edge("b", "c"), edge("c", "d"), edge("d", "e"), edge("e", "ask"),
           edge("ask", "total")],
)
"""


def test_a_run_with_megabytes_of_state_resumes_from_a_wait(server: ServerProcess) -> None:
    """Window: a resume after a wait must read 1.25 MB of outputs, a 600 KB input and a
    200 KB answer; each comes by reference, and the run completes with all of them."""
    server.write_workflow("big", BIG)
    run_id = server.start_run("big", {"blob": "i" * 600_000})
    view = server.wait_status(run_id, {"waiting", "paused", "failed"}, 90)
    assert view["status"] == "waiting", view
    assert view["input"] is None
    assert view["inputRef"]["bytes"] > 600_000
    with server.client() as client:
        client.answer_checkpoint(run_id, {"text": "t" * 200_000})
    done = server.wait_status(run_id, {"completed", "failed", "paused"}, 90)
    assert done["status"] == "completed", done
    assert done["output"] == {"outputs": 1_250_000, "input": 600_000, "answer": 200_000}
    blobs = server.query("SELECT COUNT(*) FROM blobs WHERE size > 16384")
    assert blobs[0][0] >= 7  # five outputs, the input, the answer (definitions are small)
    assert server.diagnose() == []


def test_run_show_json_prints_a_large_input_in_full(server: ServerProcess) -> None:
    """``run.get`` sends a large input by reference; the CLI reads it in and prints it whole."""
    server.write_workflow("big", BIG)
    run_id = server.start_run("big", {"blob": "j" * 900_000})
    result = server.cli("run", "show", run_id, "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert view["input"] == {"blob": "j" * 900_000}
    assert view["inputRef"] is None


def _many_nodes(count: int) -> str:
    nodes = ", ".join(
        f'"n{i}": compute(lambda ctx: {{"fill": "x" * 250_000}})' for i in range(count)
    )
    edges = ", ".join(f'edge("n{i}", "n{i + 1}")' for i in range(count - 1))
    return (
        "from pi_workflows import Workflow, compute, edge\n"
        f'workflow = Workflow("many", start="n0", max_steps=200, nodes={{{nodes}}},'
        f" edges=[{edges}])\n"
    )


@pytest.mark.timeout(240)
def test_a_node_that_would_take_the_state_past_its_cap_fails_clearly(
    server: ServerProcess,
) -> None:
    """70 nodes of 250 KB each exceed the 16 MiB state cap: the node that crosses it fails
    with a message naming the limit, and everything before it is kept."""
    server.write_workflow("many", _many_nodes(70))
    run_id = server.start_run("many")
    view = server.wait_status(run_id, {"completed", "failed", "paused"}, 200)
    assert view["status"] == "failed", view
    assert "the limit is 16777216" in view["error"]
    completed = [a for a in view["attempts"] if a["status"] == "completed"]
    assert 60 <= len(completed) < 70
    assert server.diagnose() == []


EFFECTS = """
from pi_workflows import Workflow, action, edge, idempotent_effect

def send(ctx):
    return {"sent": ctx.node_id}

workflow = Workflow(
    "fx",
    start="a",
    nodes={n: action(send, effect=idempotent_effect("send")) for n in "abc"},
    edges=[edge("a", "b"), edge("b", "c")],
)
"""


def test_effect_list_is_paged_with_a_cursor(server: ServerProcess) -> None:
    """``effect.list`` answers at most ``limit`` effects and a ``next`` cursor for the rest."""
    server.write_workflow("fx", EFFECTS)
    run_id = server.start_run("fx")
    server.wait_status(run_id, "completed")
    with server.client() as client:
        first = client.call("effect.list", {"limit": 2}, run_id=run_id).body
        rest = client.call("effect.list", {"limit": 2, "after": first["next"]}, run_id=run_id).body
        every = client.list_effects(run_id)
    assert [e["nodeId"] for e in first["effects"]] == ["a", "b"]
    assert [e["nodeId"] for e in rest["effects"]] == ["c"]
    assert rest["next"] is None
    assert [e["nodeId"] for e in every] == ["a", "b", "c"]


class _Serving:
    """The one attribute ``dispatch`` reads from the server."""

    stop_requested = False


def test_an_answer_over_the_frame_cap_is_a_rejection_not_a_dropped_connection() -> None:
    """Whatever an operation produces, a body over the frame cap becomes ``responseTooLarge``."""

    async def huge(server: Any, request: Request) -> dict[str, Any]:
        return {"items": ["x" * 1000] * 2000}

    handlers.operation("test.huge")(huge)
    try:
        request = Request(
            schema="pi-workflows.client.v1", request_id="r", client_id="c", operation="test.huge"
        )
        response = asyncio.run(handlers.dispatch(_Serving(), request))  # type: ignore[arg-type]
    finally:
        handlers._HANDLERS.pop("test.huge")
    assert response.outcome is Outcome.REJECTED
    assert response.error is not None
    assert response.error.code == "responseTooLarge"


def _medium_nodes(count: int) -> str:
    nodes = ", ".join(
        f'"n{i:02d}": compute(lambda ctx: {{"fill": "m" * 15_000}})' for i in range(count)
    )
    edges = ", ".join(f'edge("n{i:02d}", "n{i + 1:02d}")' for i in range(count - 1))
    return (
        "from pi_workflows import Workflow, checkpoint, compute, edge\n"
        "def total(ctx):\n"
        '    return {"nodes": sum(1 for k in ctx.outputs if k.startswith("n")),'
        ' "bytes": sum(len(v["fill"]) for k, v in ctx.outputs.items() if k.startswith("n"))}\n'
        f'workflow = Workflow("medium", start="n00", max_steps=200, nodes={{{nodes},'
        ' "ask": checkpoint(lambda ctx: {"question": "go?"}), "total": compute(total)},'
        f' edges=[{edges}, edge("n{count - 1:02d}", "ask"), edge("ask", "total")])\n'
    )


@pytest.mark.timeout(180)
def test_many_outputs_just_under_the_inline_limit_still_resume(server: ServerProcess) -> None:
    """Window: a resume after a wait whose inline outputs (80 of 15 KB, each under the 16 KiB
    inline limit, 1.2 MB together) exceed one frame: ``state.get`` pages them, so the answer
    is validated and the run completes instead of waiting for good."""
    server.write_workflow("medium", _medium_nodes(80))
    run_id = server.start_run("medium")
    view = server.wait_status(run_id, {"waiting", "paused", "failed"}, 120)
    assert view["status"] == "waiting", view
    with server.client() as client:
        client.answer_checkpoint(run_id, {"go": True})
    done = server.wait_status(run_id, {"completed", "failed", "paused"}, 120)
    assert done["status"] == "completed", done
    assert done["output"] == {"nodes": 80, "bytes": 80 * 15_000}
    assert "over the frame limit" not in server.tail(400)
    assert server.diagnose() == []
