"""The runner child's start-up: handshake, environment, and the replies that end it."""

from __future__ import annotations

from typing import Any

from pi_workflows.protocol import Outcome, RunnerMessage

from .peer import Project, ScriptedServer, envelope_for

_WORKFLOW = """
import os

from pi_workflows import Workflow, compute

def env(ctx):
    return sorted(name for name in os.environ if name.startswith("PI_WORKFLOWS_"))

workflow = Workflow("hello", "env", {"env": compute(env)})
"""


def _server(project: Project, **kwargs: Any) -> ScriptedServer:
    project.write("hello.workflow.py", _WORKFLOW)
    return ScriptedServer(project, envelope_for(project.load("hello"), project), **kwargs)


def test_handshake_sends_ready_with_pid_then_reads_state(project: Project) -> None:
    """After launch the child sends ready with its pid, then reads the run state once."""
    server = _server(project)
    assert server.run() == 0
    assert server.kinds()[:3] == ["ready", "state.get", "node.start"]
    assert server.proc is not None
    assert server.sent("ready") == [{"pid": server.proc.pid}]


def test_workflow_code_never_sees_pi_workflows_variables(project: Project) -> None:
    """Every PI_WORKFLOWS_* variable (the channel fd included) is gone before workflow code runs."""
    server = _server(project, extra_env={"PI_WORKFLOWS_HOME": "/secret/state"})
    assert server.run() == 0
    assert server.finished == {"type": "finish", "status": "completed", "output": []}


def _claim_lost(server: ScriptedServer, message: RunnerMessage) -> tuple[Outcome, None]:
    return Outcome.CLAIM_LOST, None


def test_claim_lost_reply_ends_the_child_without_another_message(project: Project) -> None:
    """A claimLost reply makes the child exit 0 at once and send nothing else."""
    server = _server(project, hooks={"state.get": _claim_lost})
    assert server.run() == 0
    assert server.kinds() == ["ready", "state.get"]


def test_claim_lost_reply_to_ready_ends_the_child(project: Project) -> None:
    """Even the ready reply can say claimLost; the child then never loads or executes."""
    server = _server(project, hooks={"ready": _claim_lost})
    assert server.run() == 0
    assert server.kinds() == ["ready"]


def _conflict(server: ScriptedServer, message: RunnerMessage) -> tuple[Outcome, None]:
    return Outcome.CONFLICT, None


def test_unexpected_outcome_on_a_proposal_exits_70_with_one_stderr_line(project: Project) -> None:
    """A conflict on a proposal is written as one stderr line and the child exits with 70."""
    server = _server(project, hooks={"node.start": _conflict})
    assert server.run() == 70
    assert server.kinds() == ["ready", "state.get", "node.start"]
    lines = server.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "node.start was answered conflict" in lines[0]


def test_stop_command_instead_of_start_ends_the_child_quietly(project: Project) -> None:
    """A stop command in place of start/resume/restart ends the child with 0, nothing sent."""
    server = _server(project, command="stop")
    assert server.run() == 0
    assert server.kinds() == ["ready"]
