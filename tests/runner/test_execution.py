"""The execution loop: compute chains, notify messages, failures and node timeouts."""

from __future__ import annotations

from .peer import Project, ScriptedServer, envelope_for, fresh_state

_CHAIN = """
from pi_workflows import Workflow, compute, edge, notify

workflow = Workflow(
    "chain",
    "a",
    {
        "a": compute(lambda ctx: {"n": ctx.input["n"] + 1}),
        "b": compute(lambda ctx: {"n": ctx.outputs["a"]["n"] * 10, "visit": ctx.visit}),
        "say": notify(lambda ctx: f"n is {ctx.outputs['b']['n']}", kind="progress"),
        "c": compute(lambda ctx: {"final": ctx.outputs["b"]["n"], "steps": len(ctx.results)}),
    },
    [edge("a", "b"), edge("b", "say"), edge("say", "c")],
)
"""


def _run(project: Project, name: str, source: str, run_input: object = None) -> ScriptedServer:
    """Run ``source`` from a fresh start against the scripted server; the child must exit 0."""
    project.write(f"{name}.workflow.py", source)
    server = ScriptedServer(
        project,
        envelope_for(project.load(name), project, run_input),
        state=fresh_state(run_input),
    )
    assert server.run() == 0
    return server


def test_compute_chain_finishes_each_node_and_starts_the_next_in_one_commit(
    project: Project,
) -> None:
    """Each node.finish carries the engine's goto with startNext; only the first node is started."""
    server = _run(project, "chain", _CHAIN, {"n": 1})
    assert server.kinds() == ["ready", "state.get", "node.start"] + ["node.finish"] * 4
    assert server.sent("node.start") == [{"nodeId": "a", "timeoutMs": None}]
    finishes = server.sent("node.finish")
    assert [f["next"] for f in finishes[:3]] == [
        {"type": "goto", "nodeId": "b"},
        {"type": "goto", "nodeId": "say"},
        {"type": "goto", "nodeId": "c"},
    ]
    assert all(f["startNext"] is True and f["timeoutMs"] is None for f in finishes[:3])
    assert finishes[0]["output"] == {"n": 2}
    assert finishes[1]["output"] == {"n": 20, "visit": 1}
    assert finishes[3] == {
        "attemptId": "att-4",
        "outcome": "completed",
        "output": {"final": 20, "steps": 3},
        "next": {"type": "finish", "status": "completed", "output": {"final": 20, "steps": 3}},
    }


def test_notify_node_finishes_with_its_workflow_message(project: Project) -> None:
    """A notify node's node.finish records its output and the message {kind, body} together."""
    server = _run(project, "chain", _CHAIN, {"n": 1})
    say = server.sent("node.finish")[2]
    assert say["output"] == {"message": "n is 20", "kind": "progress"}
    assert say["message"] == {"kind": "progress", "body": "n is 20"}


def test_each_proposal_expects_the_revision_of_the_previous_reply(project: Project) -> None:
    """Message ids count up from the runner epoch and every proposal names the last revision."""
    server = _run(project, "chain", _CHAIN, {"n": 1})
    assert [m.message_id for m in server.messages] == [f"7-{i}" for i in range(1, 8)]
    assert [m.expected_revision for m in server.messages] == [None, None, 10, 11, 12, 13, 14]


_FAILING = """
from pi_workflows import Workflow, compute, edge, switch

def explode(ctx):
    raise ValueError("the input is wrong")

workflow = Workflow(
    "failing",
    "boom",
    {"boom": compute(explode), "recover": compute(lambda ctx: dict(ctx.results["boom"]))},
    [switch("boom", on="$result.outcome", cases={"failed": "recover", "ok": "recover"})],
)
"""


def test_callback_exception_fails_the_node_with_type_and_message(project: Project) -> None:
    """An exception fails the node with one line (type: message); the traceback goes to stderr."""
    server = _run(project, "failing", _FAILING)
    boom, recover = server.sent("node.finish")
    assert boom["outcome"] == "failed"
    assert boom["error"] == "ValueError: the input is wrong"
    assert boom["next"] == {"type": "goto", "nodeId": "recover"}
    assert recover["output"] == {"outcome": "failed", "error": "ValueError: the input is wrong"}
    assert "Traceback" in server.stderr
    assert "explode" in server.stderr


_SLOW = """
import asyncio
import threading

from pi_workflows import Workflow, compute, edge, seconds

def stuck(ctx):
    threading.Event().wait()  # ignores cancellation; the runner must move on anyway

async def slow(ctx):
    await asyncio.sleep(3600)

workflow = Workflow(
    "slow",
    "sync",
    {
        "sync": compute(stuck, timeout=seconds(0.3)),
        "async": compute(slow, timeout=seconds(0.3)),
    },
    [switch("sync", on="$result.outcome", cases={"timed_out": "async", "ok": "async"})],
)
""".replace("edge, seconds", "seconds, switch")


def test_node_timeout_gives_a_timed_out_result_for_sync_and_async_callbacks(
    project: Project,
) -> None:
    """A callback past its deadline is abandoned and the node times out; nothing routes it last."""
    server = _run(project, "slow", _SLOW)
    assert server.sent("node.start") == [{"nodeId": "sync", "timeoutMs": 300}]
    sync, async_ = server.sent("node.finish")
    assert sync["outcome"] == "timed_out"
    assert sync["error"] == "node 'sync' produced no result within 0.3 seconds"
    assert sync["timeoutMs"] == 300
    assert async_["outcome"] == "timed_out"
    assert async_["next"] == {
        "type": "finish",
        "status": "timed_out",
        "error": "node 'async' timed out: node 'async' produced no result within 0.3 seconds",
    }


_NOT_JSON = """
from pi_workflows import Workflow, compute

workflow = Workflow("notjson", "a", {"a": compute(lambda ctx: {"items": {1, 2}})})
"""


def test_non_json_output_fails_the_node_with_the_engine_error(project: Project) -> None:
    """An output that is not plain JSON fails the node and the run with the engine's message."""
    server = _run(project, "notjson", _NOT_JSON)
    (finish,) = server.sent("node.finish")
    assert finish["outcome"] == "failed"
    assert (
        finish["error"] == "the output of node 'a' is not JSON: $.items is a set, not a JSON value"
    )
    assert finish["next"]["status"] == "failed"


def test_running_active_attempt_is_executed_again_under_its_attempt(project: Project) -> None:
    """A still-running active attempt runs afresh under its committed id, without node.start."""
    project.write("chain.workflow.py", _CHAIN)
    state = fresh_state({"n": 1})
    state.update(
        stepCount=1,
        currentNode="b",
        outputs={"a": {"n": 2}},
        results={"a": {"outcome": "ok", "error": None}},
        visits={"a": 1},
        active={
            "attemptId": "att-50",
            "nodeId": "b",
            "visit": 1,
            "attemptNo": 2,
            "status": "running",
            "request": None,
        },
    )
    server = ScriptedServer(
        project, envelope_for(project.load("chain"), project), command="resume", state=state
    )
    assert server.run() == 0
    assert "node.start" not in server.kinds()
    first = server.sent("node.finish")[0]
    assert (first["attemptId"], first["output"]) == ("att-50", {"n": 20, "visit": 1})


def test_restart_runs_from_the_start_node(project: Project) -> None:
    """A restart command with the clean state the server returns starts the start node again."""
    project.write("chain.workflow.py", _CHAIN)
    server = ScriptedServer(
        project,
        envelope_for(project.load("chain"), project),
        command="restart",
        state=fresh_state({"n": 4}),
    )
    assert server.run() == 0
    assert server.sent("node.start") == [{"nodeId": "a", "timeoutMs": None}]
    assert server.finished is not None
    assert server.finished["output"] == {"final": 50, "steps": 3}
