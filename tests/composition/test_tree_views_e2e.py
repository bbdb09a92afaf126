"""What `run show` and `run list --children` say about a tree, through the real CLI in child
processes at 80 columns against a real server: exact counts by status in each join's
summary (a cancelled child is neither completed nor failed), every join of the run (an
earlier fan_out's failed child stays on the page), the parent of each child in `run list
--children`, and detached children shown as agent work, never as needing a person."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

LEAF = """
from pi_workflows import Workflow, compute

def go(ctx):
    if ctx.input["n"] == 1:
        raise ValueError("item 1 fails")
    return {"n": ctx.input["n"]}

workflow = Workflow("leaf", start="go", nodes={"go": compute(go)})
"""

HELD = """
from pi_workflows import Workflow, checkpoint

workflow = Workflow("held", start="ask", nodes={"ask": checkpoint({"question": "go?"})})
"""

TREE = """
from pi_workflows import Workflow, fan_out, switch

workflow = Workflow(
    "tree", start="first",
    nodes={
        "first": fan_out("leaf", items=lambda ctx: [0, 1, 2], input=lambda ctx, n: {"n": n}),
        "second": fan_out("held", items=lambda ctx: [0, 1, 2], input=lambda ctx, n: {},
                          concurrency=2),
    },
    edges=[switch("first", on="$result.outcome", cases={"ok": "second"}, failed="second")],
)
"""

ASKER = """
from pi_workflows import Workflow, agent

workflow = Workflow("asker", start="ask", nodes={"ask": agent("Say hi", "a greeting")})
"""

FANNED = """
from pi_workflows import Workflow, fan_out

workflow = Workflow("fanned", start="all",
                    nodes={"all": fan_out("asker", items=lambda ctx: [0, 1], concurrency=2)})
"""

# A headless Pi stand-in that never answers: it lives until its stdin closes.
QUIET_PI = """#!{python}
import sys
while sys.stdin.buffer.read(1):
    pass
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server (not yet started) whose output is 80 columns wide."""
    process = ServerProcess(tmp_path, env={"COLUMNS": "80"})
    yield process
    process.cleanup()


def pw(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    done = server.cli(*args, timeout=60)
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 80, done.stdout
    return done


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_every_join_is_shown_with_exact_counts_and_run_list_names_parents(
    server: ServerProcess,
) -> None:
    """An earlier fan_out with a failed child and a later one cancelled with the parent:
    `run show` gives each join's exact counts (2 completed, 1 failed; then 3 cancelled,
    never counted as failed) and lists the earlier join's failed child; `run list
    --children` names each child's parent."""
    server.write_workflow("leaf", LEAF)
    server.write_workflow("held", HELD)
    server.write_workflow("tree", TREE)
    server.start()
    parent = server.start_run("tree")
    wait_for(
        lambda: len(server.run(parent).get("joins") or []) == 2
        and server.run(parent)["joins"][-1]["started"] == 2,
        60, "the second fan_out to start two children",
    )  # fmt: skip
    first_children = {c["item"]: c["runId"] for c in server.run(parent)["joins"][0]["children"]}
    shown = _flat(pw(server, "run", "show", parent).stdout)
    assert "Children of first (fan_out of leaf): 2 completed, 1 failed of 3; joined" in shown
    assert f"1 {first_children[1]} failed" in shown, shown
    assert "Children of second (fan_out of held): 2 waiting, 1 not started of 3;" in shown
    with server.client() as client:
        client.cancel(parent)
    server.wait_status(parent, "cancelled")
    wait_for(
        lambda: server.run(parent)["joins"][-1]["counts"].get("cancelled") == 2,
        60, "the two started children to end cancelled",
    )  # fmt: skip
    counts = server.run(parent)["joins"][-1]["counts"]
    assert "failed" not in counts, counts
    assert "completed" not in counts, counts
    assert sum(counts.values()) == 3
    shown = _flat(pw(server, "run", "show", parent).stdout)
    assert "failed of 3; cancelled" not in shown
    assert f"1 {first_children[1]} failed" in shown, "the earlier join's failure stays"
    listed = pw(server, "run", "list", "--children").stdout
    lines = listed.splitlines()
    assert "run / parent" in lines[0]
    for child in first_children.values():
        row = next(i for i, line in enumerate(lines) if line.startswith(child))
        assert lines[row + 1].strip().startswith(parent), listed
    as_json = json.loads(server.cli("run", "list", "--children", "--json").stdout)
    assert {r["parentRunId"] for r in as_json["runs"] if r["runId"] != parent} == {parent}
    assert server.diagnose() == []


def test_detached_children_are_agent_work_not_a_persons(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A detached fan_out whose two children wait on agent steps, with one agent place: one
    is worked on by a headless agent, the other waits for a place; none is listed as
    needing a person."""
    program = tmp_path / "quiet-pi"
    program.write_text(QUIET_PI.format(python=sys.executable))
    program.chmod(0o755)
    server.write_workflow("asker", ASKER)
    server.write_workflow("fanned", FANNED)
    server.start(PI_WORKFLOWS_PI=str(program), PI_WORKFLOWS_MAX_AGENTS="1")
    parent = server.start_run("fanned", detached=True)

    def both() -> bool:
        work = server.run(parent).get("agentWork") or []
        return sorted(w["agent"] for w in work) == ["waiting", "working"]

    wait_for(both, 60, "one child worked on and one waiting for an agent place")
    view = server.run(parent)
    assert view["needsPerson"] == []
    shown = _flat(pw(server, "run", "show", parent).stdout)
    assert "Child runs that need a person" not in shown
    assert "Child runs with agent work (detached)" in shown
    assert "a headless agent works on agent ask" in shown
    assert "waits for an agent place for agent ask" in shown
    with server.client() as client:
        client.cancel(parent)
    server.wait_status(parent, "cancelled")
    assert server.diagnose() == []
