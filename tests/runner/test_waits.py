"""Interactive nodes: a durable request ends the child; a later child routes the answer."""

from __future__ import annotations

from typing import Any

from .peer import Project, ScriptedServer, envelope_for, fresh_state

_ASK = """
from pi_workflows import (Rejected, Workflow, agent, checkpoint, choice, compute, edge,
                          human_decision, minutes, seconds, switch)

def check(output, ctx):
    if output.get("route") not in ("fix", "skip"):
        raise Rejected("route must be fix or skip")

workflow = Workflow(
    "ask",
    "prepare",
    {
        "prepare": compute(lambda ctx: {"topic": "release"}),
        "ask": checkpoint(lambda ctx: f"Ship the {ctx.outputs['prepare']['topic']}?",
                          timeout=minutes(5)),
        "approve": human_decision(
            title=lambda ctx: "Apply the fix?",
            choices=[choice("yes", "Apply"), choice("no", "Skip")],
            on_timeout=(minutes(30), "no"),
        ),
        "classify": agent(prompt="Classify it", expected_output='{"route": "fix"}',
                          validate=check, timeout=seconds(60)),
        "done": compute(lambda ctx: {"answer": ctx.outputs.get("ask"),
                                     "choice": ctx.outputs.get("approve")}),
    },
    [
        edge("prepare", "ask"),
        edge("ask", "approve"),
        switch("approve", on="$.choice", cases={"yes": "classify", "no": "done"}),
        switch("classify", on="$result.outcome",
               cases={"ok": "done", "failed": "done", "timed_out": "done"}),
    ],
    max_steps=5,
)
"""


def _server(project: Project, command: str = "start", state: Any = None) -> ScriptedServer:
    project.write("ask.workflow.py", _ASK)
    return ScriptedServer(
        project,
        envelope_for(project.load("ask"), project),
        command=command,
        state=state if state is not None else fresh_state(),
    )


def _waiting(
    node_id: str, kind: str, status: str, answer: Any, submission: Any = None, **done: Any
) -> dict[str, Any]:
    """A resumed run whose ``node_id`` attempt waits on a settled or validating request."""
    state = fresh_state()
    outputs = {"prepare": {"topic": "release"}, **done}
    state.update(
        stepCount=len(outputs),
        currentNode=node_id,
        outputs=outputs,
        results={n: {"outcome": "ok", "error": None} for n in outputs},
        visits=dict.fromkeys(outputs, 1),
        active={
            "attemptId": "att-90",
            "nodeId": node_id,
            "visit": 1,
            "attemptNo": 1,
            "status": "waiting",
            "request": {
                "requestId": "req-9",
                "kind": kind,
                "status": status,
                "answer": answer,
                "submission": None
                if submission is None
                else {"submissionId": "sub-1", "value": submission},
            },
        },
    )
    return state


def test_checkpoint_sends_its_request_and_the_child_exits(project: Project) -> None:
    """A checkpoint commits node.wait with its normalised request and deadline; the child exits."""
    server = _server(project)
    assert server.run() == 0
    assert server.kinds()[-2:] == ["node.finish", "node.wait"]
    assert server.sent("node.finish")[0]["next"] == {"type": "goto", "nodeId": "ask"}
    assert server.sent("node.finish")[0]["timeoutMs"] == 300_000
    assert server.sent("node.wait") == [
        {
            "attemptId": "att-2",
            "kind": "checkpoint",
            "request": {"question": "Ship the release?"},
            "timeoutMs": 300_000,
        }
    ]
    assert server.finished is None


def test_a_validated_checkpoint_answer_completes_the_attempt_in_one_commit(
    project: Project,
) -> None:
    """A runner launched for a validating checkpoint answer accepts it with node.finish (the
    submission id in the same commit) and the graph goes on."""
    state = _waiting("ask", "checkpoint", "validating", None, submission={"ok": True})
    server = _server(project, "resume", state)
    assert server.run() == 0
    assert server.kinds() == ["ready", "state.get", "node.finish", "node.wait"]
    (finish,) = server.sent("node.finish")
    assert finish["attemptId"] == "att-90"
    assert finish["outcome"] == "completed"
    assert finish["output"] == {"ok": True}
    assert finish["submissionId"] == "sub-1"
    assert finish["next"] == {"type": "goto", "nodeId": "approve"}
    (wait,) = server.sent("node.wait")
    assert wait["kind"] == "decision"
    assert wait["request"]["title"] == "Apply the fix?"
    assert wait["choices"] == ["yes", "no"]
    assert wait["timeoutChoice"] == "no"
    assert wait["timeoutMs"] == 1_800_000


def test_timed_out_decision_takes_the_recorded_default_choice(project: Project) -> None:
    """A decision whose request timed out routes the default choice, decided by timeout."""
    state = _waiting("approve", "decision", "timed_out", {"choice": "no"}, ask={"ok": True})
    server = _server(project, "resume", state)
    assert server.run() == 0
    first, last = server.sent("node.finish")
    assert first["output"] == {"choice": "no", "decidedBy": "timeout"}
    assert last["next"]["output"] == {
        "answer": {"ok": True},
        "choice": {"choice": "no", "decidedBy": "timeout"},
    }


def test_answered_decision_is_decided_by_the_person(project: Project) -> None:
    """A person's choice becomes {choice, decidedBy: person} and routes through the switch."""
    state = _waiting("approve", "decision", "answered", {"choice": "yes"}, ask={"ok": True})
    server = _server(project, "resume", state)
    assert server.run() == 0
    (finish,) = server.sent("node.finish")
    assert finish["output"] == {"choice": "yes", "decidedBy": "person"}
    (wait,) = server.sent("node.wait")
    assert wait["kind"] == "agent"
    assert wait["timeoutMs"] == 60_000
    request = wait["request"]
    assert request["prompt"] == "Classify it"
    assert request["expectedOutput"] == '{"route": "fix"}'
    assert "Workflow: ask" in request["contract"]
    assert "<requestId>" in request["contract"]


def test_a_rejected_agent_submission_keeps_the_step_open_and_fails_nothing(
    project: Project,
) -> None:
    """A submission that validate rejects is rejected with the exact message; the node is
    not finished (the request stays open for a corrected one) and the child exits."""
    done = {"ask": {"ok": True}, "approve": {"choice": "yes", "decidedBy": "person"}}
    state = _waiting("classify", "agent", "validating", None, {"route": "maybe"}, **done)
    server = _server(project, "resume", state)
    assert server.run() == 0
    assert server.kinds() == ["ready", "state.get", "interaction.reject"]
    assert server.rejected == {"submissionId": "sub-1", "error": "route must be fix or skip"}
    assert server.sent("node.finish") == []


def test_an_accepted_agent_submission_is_the_nodes_output(project: Project) -> None:
    """A submission validate accepts becomes the output and routes like any result."""
    done = {"ask": {"ok": True}, "approve": {"choice": "yes", "decidedBy": "person"}}
    state = _waiting("classify", "agent", "validating", None, {"route": "fix"}, **done)
    server = _server(project, "resume", state)
    assert server.run() == 0
    classify = server.sent("node.finish")[0]
    assert (classify["outcome"], classify["output"]) == ("completed", {"route": "fix"})
    assert classify["submissionId"] == "sub-1"
    assert classify["next"] == {"type": "goto", "nodeId": "done"}


def test_server_settled_timeout_is_routed_without_running_the_node(project: Project) -> None:
    """A server-settled timeout is routed (counted once) as timed_out; the node does not run."""
    done = {"ask": {"ok": True}, "approve": {"choice": "yes", "decidedBy": "person"}}
    state = _waiting("classify", "agent", "pending", None, **done)
    state["active"]["status"] = "timed_out"
    error = "node 'classify' produced no result within 1 minute"
    state["visits"]["classify"] = 1  # the server counts the attempt it settled
    state["results"]["classify"] = {"outcome": "timed_out", "error": error}
    state["stepCount"] += 1
    server = _server(project, "resume", state)
    assert server.run() == 0
    assert "node.wait" not in server.kinds()
    classify, done = server.sent("node.finish")
    assert (classify["outcome"], classify["error"]) == ("timed_out", error)
    assert classify["next"] == {"type": "goto", "nodeId": "done"}
    assert done["next"]["status"] == "completed"  # step 5 of max_steps=5: counted once
