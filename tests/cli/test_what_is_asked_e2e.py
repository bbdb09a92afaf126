"""What must be answered, shown in full: `run show` and `interaction list` (human form)
print an agent step's prompt and expected output, every key of a checkpoint's request and a
decision's title, details and choices. Real server, real runners, the real CLI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(180)

STEP = """
from pi_workflows import Workflow, agent

workflow = Workflow("step", start="classify", nodes={
    "classify": agent(lambda ctx: "Classify the report in issue 7",
                      expected_output='{"route": "fix" or "skip", "reason": "..."}',
                      allowed_tools=["read"]),
})
"""
ASK = """
from pi_workflows import Workflow, checkpoint

workflow = Workflow("ask", start="confirm", nodes={
    "confirm": checkpoint(lambda ctx: {"question": "Delete these files?",
                                       "files": ["a.py", "b.py"], "severity": "high"}),
})
"""
DECIDE = """
from pi_workflows import Workflow, choice, compute, human_decision, switch

workflow = Workflow("decide", start="approve", nodes={
    "approve": human_decision(title="Ship release 1.2?", details="3 fixes, 1 feature",
                              choices=[choice("ship", "Ship it"),
                                       choice("hold", "Hold", "Keep it for later")]),
    "ship": compute(lambda ctx: 1),
    "hold": compute(lambda ctx: 0),
}, edges=[switch("approve", on="$.choice", cases={"ship": "ship", "hold": "hold"})])
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server with a waiting agent step, checkpoint and decision."""
    process = ServerProcess(tmp_path)
    for name, source in (("step", STEP), ("ask", ASK), ("decide", DECIDE)):
        process.write_workflow(name, source)
    process.start()
    yield process
    process.cleanup()


def ok(server: ServerProcess, *args: str) -> str:
    """Run `pi-workflows --home HOME ARGS` (80 columns, not a terminal); its stdout."""
    result = server.cli(*args)
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def waiting(server: ServerProcess, workflow: str) -> str:
    """Start `workflow` and wait until it waits on its request; the run id."""
    run_id = server.start_run(workflow)
    server.wait_status(run_id, "waiting")
    return run_id


def test_run_show_prints_an_agent_steps_prompt_and_expected_output(
    server: ServerProcess,
) -> None:
    """The prompt, the expected output and the tool limit, not only the prompt."""
    shown = ok(server, "run", "show", waiting(server, "step"))
    assert "prompt      Classify the report in issue 7" in shown
    assert 'expected    {"route": "fix" or "skip", "reason": "..."}' in shown
    assert "tools       read and workflow" in shown


def test_run_show_prints_every_key_of_a_checkpoints_request(server: ServerProcess) -> None:
    """The question and each other key of the request, with its value."""
    shown = ok(server, "run", "show", waiting(server, "ask"))
    assert "question    Delete these files?" in shown
    assert 'files       ["a.py", "b.py"]' in shown
    assert "severity    high" in shown


def test_run_show_prints_a_decisions_title_details_and_choices(server: ServerProcess) -> None:
    """Every choice with its id, label and description, and the details."""
    shown = ok(server, "run", "show", waiting(server, "decide"))
    assert "title       Ship release 1.2?" in shown
    assert "details     3 fixes, 1 feature" in shown
    assert "choices     ship: Ship it" in shown
    assert "hold: Hold - Keep it for later" in shown


def test_interaction_list_prints_what_each_open_request_asks(server: ServerProcess) -> None:
    """Under each request's line, indented: what it asks, in the same rows as `run show`."""
    step, ask, decide = (waiting(server, name) for name in ("step", "ask", "decide"))
    listed = ok(server, "interaction", "list")
    blocks = listed.split("\nreq_")
    assert [block.split("  run ")[1].split()[0] for block in blocks] == [step, ask, decide]
    assert "  prompt    Classify the report in issue 7\n" in blocks[0]
    assert '  expected  {"route": "fix" or "skip", "reason": "..."}\n' in blocks[0]
    assert "  question  Delete these files?\n" in blocks[1]
    assert '  files     ["a.py", "b.py"]\n' in blocks[1]
    assert "  severity  high" in blocks[1]
    assert "  title    Ship release 1.2?\n" in blocks[2]
    assert "  details  3 fixes, 1 feature\n" in blocks[2]
    assert "  choices  ship: Ship it\n           hold: Hold - Keep it for later" in blocks[2]
