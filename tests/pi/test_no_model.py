"""A Pi without a model: its "Unknown provider: unknown" reaches people as "no model is
configured: ..." with where to configure one.

Pi reports `Unknown provider: unknown` when a turn starts and nothing (settings.json,
models.json, a login) gave it a model. The extension turns that into one plain line, so a
detached run's park detail and the person's notification say what is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pi.support.mock_provider import MockProvider
from pi.support.pi_rpc import MakePi, node_bin, pi_binary

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

STEP = """
from pi_workflows import Workflow, agent

workflow = Workflow(
    "step",
    start="classify",
    nodes={"classify": agent(prompt="Classify the report", expected_output='{"route": "fix"}')},
    edges=[],
)
"""
NO_MODEL = "no model is configured: add a provider to models.json and select it with"


@pytest.fixture
def server(root: Path) -> Iterator[ServerProcess]:
    """A started server whose headless agents are the real Pi, for a user whose Pi has no
    model: an agent directory with nothing in it."""
    process = ServerProcess(
        root,
        env={
            "PI_WORKFLOWS_PI": str(pi_binary()),
            "PATH": f"{node_bin()}{os.pathsep}{os.environ.get('PATH', '')}",
            "PI_OFFLINE": "1",
            "PI_TELEMETRY": "0",
            "PI_SKIP_VERSION_CHECK": "1",
            "NO_COLOR": "1",
        },
    )
    process.env.pop("PI_CODING_AGENT_DIR", None)
    (process.user_home / ".pi" / "agent").mkdir(parents=True)
    process.write_workflow("step", STEP)
    try:
        yield process.start()
    finally:
        process.cleanup()


def test_a_detached_run_whose_pi_has_no_model_parks_saying_so(
    server: ServerProcess, provider: MockProvider
) -> None:
    """The headless Pi has no model: the run parks `agentUnavailable` and its park detail
    says "no model is configured: ..." with the user's agent directory and `pi doctor`,
    instead of Pi's "Unknown provider: unknown"."""
    run_id = server.start_run("step", detached=True)

    parked = server.wait_status(run_id, {"paused", "completed", "failed"}, 90)

    agent = server.user_home / ".pi" / "agent"
    detail = parked["parkDetail"]
    assert (parked["status"], parked["parkReason"]) == ("paused", "agentUnavailable")
    assert f"the headless Pi's model turn ended with an error: {NO_MODEL}" in detail, detail
    assert f"both in {agent}, or log in with /login" in detail
    assert '(Pi said "Unknown provider: unknown")' in detail
    assert "check with `pi-workflows pi doctor`" in detail
    assert provider.requests() == []


def test_the_person_is_told_when_a_step_turn_has_no_model(
    root: Path, server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """A step presented in a Pi whose agent directory configures no model: the turn fails,
    and the person gets one error notification that says no model is configured and where
    to configure it."""
    empty = root / "empty-agent"
    empty.mkdir()
    pi = make_pi(session_id="no-model", env={"PI_CODING_AGENT_DIR": str(empty)})
    start = pi.mark()

    server.start_run("step", origin_session="no-model")

    note = pi.wait_notify(lambda r: NO_MODEL in str(r.get("message")), since=start)
    assert note["notifyType"] == "error"
    assert note["message"].startswith("pi-workflows: the workflow step's turn failed: ")
    assert f"both in {empty}, or log in with /login" in note["message"]
    assert provider.requests() == []
