"""Small errors and wording through the real CLI against a real server: an unknown session
is not found, an unknown effect is not found before any warning, the protected-decision
refusal names the CLI's command, an agent step reads "an agent answer", and a restarted
run's times are its own round's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pi_workflows.cli.main import cli

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

FLOWS = {
    "pick": """
from pi_workflows import Workflow, choice, human_decision

workflow = Workflow("pick", start="d", nodes={
    "d": human_decision(title="Ship?", choices=[choice("yes"), choice("no")])})
""",
    "ask": """
from pi_workflows import Workflow, agent

workflow = Workflow("ask", start="a", nodes={"a": agent(prompt="Say hi", expected_output="{}")})
""",
    "flaky": """
from pathlib import Path
from pi_workflows import Workflow, compute

def once(ctx):
    marker = Path(ctx.input["marker"])
    if not marker.exists():
        marker.write_text("failed once")
        raise ValueError("the first round fails")
    return {"ok": True}

workflow = Workflow("flaky", start="a", nodes={"a": compute(once)})
""",
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path)
    for name, source in FLOWS.items():
        process.write_workflow(name, source)
    process.start()
    yield process
    process.cleanup()


def invoke(server: ServerProcess, *args: str) -> Result:
    return CliRunner().invoke(
        cli, ["--home", str(server.home), *args], env={"HOME": str(server.user_home)}
    )


def _one_line_error(result: Result) -> str:
    assert result.exit_code != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_an_unknown_session_is_not_found(server: ServerProcess) -> None:
    line = _one_line_error(invoke(server, "session", "show", "no-such-session"))
    assert "no session no-such-session" in line


def test_an_unknown_effect_is_not_found_before_any_warning(server: ServerProcess) -> None:
    line = _one_line_error(invoke(server, "effect", "resolve", "eff_nosuch", "--retry"))
    assert "no effect with id eff_nosuch" in line
    assert "warning" not in line


def test_the_protected_decision_refusal_names_the_clis_command(server: ServerProcess) -> None:
    run_id = server.start_run("pick")
    server.wait_status(run_id, "waiting")
    line = _one_line_error(invoke(server, "interaction", "submit", run_id, "--output", '"yes"'))
    assert "Protected human decisions cannot be answered by the workflow tool" in line
    assert f"pi-workflows decision answer {run_id} --choice ID" in line
    assert invoke(server, "decision", "answer", run_id, "--choice", "yes").exit_code == 0
    server.wait_status(run_id, "completed")


def test_an_agent_step_waits_for_an_agent_answer(server: ServerProcess) -> None:
    run_id = server.start_run("ask")
    server.wait_status(run_id, "waiting")
    shown = invoke(server, "run", "show", run_id).stdout
    assert "an agent answer at node a" in shown


def test_a_restarted_runs_times_are_its_own_rounds(server: ServerProcess, tmp_path: Path) -> None:
    run_id = server.start_run("flaky", {"marker": str(tmp_path / "marker")})
    first = server.wait_status(run_id, "failed")
    assert first["roundStartedAt"] == first["createdAt"]
    assert invoke(server, "run", "restart", run_id).exit_code == 0
    done = server.wait_status(run_id, "completed")
    assert done["roundStartedAt"] >= first["finishedAt"]
    assert done["createdAt"] == first["createdAt"]
    shown = invoke(server, "run", "show", run_id).stdout
    assert "restarted" in shown
