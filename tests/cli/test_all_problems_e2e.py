"""A workflow file with several problems reports all of them at once, each at the line of
the node or edge it concerns: `workflows check` (text and `--json`) and `run start`, through
the CLI in a real process against a real server."""

from __future__ import annotations

import json
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

# Line 6: a retry on an agent step; line 7: a node no route reaches; line 11: an edge to a
# node that does not exist.
BROKEN = textwrap.dedent(
    """\
    from pi_workflows import Workflow, agent, compute, edge, retry

    workflow = Workflow(
        "broken", start="ask",
        nodes={
            "ask": agent("Say hi", "a greeting", retry=retry(attempts=2)),
            "lost": compute(lambda ctx: 1),
            "a": compute(lambda ctx: 1),
        },
        edges=[edge("ask", "a"),
               edge("a", "nowhere")],
    )
    """
)
EXPECTED = [
    (
        6,
        "workflow 'broken', node 'ask': agent nodes cannot declare retry: a step is asked"
        " again through validate (raise Rejected)",
    ),
    (7, "workflow 'broken', node 'lost': unreachable from the start node 'ask'"),
    (11, "workflow 'broken', node 'a': edge to unknown node 'nowhere'"),
]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server whose project holds the broken workflow."""
    process = ServerProcess(tmp_path)
    process.write_workflow("broken", BROKEN)
    process.start()
    yield process
    process.cleanup()


def pw(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`pi-workflows --home HOME ARGS` as a child process, from the project directory."""
    return server.cli(*args, timeout=60)


def test_workflows_check_lists_every_problem_at_its_line_and_counts_them(
    server: ServerProcess,
) -> None:
    """Three problems, three `FILE:LINE: error: MESSAGE` lines in file order, then the
    count; exit 1."""
    path = server.project / ".pi" / "workflows" / "broken.workflow.py"
    done = pw(server, "workflows", "check", str(path))
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        *(f"{path}:{line}: error: {message}" for line, message in EXPECTED),
        "3 problems in 1 of 1 file",
    ]


def test_workflows_check_json_gives_each_problem_with_its_line(server: ServerProcess) -> None:
    """`--json`: the file's problems as `{code, file, line, message}` and their count."""
    path = server.project / ".pi" / "workflows" / "broken.workflow.py"
    done = pw(server, "workflows", "check", str(path), "--json")
    assert done.returncode == 1, done.stderr
    (result,) = json.loads(done.stdout)["results"]
    assert (result["ok"], result["problemCount"]) == (False, 3)
    assert [(p["line"], p["message"]) for p in result["problems"]] == EXPECTED
    assert {(p["code"], p["file"]) for p in result["problems"]} == {("workflowInvalid", str(path))}


def test_run_start_of_a_broken_file_names_the_first_problem_and_carries_them_all(
    server: ServerProcess,
) -> None:
    """The load error at run start is one line naming the first problem, how many more
    there are and the command that lists them; under `--json` it carries the whole list."""
    path = server.project / ".pi" / "workflows" / "broken.workflow.py"
    done = pw(server, "run", "start", "broken")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"pi-workflows: error: {path}:6: {EXPECTED[0][1]} (and 2 more problems:"
        f" pi-workflows workflows check {path})"
    ]
    as_json = pw(server, "run", "start", "broken", "--json")
    assert as_json.returncode == 1
    error = json.loads(as_json.stdout)["error"]
    assert (error["code"], error["problemCount"]) == ("workflowInvalid", 3)
    assert [(p["file"], p["line"], p["message"]) for p in error["problems"]] == [
        (str(path), line, message) for line, message in EXPECTED
    ]
    with server.client() as client:
        assert client.list_runs() == []  # nothing started
