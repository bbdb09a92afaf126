"""A child's question answered through its parent, through real processes and the real
CLI: an answer sent to a parent that waits on its children goes to the one child that
asks, ``--child`` picks one of several, and every refusal names the child runs."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from pi_workflows.client import RejectedError

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(180)

ASK = """
from pi_workflows import Workflow, checkpoint, compute, edge
workflow = Workflow("ask", start="q", nodes={
    "q": checkpoint(lambda ctx: {"question": f"item {ctx.input.get('n')}?"}),
    "done": compute(lambda ctx: {"answer": ctx.outputs["q"]}),
}, edges=[edge("q", "done")])
"""
DECIDE = """
from pi_workflows import Workflow, choice, human_decision
workflow = Workflow("decide", start="pick", nodes={
    "pick": human_decision(title="ship?", choices=[choice("yes"), choice("no")]),
})
"""
ONE = """
from pi_workflows import Workflow, subworkflow
workflow = Workflow("one", start="child", nodes={"child": subworkflow("ask")})
"""
TWO = """
from pi_workflows import Workflow, fan_out
workflow = Workflow("two", start="each", nodes={
    "each": fan_out("ask", items=lambda ctx: [1, 2], input=lambda ctx, n: {"n": n},
                    concurrency=2),
})
"""
DECIDES = """
from pi_workflows import Workflow, subworkflow
workflow = Workflow("decides", start="child", nodes={"child": subworkflow("decide")})
"""


@pytest.fixture
def tree(server_process: ServerProcess) -> ServerProcess:
    """A started server with the child and parent workflows."""
    for name, source in (("ask", ASK), ("decide", DECIDE), ("one", ONE), ("two", TWO),
                         ("decides", DECIDES)):  # fmt: skip
        server_process.write_workflow(name, source)
    return server_process.start()


def _asking(server: ServerProcess, parent: str, count: int) -> list[dict[str, Any]]:
    """The runs below ``parent`` waiting on a request, once there are ``count`` of them."""

    def check() -> list[dict[str, Any]] | None:
        rows = server.query(
            "SELECT q.run_id, q.node_id, q.kind FROM interactive_requests q JOIN runs r"
            " USING (run_id) WHERE r.parent_run_id = ? AND q.status = 'pending'"
            " ORDER BY q.run_id",
            parent,
        )
        found = [{"runId": r[0], "nodeId": r[1], "kind": r[2]} for r in rows]
        return found if len(found) == count else None

    return list(wait_for(check, 60, f"{count} child run(s) of {parent} to ask"))


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_an_answer_to_the_parent_reaches_its_one_asking_child(tree: ServerProcess) -> None:
    """`checkpoint answer PARENT` answers the subworkflow's checkpoint: the line names the
    child and the parent, and the parent completes with the child's output."""
    parent = tree.start_run("one")
    (child,) = _asking(tree, parent, 1)
    done = tree.cli("checkpoint", "answer", parent, "--value", '"go"')
    assert done.returncode == 0, done.stderr
    assert f"of run {child['runId']} (below run {parent})" in done.stdout
    view = tree.wait_status(parent, "completed")
    assert view["output"] == {"answer": "go"}
    assert tree.diagnose() == []


def test_several_asking_children_are_named_and_child_picks_one(tree: ServerProcess) -> None:
    """Two children ask: an answer to the parent is refused with one line naming both (exit
    1, nothing answered); `--child` answers one; the parent's next answer then goes to the
    only child still asking; a `--child` that is no child of the parent is refused."""
    parent = tree.start_run("two")
    asking = _asking(tree, parent, 2)
    ids = sorted(n["runId"] for n in asking)
    refused = tree.cli("checkpoint", "answer", parent, "--value", "1")
    assert refused.returncode == 1
    line = _one_error_line(refused)
    assert "waits on 2 child runs for a checkpoint" in line
    assert all(run_id in line for run_id in ids)
    assert "--child RUN" in line
    stranger = tree.start_run("ask")
    _asking_self(tree, stranger)
    bad = tree.cli("checkpoint", "answer", parent, "--value", "1", "--child", stranger)
    assert bad.returncode == 1
    assert f"run {stranger} is not a child run of {parent}" in _one_error_line(bad)
    first = tree.cli("checkpoint", "answer", parent, "--value", '"a"', "--child", ids[0],
                     "--json")  # fmt: skip
    assert first.returncode == 0, first.stderr
    receipt = json.loads(first.stdout)
    assert (receipt["runId"], receipt["via"]) == (ids[0], parent)
    _asking(tree, parent, 1)
    second = tree.cli("checkpoint", "answer", parent, "--value", '"b"')
    assert second.returncode == 0, second.stderr
    assert ids[1] in second.stdout
    view = tree.wait_status(parent, "completed")
    assert sorted(c["output"]["answer"] for c in view["output"]) == ["a", "b"]


def _asking_self(server: ServerProcess, run_id: str) -> None:
    server.wait_status(run_id, "waiting")


def test_a_childs_decision_is_answered_through_its_parent(tree: ServerProcess) -> None:
    """The client's `answer_decision(parent, ...)` chooses in the child's decision (the
    receipt names the child, `via` the parent); a checkpoint answer sent to that parent is
    refused naming the child and what it waits on."""
    parent = tree.start_run("decides")
    (child,) = _asking(tree, parent, 1)
    with tree.client() as client:
        with pytest.raises(RejectedError) as refused:
            client.answer_checkpoint(parent, "yes")
        assert f"its child run {child['runId']} (node 'pick', decision)" in str(refused.value)
        receipt = client.answer_decision(parent, "yes")
    assert (receipt["runId"], receipt["via"], receipt["choice"]) == (child["runId"], parent, "yes")
    view = tree.wait_status(parent, "completed")
    assert view["output"]["choice"] == "yes"
