"""`run fork`, `run upgrade`, `run list --lineage`, `run restart` of a completed run and the
lineage `run show` prints, against a real server.

Each command runs in-process (click's runner) against a real server process; what it prints
is checked line by line, and ``state diagnose`` is clean at the end of each test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pi_workflows.cli.main import cli

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

STEPS = """
from pi_workflows import Workflow, checkpoint, compute, edge
from greeting import greet

workflow = Workflow(
    "steps",
    start="a",
    nodes={
        "a": compute(lambda ctx: {"n": 1}),
        "ask": checkpoint(lambda ctx: {"question": "name?"}),
        "greet": compute(lambda ctx: {"text": greet(ctx.outputs["ask"]["name"])}),
    },
    edges=[edge("a", "ask"), edge("ask", "greet")],
)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server for one test, always cleaned up."""
    process = ServerProcess(tmp_path)
    process.start()
    yield process
    process.cleanup()


def invoke(server: ServerProcess, *args: str) -> Result:
    """`pi-workflows --home HOME ARGS` in-process, with the server's HOME."""
    return CliRunner().invoke(
        cli, ["--home", str(server.home), *args], env={"HOME": str(server.user_home)}
    )


def _greeting(server: ServerProcess, word: str) -> None:
    server.write_module("greeting", f"def greet(name):\n    return {word!r} + ' ' + name\n")


def _answered(server: ServerProcess) -> str:
    """A run of ``steps`` answered ``Ada`` and completed."""
    _greeting(server, "hello")
    server.write_workflow("steps", STEPS)
    run_id = server.start_run("steps")
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.answer_checkpoint(run_id, {"name": "Ada"})
    assert server.wait_status(run_id, "completed")["output"] == {"text": "hello Ada"}
    return run_id


def test_fork_prints_what_it_carried_and_lineage_shows_both_ways(server: ServerProcess) -> None:
    """`run fork --from greet` on changed code prints the fork and what it carried; the
    fork completes on the new code with the kept answer; `run show` names source, fork
    and carried attempts; `run list --lineage` lists the fork."""
    source = _answered(server)
    _greeting(server, "bye")
    forked = invoke(server, "run", "fork", source, "--from", "greet")
    assert forked.exit_code == 0, forked.output
    lines = forked.stdout.splitlines()
    fork = lines[0].split()[2]
    assert lines[0] == (
        f"forked run {fork} from run {source} at node greet (visit 1): 2 node result(s)"
        " and 0 settled effect(s) carried"
    )
    assert lines[1] == "no managed effect lies ahead of it"
    assert server.wait_status(fork, "completed")["output"] == {"text": "bye Ada"}
    shown = " ".join(invoke(server, "run", "show", fork).stdout.split())
    assert f"forked from {source} at node greet (visit 1); 2 node result(s) carried" in shown
    assert shown.count("completed (carried)") == 2
    assert f"forks {fork} (completed)" in " ".join(
        invoke(server, "run", "show", source).stdout.split()
    )
    listed = json.loads(invoke(server, "run", "list", "--lineage", source, "--json").stdout)
    assert [(r["runId"], r["via"], r["from"]) for r in listed["runs"]] == [(fork, "fork", source)]
    human = invoke(server, "run", "list", "--lineage", source).stdout
    assert f"runs that came from run {source}" in human
    assert "(fork)" in human
    assert server.diagnose() == []


def test_fork_errors_are_one_line(server: ServerProcess) -> None:
    """An unknown run, a node the workflow lacks, a node never reached and a visit never
    made: each exits 1 with one line on stderr."""
    source = _answered(server)
    server.write_workflow("steps", STEPS.replace('"greet": compute', '"greet": compute').replace(
        'edge("ask", "greet")]', 'edge("ask", "greet"), edge("greet", "late")]'
    ).replace(
        '"greet": compute(lambda ctx: {"text": greet(ctx.outputs["ask"]["name"])}),',
        '"greet": compute(lambda ctx: {"text": greet(ctx.outputs["ask"]["name"])}),\n'
        '        "late": compute(lambda ctx: 1),',
    ))  # fmt: skip
    cases = [
        (["run_nope", "--from", "a"], "no run with id run_nope"),
        ([source, "--from", "zz"], "workflow steps has no node zz (its nodes: a, ask, greet"),
        ([source, "--from", "late"], f"run {source} never reached node late"),
        ([source, "--from", "ask", "--visit", "2"], "there is no visit 2"),
    ]
    for args, words in cases:
        result = invoke(server, "run", "fork", *args)
        assert result.exit_code == 1, result.output
        assert result.stdout == ""
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert words in result.stderr
    assert server.diagnose() == []


def test_a_run_parked_on_changed_code_shows_and_takes_its_upgrade(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A run parked workflowSourceChanged: `run show` prints the Upgrade section and offers
    `run upgrade`; `--dry-run` prints the plan; the upgrade continues the run, whose
    question is asked again from the new code and answered to completion."""
    _greeting(server, "hello")
    server.write_workflow("steps", STEPS)
    run_id = server.start_run("steps")
    server.wait_status(run_id, "waiting")
    _greeting(server, "bye")
    with server.client() as client, pytest.raises(Exception, match="workflowSourceChanged"):
        client.answer_checkpoint(run_id, {"name": "Ada"})
    server.wait_status(run_id, "paused")
    shown = invoke(server, "run", "show", run_id).stdout
    assert "Upgrade (pi-workflows run upgrade)" in shown
    assert "continue it on the new code" in " ".join(shown.split())
    assert "modules changed: greeting.py" in shown
    dry = invoke(server, "run", "upgrade", run_id, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.splitlines()[0] == f"run {run_id} (paused) can be upgraded:"
    assert "then it continues" in dry.stdout
    done = invoke(server, "run", "upgrade", run_id)
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[0].startswith(f"run {run_id} upgraded, now ")
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.answer_checkpoint(run_id, {"name": "Ada"})
    assert server.wait_status(run_id, "completed")["output"] == {"text": "bye Ada"}
    again = invoke(server, "run", "upgrade", run_id)
    assert again.exit_code == 1
    assert "it has ended" in again.stderr
    assert server.diagnose() == []


def test_a_completed_run_restarts_and_says_how_its_last_round_ended(
    server: ServerProcess,
) -> None:
    """`run restart` of a completed run queues a new round; `run show` says the round
    before ended completed."""
    run_id = _answered(server)
    result = invoke(server, "run", "restart", run_id)
    assert result.exit_code == 0, result.output
    server.wait_status(run_id, "waiting")
    shown = invoke(server, "run", "show", run_id).stdout
    assert "(round 1; round 0 ended completed)" in " ".join(shown.split())
    assert server.diagnose() == []
