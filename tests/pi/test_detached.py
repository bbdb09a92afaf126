"""Detached runs with the real Pi: the server's headless ``pi --mode rpc`` does the steps.

The server of these tests runs the real Pi binary as its headless agent
(``PI_WORKFLOWS_PI``), with the pinned Node first on ``PATH``, ``PI_OFFLINE=1`` and
``PI_TELEMETRY=0``; the user's own Pi configuration (``$HOME/.pi/agent`` of the server's
private ``HOME``) points at the scripted model. The tests check that a detached run is
completed by that agent, that a provider error parks the run with the provider's words, that
the agent is stopped (its whole process group gone, by its recorded pid) when the run ends,
pauses or is cancelled, and that the tool and ``/workflow start --detached`` start such runs
from a person's Pi without presenting them there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from pi.support.mock_provider import (
    MODEL_ID,
    PROVIDER,
    ChatRequest,
    MockProvider,
    Reply,
    failure,
    last_is_tool_result,
    request_id_in,
    text,
    tool_call,
    user_text_contains,
)
from pi.support.pi_rpc import MakePi, node_bin, pi_binary, workflows_cli
from pi.support.records import (
    content_text,
    result_text,
    session_file,
    tool_results,
    workflow_messages,
)
from pi_workflows.protocol.process_start import process_start

from support.server import ServerProcess, wait_for

STEP_MARK = "--- Workflow step ---"
TERMINAL_MARK = "--- Workflow run finished ---"
PROVIDER_ERROR = "the mock provider is down for maintenance"
RUN_ID = re.compile(r"\brun_[0-9a-z]+")

STEP = """
from pi_workflows import Rejected, Workflow, agent, compute, edge

def check(output, ctx):
    if output.get("route") not in ("fix", "skip"):
        raise Rejected("route must be fix or skip")

workflow = Workflow(
    "step",
    start="classify",
    nodes={
        "classify": agent(prompt="Classify the report", expected_output='{"route": "fix"}',
                          validate=check),
        "done": compute(lambda ctx: {"route": ctx.outputs["classify"]["route"]}),
    },
    edges=[edge("classify", "done")],
)
"""


@pytest.fixture
def server(root: Path, provider: MockProvider) -> Iterator[ServerProcess]:
    """A started server whose headless agents are the real Pi, and whose user's Pi
    configuration (``~/.pi/agent`` of the server's ``HOME``) selects the scripted model."""
    process = ServerProcess(
        root,
        env={
            "PI_WORKFLOWS_PI": str(pi_binary()),
            "PATH": f"{node_bin()}{os.pathsep}{os.environ.get('PATH', '')}",
            "PI_OFFLINE": "1",
            "PI_TELEMETRY": "0",
            "PI_SKIP_VERSION_CHECK": "1",
            "NO_COLOR": "1",
            # A step whose turn fails with a provider error is presented again soon (the
            # product waits 10 s, doubling).
            "PI_WORKFLOWS_TURN_RETRY_SECONDS": "0.2",
        },
    )
    process.env.pop("PI_CODING_AGENT_DIR", None)  # the agent must use the user's ~/.pi/agent
    agent_dir = process.user_home / ".pi" / "agent"
    agent_dir.mkdir(parents=True)
    (agent_dir / "models.json").write_text(json.dumps(provider.models_json()))
    user_settings(process, retry={"enabled": False})
    process.write_workflow("step", STEP)
    try:
        yield process.start()
    finally:
        process.cleanup()


# --- helpers ---------------------------------------------------------------------------------


def user_settings(server: ServerProcess, **extra: Any) -> None:
    """Write the user's Pi `settings.json` (read by each headless Pi when it starts): the
    scripted model as the default, plus `extra`."""
    settings = {"defaultProvider": PROVIDER, "defaultModel": MODEL_ID, "quietStartup": True}
    path = server.user_home / ".pi" / "agent" / "settings.json"
    path.write_text(json.dumps({**settings, **extra}))


def submit_route(route: str) -> Any:
    """A reply submitting `{"route": route}` for the request id in the step text."""

    def arguments(request: ChatRequest) -> dict[str, Any]:
        return {
            "action": "submit",
            "requestId": request_id_in(request.last_user_text()),
            "output": {"route": route},
        }

    return tool_call("workflow", arguments)


def finish_rules(provider: MockProvider) -> None:
    """The replies every test needs last: to a finished run, and after a tool result."""
    provider.on(user_text_contains(TERMINAL_MARK), text("The run finished."), name="terminal")
    provider.on(last_is_tool_result, text("Done."), name="after a tool result")


def agent_rows(server: ServerProcess, run_id: str) -> list[tuple[int, float, str]]:
    """`(pid, process start, status)` of the run's recorded headless agents, oldest first."""
    return [
        (int(row[0]), float(row[1]), str(row[2]))
        for row in server.query(
            "SELECT pid, process_start, status FROM agent_processes WHERE run_id = ?"
            " ORDER BY started_at, rowid",
            run_id,
        )
    ]


def recorded_agent(server: ServerProcess, run_id: str, count: int = 1) -> tuple[int, float]:
    """The pid and start time recorded for the run's `count`-th agent, once it is recorded
    (it may have ended already)."""

    def check() -> tuple[int, float] | None:
        rows = agent_rows(server, run_id)
        return rows[count - 1][:2] if len(rows) >= count else None

    pid, start = wait_for(check, 30, f"headless agent #{count} of {run_id}")
    return int(pid), float(start)


def agent_alive(pid: int, start: float) -> bool:
    """True while the recorded agent (this pid with this start time) runs, or anything is
    left in its process group."""
    try:
        os.killpg(pid, 0)
        return True
    except ProcessLookupError:
        pass
    try:
        process = psutil.Process(pid)
        return process_start(pid) == start and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_agent_gone(server: ServerProcess, run_id: str, pid: int, start: float) -> None:
    """Wait until the agent's process group is empty and its record is ended."""
    wait_for(lambda: not agent_alive(pid, start), 30, f"the headless Pi {pid} to be stopped")
    wait_for(
        lambda: all(row[2] == "ended" for row in agent_rows(server, run_id) if row[0] == pid),
        30,
        "the agent's record to end",
    )


def agent_turns(server: ServerProcess, run_id: str) -> list[tuple[Any, ...]]:
    """`(status, stop reason)` of the model turns the run's headless session reported."""
    return server.query(
        "SELECT status, stop_reason FROM workflow_turns WHERE session_id = ?"
        " ORDER BY started_at, rowid",
        f"detached-{run_id}",
    )


def requests_with(provider: MockProvider, fragment: str) -> list[ChatRequest]:
    """The model requests whose last message is a user message containing `fragment`."""
    return [r for r in provider.requests() if user_text_contains(fragment)(r)]


def run_in(text_: str) -> str:
    """The run id in a tool result or a notification."""
    match = RUN_ID.search(text_)
    assert match, text_
    return match.group(0)


# --- a detached run and its headless Pi ------------------------------------------------------


def test_a_detached_run_is_completed_by_a_headless_pi_that_is_gone_afterwards(
    server: ServerProcess, provider: MockProvider
) -> None:
    """`run start --detached`: the server's headless Pi, on session `detached-<run>` with the
    user's model configuration, is shown the step and submits it; the run completes, and the
    headless Pi's whole process group is gone afterwards."""
    provider.on(user_text_contains(STEP_MARK), submit_route("fix"), name="step")
    finish_rules(provider)
    started = subprocess.run(
        [str(workflows_cli()), "run", "start", "step", "--detached", "--json"],
        cwd=server.project,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    run_id = str(json.loads(started.stdout)["runId"])
    pid, start = recorded_agent(server, run_id)

    done = server.wait_status(run_id, {"completed", "failed", "paused"}, 90)

    assert (done["status"], done["output"]) == ("completed", {"route": "fix"})
    assert (done["executionMode"], done["originSession"]) == ("detached", f"detached-{run_id}")
    wait_agent_gone(server, run_id, pid, start)
    assert [row[2] for row in agent_rows(server, run_id)] == ["ended"]
    [asked] = requests_with(provider, STEP_MARK)
    [(request_id,)] = server.query(
        "SELECT request_id FROM interactive_requests WHERE run_id = ?", run_id
    )
    assert request_id_in(asked.last_user_text()) == request_id
    stored = session_file(server.home / "agents" / run_id, f"detached-{run_id}")
    [step] = workflow_messages(stored, "step")
    assert step["details"]["runId"] == run_id
    assert content_text(step) == asked.last_user_text()
    assert server.query("SELECT status FROM interactive_submissions") == [("accepted",)]
    assert server.diagnose() == []


def test_a_provider_error_parks_the_run_with_the_providers_words(
    server: ServerProcess, provider: MockProvider
) -> None:
    """The model provider answers HTTP 500: once Pi's own retries are used up, the headless
    Pi's turn ends with an error and the step is presented again after a backoff, three
    times; the fourth failed turn parks the run `agentUnavailable` quoting the provider's
    error text, the agent is stopped, and once the provider works again `run resume`
    completes the run."""
    user_settings(server, retry={"enabled": True, "maxRetries": 1, "baseDelayMs": 10})
    turns = 4  # the first presentation and three presentations again
    broken = provider.on(
        user_text_contains(STEP_MARK), failure(500, PROVIDER_ERROR), times=2 * turns, name="down"
    )
    provider.on(user_text_contains(STEP_MARK), submit_route("skip"), name="step")
    finish_rules(provider)
    run_id = server.start_run("step", detached=True)
    pid, start = recorded_agent(server, run_id)

    parked = server.wait_status(run_id, {"paused", "completed", "failed"}, 90)

    assert (parked["status"], parked["parkReason"]) == ("paused", "agentUnavailable")
    assert PROVIDER_ERROR in parked["parkDetail"], parked["parkDetail"]
    assert "model turn ended with an error" in parked["parkDetail"]
    assert f"({turns} turns in a row" in parked["parkDetail"]
    assert parked["waitingOn"]["status"] == "pending"
    assert broken.used == 2 * turns  # each turn: the first call and Pi's one retry
    assert agent_turns(server, run_id) == [("ended", "error")] * turns
    again = server.query(
        "SELECT json_extract(data_json, '$.reason') FROM events WHERE run_id = ?"
        " AND type = 'step.represented'",
        run_id,
    )
    assert again == [("providerError",)] * (turns - 1)
    wait_agent_gone(server, run_id, pid, start)

    with server.client() as client:
        client.resume(run_id)
    done = server.wait_status(run_id, {"completed", "failed", "paused"}, 90)

    assert (done["status"], done["output"]) == ("completed", {"route": "skip"})
    second, second_start = agent_rows(server, run_id)[1][:2]
    assert second != pid
    wait_agent_gone(server, run_id, second, second_start)


def test_pausing_and_cancelling_a_detached_run_stop_its_headless_pi(
    server: ServerProcess, provider: MockProvider
) -> None:
    """While the headless Pi holds the run's step (its model is still answering, nothing is
    submitted), `run pause` stops it, `run resume` starts a new one, and `run cancel` stops
    that one: each time the recorded process and its whole group are really gone."""
    asked, release = threading.Semaphore(0), threading.Event()

    def hold(_request: ChatRequest) -> Reply:
        asked.release()
        release.wait(60)
        return Reply(text="too late")

    provider.on(user_text_contains(STEP_MARK), hold, name="step, held")
    finish_rules(provider)
    run_id = server.start_run("step", detached=True)
    first, first_start = recorded_agent(server, run_id)
    assert asked.acquire(timeout=60), "the step's turn never asked the model"
    assert agent_alive(first, first_start)

    with server.client() as client:
        client.pause(run_id)
    wait_agent_gone(server, run_id, first, first_start)
    assert server.run(run_id)["status"] == "paused"

    with server.client() as client:
        client.resume(run_id)
    second, second_start = recorded_agent(server, run_id, count=2)
    assert second != first
    assert asked.acquire(timeout=60), "the step was not presented again"

    with server.client() as client:
        client.cancel(run_id, reason="not needed")
    wait_agent_gone(server, run_id, second, second_start)
    release.set()
    assert server.run(run_id)["status"] == "cancelled"
    assert [row[2] for row in agent_rows(server, run_id)] == ["ended", "ended"]
    assert server.diagnose() == []


def test_a_headless_pi_whose_server_dies_shuts_down_by_itself(
    server: ServerProcess, provider: MockProvider
) -> None:
    """Window: the server is SIGKILLed while its headless Pi waits on the step. Only the
    server held the Pi's stdin, so the Pi reads its end and shuts down with no server left
    to stop it (an agent is never left running unsupervised, recorded or not)."""
    provider.on(user_text_contains(STEP_MARK), text("I will look at it later."), name="step")
    finish_rules(provider)
    run_id = server.start_run("step", detached=True)
    pid, start = recorded_agent(server, run_id)
    wait_for(lambda: agent_turns(server, run_id)[:1] == [("ended", "completed")], 60, "the turn")

    server.kill()

    wait_for(lambda: not agent_alive(pid, start), 30, "the orphaned headless Pi to exit")


def test_a_server_killed_while_the_headless_pi_works_a_step_has_it_worked_again(
    server: ServerProcess, provider: MockProvider
) -> None:
    """Window: the server is SIGKILLed while the headless Pi's turn on the step waits on the
    model. The next server starts a new headless Pi, whose session file already holds the
    step: a transcript entry is no presentation, so the step is presented again (the dead
    turn is lost) in a new turn that submits it; the run completes and every agent place is
    free again."""
    held, release = threading.Event(), threading.Event()

    def hold(_request: ChatRequest) -> Reply:
        held.set()
        release.wait(30)
        return Reply(text="too late")

    provider.on(user_text_contains("--- Presented again"), submit_route("skip"), name="again")
    provider.on(user_text_contains(STEP_MARK), hold, times=1, name="held")
    finish_rules(provider)
    run_id = server.start_run("step", detached=True)
    pid, start = recorded_agent(server, run_id)
    assert held.wait(60), "the headless Pi never asked the model"

    server.kill()
    release.set()
    wait_for(lambda: not agent_alive(pid, start), 30, "the orphaned headless Pi to exit")
    server.start()

    done = server.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert (done["status"], done["output"]) == ("completed", {"route": "skip"})
    assert [row[1] for row in agent_turns(server, run_id)][:1] == ["lost"]
    assert len(requests_with(provider, "--- Presented again")) == 1
    wait_for(
        lambda: (
            server.query("SELECT COUNT(*) FROM agent_processes WHERE status = 'live'") == [(0,)]
        ),
        30,
        "every agent place to be free",
    )
    for agent_pid, agent_start, _status in agent_rows(server, run_id):
        wait_for(lambda p=agent_pid, s=agent_start: not agent_alive(p, s), 30, "agents gone")
    assert server.diagnose() == []


# --- starting detached runs from a person's Pi -----------------------------------------------


def test_the_tool_starts_a_detached_run_that_only_the_headless_pi_presents(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """`start` with `detached: true` (a described field of the tool) starts a run on its own
    headless session: the person's session is not its origin and shows none of its steps, and
    the headless Pi completes it."""
    provider.on(
        user_text_contains("start step detached"),
        tool_call("workflow", {"action": "start", "workflow": "step", "detached": True}),
    )
    provider.on(user_text_contains(STEP_MARK), submit_route("fix"), name="step")
    finish_rules(provider)
    pi = make_pi()
    session_id = pi.command({"type": "get_state"})["data"]["sessionId"]

    [end] = tool_results(pi.run_prompt("please start step detached"))

    assert end["isError"] is False, end
    run_id = run_in(result_text(end))
    assert result_text(end).startswith(f"Started detached run {run_id} of workflow step;")
    assert f"detached-{run_id}" in result_text(end)
    done = server.wait_status(run_id, {"completed", "failed", "paused"}, 90)
    assert (done["status"], done["output"]) == ("completed", {"route": "fix"})
    assert (done["executionMode"], done["originSession"]) == ("detached", f"detached-{run_id}")
    assert done["origin"] == f"client:pi:{session_id}"
    declared = provider.requests()[0].tool("workflow")
    assert declared is not None
    detached = declared["parameters"]["properties"]["detached"]
    assert detached["type"] == "boolean"
    assert "headless Pi" in detached["description"]
    assert workflow_messages(pi.entries()) == []
    assert len(requests_with(provider, STEP_MARK)) == 1


def test_workflow_start_detached_starts_a_run_the_headless_pi_completes(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """`/workflow start NAME JSON --detached` starts a detached run (`detached: true`, no
    origin session); the person's session presents nothing of it and the headless Pi
    completes it."""
    provider.on(user_text_contains(STEP_MARK), submit_route("skip"), name="step")
    finish_rules(provider)
    pi = make_pi()

    note = pi.slash('/workflow start step {"report": "a b"} --detached')

    assert note["notifyType"] == "info", note
    run_id = run_in(note["message"])
    assert note["message"].startswith(f"Started detached run {run_id} of workflow step;")
    done = server.wait_status(run_id, {"completed", "failed", "paused"}, 90)
    assert (done["status"], done["output"]) == ("completed", {"route": "skip"})
    assert (done["executionMode"], done["originSession"]) == ("detached", f"detached-{run_id}")
    assert done["input"] == {"report": "a b"}
    assert workflow_messages(pi.entries()) == []
    assert STEP_MARK in provider.requests()[0].last_user_text()
