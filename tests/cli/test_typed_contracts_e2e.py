"""Typed contracts end to end: a real server, real runners and the real CLI.

A workflow declares its input, an agent step's output and a checkpoint's answer with
Pydantic models: a wrong input is refused at `run start` with the path of the wrong field
and nothing stored; a wrong submission or answer is rejected with its path (the request
stays open) and a right one is accepted as the model's JSON; `run show` and `interaction
list` show the schemas; and a runner of a workflow without schemas never imports the JSON
Schema library.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(180)

TYPED = """
import sys

from pydantic import BaseModel, Field

from pi_workflows import Rejected, Workflow, agent, checkpoint, compute, edge


class Item(BaseModel):
    path: str
    line: int


class Job(BaseModel):
    items: list[Item]


class Plan(BaseModel):
    title: str = Field(description="What the plan is called")
    steps: list[Item]
    note: str | None = None


class Approval(BaseModel):
    approve: bool
    reason: str = ""


def check_plan(output, ctx):
    if "note" not in output:  # validate sees the model's JSON, defaults filled in
        raise Rejected("validate saw the raw submission")
    if output["title"] == "no":
        raise Rejected("the title may not be 'no'")


def finish(ctx):
    loaded = "jsonschema" in sys.modules
    return {"plan": ctx.outputs["plan"], "approval": ctx.outputs["approve"], "loaded": loaded}


workflow = Workflow(
    "typed",
    start="plan",
    input=Job,
    nodes={
        "plan": agent(
            lambda ctx: f"Plan the edits of {len(ctx.input['items'])} files",
            output=Plan,
            validate=check_plan,
        ),
        "approve": checkpoint(
            lambda ctx: {"question": "Apply the plan?", "plan": ctx.outputs["plan"]["title"]},
            answer=Approval,
        ),
        "done": compute(finish),
    },
    edges=[edge("plan", "approve"), edge("approve", "done")],
)
"""

PLAIN = """
import sys

from pi_workflows import Workflow, checkpoint, compute, edge


def loaded(ctx):
    return sorted(m for m in sys.modules if m.split(".")[0] in ("jsonschema", "pydantic"))


workflow = Workflow(
    "plain",
    start="ask",
    nodes={"ask": checkpoint("Go on?"), "report": compute(loaded)},
    edges=[edge("ask", "report")],
)
"""

GOOD_INPUT = {"items": [{"path": "a.py", "line": 1}]}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server whose project has the `typed` and `plain` workflows."""
    process = ServerProcess(tmp_path)
    process.write_workflow("typed", TYPED)
    process.write_workflow("plain", PLAIN)
    process.start()
    yield process
    process.cleanup()


def pw(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `pi-workflows --home HOME ARGS` in a child process, from the project directory."""
    return server.cli(*args)


def ok(server: ServerProcess, *args: str) -> str:
    """Run a command that must succeed; its stdout."""
    result = pw(server, *args)
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a command that exited 1, without its prefix."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    [line] = result.stderr.splitlines()
    return line.removeprefix("pi-workflows: error: ")


def counts(server: ServerProcess) -> tuple[int, int]:
    """How many runs and command receipts the database holds."""
    [(runs,)] = server.query("SELECT COUNT(*) FROM runs")
    [(receipts,)] = server.query("SELECT COUNT(*) FROM server_commands")
    return runs, receipts


def test_a_wrong_input_is_refused_at_run_start_and_nothing_is_stored(
    server: ServerProcess,
) -> None:
    """`run start` with an input that breaks `input=Job` exits 1 with one line naming the
    first wrong field; no run and no receipt is stored; the right input starts a run."""
    before = counts(server)
    items = [{"path": "a", "line": 1}, {"path": "b", "line": 2}, {"path": "c", "line": "x"}]
    bad = {"items": items}
    refused = pw(server, "run", "start", "typed", "--input", json.dumps(bad))
    assert error_line(refused) == (
        "the input does not match the input schema of workflow 'typed':"
        " input.items[2].line: 'x' is not of type 'integer'"
    )
    missing = pw(server, "run", "start", "typed", "--input", "{}")
    assert error_line(missing).endswith("input: 'items' is a required property")
    assert counts(server) == before
    run_id = ok(server, "run", "start", "typed", "--input", json.dumps(GOOD_INPUT)).strip()
    server.wait_status(run_id, "waiting")


def test_a_step_and_a_checkpoint_take_only_what_their_models_accept(
    server: ServerProcess,
) -> None:
    """A wrong output is rejected with its path and the step stays open; the right one is
    accepted as the model's JSON (defaults filled in, seen so by `validate`); the
    checkpoint's Pydantic answer works the same way; `run show` and `interaction list`
    show the prompt, the expected output and the schemas while each waits."""
    run_id = ok(server, "run", "start", "typed", "--input", json.dumps(GOOD_INPUT)).strip()
    server.wait_status(run_id, "waiting")

    shown = ok(server, "run", "show", run_id)
    assert "Plan the edits of 1 files" in shown
    assert 'A JSON object "Plan" with these fields:' in shown
    assert "- title (string, required): What the plan is called" in shown
    assert "It must match this JSON Schema:" in shown
    listed = ok(server, "interaction", "list")
    assert "typed/plan  agent  pending" in listed
    assert "  prompt    Plan the edits of 1 files" in listed
    assert '  expected  A JSON object "Plan" with these fields:' in listed
    assert "It must match this JSON Schema: {" in listed

    wrong = {"title": "t", "steps": [{"path": "a.py", "line": "x"}]}
    rejected = pw(server, "interaction", "submit", run_id, "--output", json.dumps(wrong))
    assert error_line(rejected) == (
        "the output does not match the step's schema: output.steps[0].line: Input should be a"
        " valid integer, unable to parse string as an integer (got 'x'); correct it and submit"
        " again"
    )
    assert server.wait_status(run_id, "waiting")["currentNode"] == "plan"
    right = {"title": "t", "steps": [{"path": "a.py", "line": 3}]}
    ok(server, "interaction", "submit", run_id, "--output", json.dumps(right))
    view = server.wait_status(run_id, "waiting")
    assert view["waitingOn"]["nodeId"] == "approve"

    request = view["waitingOn"]["request"]
    assert request["answerSchema"]["title"] == "Approval"
    shown = ok(server, "run", "show", run_id)
    for text in ("Apply the plan?", "plan", 'A JSON object "Approval"', "- approve (boolean,"):
        assert text in shown
    listed = ok(server, "interaction", "list")
    assert "  question  Apply the plan?" in listed
    assert "  plan      t" in listed
    assert '  expected  A JSON object "Approval" with these fields:' in listed

    refused = pw(server, "checkpoint", "answer", run_id, "--value", '{"approve": "maybe"}')
    assert error_line(refused).startswith(
        "the answer does not match the checkpoint's schema: answer.approve: Input should be a"
        " valid boolean"
    )
    ok(server, "checkpoint", "answer", run_id, "--value", '{"approve": true}')
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["status"] == "completed", done
    assert done["output"] == {
        "plan": {"title": "t", "steps": [{"path": "a.py", "line": 3}], "note": None},
        "approval": {"approve": True, "reason": ""},
        "loaded": True,  # a runner of a typed workflow loads the library (for the schemas)
    }
    assert server.query(
        "SELECT status FROM interactive_submissions ORDER BY submitted_at, rowid"
    ) == [("rejected",), ("accepted",), ("rejected",), ("accepted",)]


def test_a_runner_of_a_workflow_without_schemas_never_imports_the_schema_library(
    server: ServerProcess,
) -> None:
    """Through resolve, start, the checkpoint's validation and the next node, a workflow
    without contracts imports neither jsonschema nor pydantic."""
    run_id = ok(server, "run", "start", "plain").strip()
    server.wait_status(run_id, "waiting")
    ok(server, "checkpoint", "answer", run_id, "--value", '"yes"')
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == []


CHILD = """
from pi_workflows import Workflow, compute

workflow = Workflow(
    "child",
    start="echo",
    input={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    nodes={"echo": compute(lambda ctx: ctx.input)},
)
"""

PARENT = """
from pi_workflows import Workflow, subworkflow

workflow = Workflow(
    "parent",
    start="call",
    nodes={"call": subworkflow("child", input=lambda ctx: {"n": ctx.input["n"]})},
)
"""


def test_a_child_run_with_a_wrong_input_is_never_started(server: ServerProcess) -> None:
    """A subworkflow whose input breaks the child's input schema fails its node with the
    path of the wrong field, and no child run is stored; a right input runs the child."""
    server.write_workflow("child", CHILD)
    server.write_workflow("parent", PARENT)
    run_id = server.start_run("parent", {"n": "one"})
    failed = server.wait_status(run_id, {"failed", "completed"})
    assert failed["status"] == "failed"
    assert failed["error"].endswith(
        "node 'call': the child's input does not match the input schema of workflow 'child':"
        " input.n: 'one' is not of type 'integer'"
    )
    assert server.query("SELECT COUNT(*) FROM runs") == [(1,)]
    good = server.start_run("parent", {"n": 2})
    assert server.wait_status(good, {"failed", "completed"})["output"] == {"n": 2}
