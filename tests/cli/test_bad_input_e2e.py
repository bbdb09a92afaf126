"""Bad input through the real CLI and the real server: one clear line and a non-zero exit."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pi_workflows.client import RejectedError

from support.server import ServerProcess


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server with a project that has one good and one broken workflow."""
    process = ServerProcess(tmp_path)
    process.write_workflow(
        "good",
        "from pi_workflows import Workflow, compute\n"
        "workflow = Workflow('good', start='a', nodes={'a': compute(lambda ctx: 1)}, edges=[])\n",
    )
    process.write_workflow(
        "broken",
        "from pi_workflows import Workflow, compute, edge\n"
        "workflow = Workflow('broken', start='a', nodes={'a': compute(lambda ctx: 1)},"
        " edges=[edge('a', 'nowhere')])\n",
    )
    process.start()
    yield process
    process.cleanup()


def pw(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `pi-workflows --home HOME ARGS` in a child process, from the project directory."""
    return server.cli(*args, timeout=60)


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pi-workflows: error: ")
    return lines[0]


def test_an_unknown_workflow_is_one_line(server: ServerProcess) -> None:
    """Starting a workflow that does not exist names it and exits 1."""
    result = pw(server, "run", "start", "no-such-flow")
    assert result.returncode == 1
    assert "no-such-flow" in _one_error_line(result)


def test_a_graph_error_names_the_workflow_and_the_node(server: ServerProcess) -> None:
    """An edge to an unknown node is reported at start with the workflow and node named."""
    result = pw(server, "run", "start", "broken")
    assert result.returncode == 1
    line = _one_error_line(result)
    assert "broken" in line
    assert "nowhere" in line
    assert server.query("SELECT COUNT(*) FROM runs") == [(0,)]


def test_an_unknown_run_id_is_one_line(server: ServerProcess) -> None:
    """Commands on a run that does not exist name it and exit 1."""
    for command in (["run", "show", "run_missing"], ["run", "cancel", "run_missing"]):
        result = pw(server, *command)
        assert result.returncode == 1
        assert "run_missing" in _one_error_line(result)


def test_workflows_list_shows_project_and_builtin_workflows(server: ServerProcess) -> None:
    """`workflows list --json` lists the project's workflows and the built-in demo."""
    result = pw(server, "workflows", "list", "--json", "--project", str(server.project))
    assert result.returncode == 0, result.stderr
    listed = {(w["name"], w["origin"]) for w in json.loads(result.stdout)["workflows"]}
    assert {("good", "project"), ("broken", "project"), ("demo", "builtin")} <= listed


def test_start_wait_prints_the_run_and_exits_0(server: ServerProcess) -> None:
    """`run start --wait` returns when the run completes and exits 0."""
    result = pw(server, "run", "start", "good", "--wait", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["run"]["status"] == "completed"


def test_an_overlong_cancel_reason_is_one_line_and_changes_nothing(server: ServerProcess) -> None:
    """A cancellation reason over the 1000-character bound is refused in one line naming the
    field and the bound; the run is not cancelled."""
    run_id = server.start_run("good")
    server.wait_status(run_id, "completed")
    before = server.run(run_id)
    result = pw(server, "run", "cancel", run_id, "--reason", "x" * 1001)
    assert result.returncode == 1
    line = _one_error_line(result)
    assert "'reason' is 1001 characters long; the limit is 1000" in line
    assert server.run(run_id)["revision"] == before["revision"]


@pytest.mark.parametrize(
    ("operation", "payload", "field"),
    [
        ("effect.resolve", {"effectId": "e", "resolution": "rejected", "reason": "r" * 1001},
         "'reason'"),
        ("decision.answer", {"choice": "c" * 201}, "'choice'"),
        ("workflowMessage.report", {"sessionId": "s", "coordinatorEpoch": 1,
                                    "present": [{"workflowMessageId": "m", "entryId": "e" * 201}]},
         "ids must be at most 200"),
        ("workflowTurn.report", {"sessionId": "s", "coordinatorEpoch": 1, "event": "ended",
                                 "stopReason": "error", "errorMessage": "x" * 70_000},
         "'errorMessage'"),
        ("state.backup", {"path": "/" + "p" * 5000}, "'path'"),
    ],
)  # fmt: skip
def test_every_free_text_field_is_bounded(
    server: ServerProcess, operation: str, payload: dict[str, object], field: str
) -> None:
    """Free text past its bound is refused ``badRequest`` with one line naming the field."""
    run_id = server.start_run("good")
    with server.client() as client, pytest.raises(RejectedError) as refused:
        client.call(operation, payload, run_id=run_id if operation == "decision.answer" else None)
    assert refused.value.code == "badRequest"
    assert field in refused.value.message
    assert "\n" not in refused.value.message
