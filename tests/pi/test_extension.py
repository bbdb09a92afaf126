"""The pi-workflows extension inside the real Pi: the `/workflow` command and the `workflow` tool.

Every test runs a real pi-workflows server, the real Pi binary in RPC mode with only our
extension loaded, and the scripted model; state is checked through the Python client.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

import psutil

from client.scripted_peer import DROP, Reply, ok, scripted_peer
from pi.support.mock_provider import (
    ChatRequest,
    MockProvider,
    last_is_tool_result,
    text,
    tool_call,
    user_text_contains,
    user_text_matches,
)
from pi.support.pi_rpc import MakePi, PiProcess, Record
from pi.support.records import result_text, tool_results
from pi_workflows.client import Client, NotFoundError, ServerUnavailableError
from pi_workflows.protocol import Request
from pi_workflows.protocol.environment import snapshot

from support.server import ServerProcess, wait_for

QUICK = """
from pi_workflows import Workflow, compute

workflow = Workflow(
    "quick",
    start="double",
    nodes={"double": compute(lambda ctx: {"doubled": ctx.input["n"] * 2})},
    edges=[],
)
"""

ASK = """
from pi_workflows import Workflow, checkpoint, compute, edge

workflow = Workflow(
    "ask",
    start="ask",
    nodes={
        "ask": checkpoint({"question": "What is your name?"}),
        "greet": compute(lambda ctx: {"greeting": "hello " + ctx.outputs["ask"]["name"]}),
    },
    edges=[edge("ask", "greet")],
)
"""

APPROVE = """
from pi_workflows import Workflow, choice, compute, human_decision, switch

workflow = Workflow(
    "approve",
    start="approve",
    nodes={
        "approve": human_decision(
            title="Ship the build?",
            choices=[
                choice("ship", "Ship it", "Publish the build now"),
                choice("hold", "Hold", "Keep it for later"),
            ],
        ),
        "shipped": compute(lambda ctx: {"result": "shipped"}),
        "held": compute(lambda ctx: {"result": "held"}),
    },
    edges=[switch("approve", on="$.choice", cases={"ship": "shipped", "hold": "held"})],
)
"""

GATED = """
import time
from pathlib import Path

from pi_workflows import Workflow, compute


def work(ctx):
    Path(ctx.input["started"]).write_text("started")
    gate = Path(ctx.input["gate"])
    deadline = time.monotonic() + 60
    while not gate.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the gate never opened")
        ctx.cancellation.wait(0.02)
    return {"done": True}


workflow = Workflow("gated", start="work", nodes={"work": compute(work)}, edges=[])
"""

RUN_ID = re.compile(r"run_[0-9a-z]+")
PROTECTED = "Protected human decisions cannot be answered by the workflow tool"


def run_id_in_user_text(request: ChatRequest) -> str:
    """The run id the test wrote into the user's prompt."""
    match = RUN_ID.search(request.last_user_text())
    assert match, request.last_user_text()
    return match.group(0)


def test_the_extension_loads_and_lists_project_workflows(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """`/workflow list` in Pi shows the workflows of Pi's project, and the model is offered
    the `workflow` tool."""
    path = server.write_workflow("quick", QUICK)
    provider.on(lambda _r: True, text("hello"))
    pi = make_pi()

    note = pi.slash("/workflow list")

    assert note["notifyType"] == "info"
    assert f"quick (project) {path}" in note["message"]
    assert "demo (builtin)" in note["message"]
    pi.run_prompt("hi")
    declaration = provider.requests()[-1].tool("workflow")
    assert declaration is not None
    assert "submit" in json.dumps(declaration["parameters"])


def test_workflow_list_also_shows_the_newest_runs(server: ServerProcess, make_pi: MakePi) -> None:
    """`/workflow list` shows the workflows, then the five newest runs (newest first) and
    where the others are; with no run it says so in one line."""
    server.write_workflow("quick", QUICK)
    pi = make_pi()
    empty = pi.slash("/workflow list")
    run_ids = [server.start_run("quick", {"n": n}) for n in range(6)]
    for run_id in run_ids:
        server.wait_status(run_id, "completed")

    note = pi.slash("/workflow list")

    assert empty["message"].splitlines()[-1] == (
        "No runs yet; start one with /workflow start NAME."
    )
    lines = note["message"].splitlines()
    start = lines.index("Newest runs:")
    assert lines[start + 1 : start + 6] == [
        f"{run_id} quick completed" for run_id in run_ids[:0:-1]
    ]
    assert lines[start + 6] == (
        "(more: /workflow status, or pi-workflows run list; one run: /workflow status RUN)"
    )
    assert "quick (project)" in "\n".join(lines[:start])


def test_the_model_starts_a_run_with_the_tool_and_it_completes(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """A `workflow` tool call with `start` starts a run of the project workflow, which
    completes, and the model sees the run id."""
    server.write_workflow("quick", QUICK)
    provider.on(last_is_tool_result, text("The run is started."))
    # The run's result comes to this session as its own message, which may start a turn
    # before the test ends: answered too, so every request the model got is a scripted one.
    provider.on(user_text_contains("--- Workflow run finished ---"), text("The run finished."))
    provider.on(
        user_text_matches(r"start quick"),
        tool_call("workflow", {"action": "start", "workflow": "quick", "input": {"n": 21}}),
    )
    pi = make_pi(session_id="origin-1")

    records = pi.run_prompt("please start quick with 21")

    [end] = tool_results(records)
    assert not end["isError"], end
    match = RUN_ID.search(result_text(end))
    assert match, result_text(end)
    run_id = match.group(0)
    assert end["result"]["details"]["runId"] == run_id
    assert end["result"]["details"]["outcome"] == "accepted"
    view = server.wait_status(run_id, {"completed", "failed"})
    assert view["status"] == "completed", view
    assert view["workflow"] == "quick"
    assert view["input"] == {"n": 21}
    assert view["output"] == {"doubled": 42}
    # The model's reply after the tool result was the scripted one: it saw the result.
    answered = [r for r in provider.requests() if last_is_tool_result(r)]
    assert run_id in answered[-1].tool_results()[-1]
    assert provider.unmatched() == [], [r.last_user_text()[:300] for r in provider.unmatched()]


def test_workflow_status_shows_one_run(server: ServerProcess, make_pi: MakePi) -> None:
    """`/workflow status RUN` shows the run's status and output; without RUN it lists runs."""
    server.write_workflow("quick", QUICK)
    run_id = server.start_run("quick", {"n": 5})
    server.wait_status(run_id, "completed")
    pi = make_pi()

    note = pi.slash(f"/workflow status {run_id}")
    listing = pi.slash("/workflow status")

    assert note["notifyType"] == "info"
    assert f"Run {run_id} of quick: completed" in note["message"]
    assert 'output: {"doubled":10}' in note["message"]
    assert f"{run_id} quick completed" in listing["message"]


def test_a_command_error_is_one_line_at_the_error_level(
    server: ServerProcess, make_pi: MakePi
) -> None:
    """`/workflow status` of a run that does not exist shows the server's refusal as one
    error line, and `/workflow start` with bad JSON sends nothing."""
    pi = make_pi()

    missing = pi.slash("/workflow status run_doesnotexist")
    bad = pi.slash("/workflow start quick {not json")

    assert missing["notifyType"] == "error"
    assert "\n" not in missing["message"]
    assert missing["message"].startswith("/workflow status failed: ")
    assert "run_doesnotexist" in missing["message"]
    assert bad["notifyType"] == "error"
    assert "not valid JSON" in bad["message"]
    with server.client() as client:
        assert client.list_runs() == []


def test_the_model_answers_an_ordinary_checkpoint(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The tool's `answer` continues a run waiting on an ordinary checkpoint."""
    server.write_workflow("ask", ASK)
    run_id = server.start_run("ask")
    waiting = server.wait_status(run_id, "waiting")
    assert waiting["waitingOn"]["kind"] == "checkpoint"
    provider.on(last_is_tool_result, text("Answered."))
    provider.on(
        user_text_matches(r"answer run_"),
        tool_call(
            "workflow",
            lambda r: {
                "action": "answer",
                "runId": run_id_in_user_text(r),
                "requestId": waiting["waitingOn"]["requestId"],
                "value": {"name": "pi"},
            },
        ),
    )
    pi = make_pi()

    records = pi.run_prompt(f"answer {run_id} with the name pi")

    [end] = tool_results(records)
    assert not end["isError"], end
    assert waiting["waitingOn"]["requestId"] in result_text(end)
    view = server.wait_status(run_id, {"completed", "failed"})
    assert view["status"] == "completed", view
    assert view["output"] == {"greeting": "hello pi"}


def test_the_tool_refuses_a_decision_and_the_person_decides_it(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The tool's `answer` on a human decision fails with the protected-decision message and
    changes nothing; `/workflow decide RUN` asks the person with a select dialog and the
    choice routes the run."""
    server.write_workflow("approve", APPROVE)
    run_id = server.start_run("approve")
    waiting = server.wait_status(run_id, "waiting")
    assert waiting["waitingOn"]["kind"] == "decision"
    provider.on(last_is_tool_result, text("I cannot decide that."))
    provider.on(
        user_text_matches(r"approve run_"),
        tool_call(
            "workflow",
            lambda r: {"action": "answer", "runId": run_id_in_user_text(r), "value": "ship"},
        ),
    )
    pi = make_pi()

    records = pi.run_prompt(f"approve {run_id} for me")

    [end] = tool_results(records)
    assert end["isError"] is True
    assert result_text(end) == PROTECTED
    refused = server.run(run_id)
    assert refused["status"] == "waiting"
    assert refused["waitingOn"]["requestId"] == waiting["waitingOn"]["requestId"]
    assert refused["revision"] == waiting["revision"]

    dialogs: list[Record] = []

    def choose_ship(request: Record) -> dict[str, Any] | None:
        dialogs.append(request)
        return {"value": next(o for o in request["options"] if "[ship]" in o)}

    pi.answer_dialog = choose_ship
    note = pi.slash(f"/workflow decide {run_id}")

    [dialog] = dialogs
    assert dialog["method"] == "select"
    assert dialog["title"] == "Ship the build?"
    assert dialog["options"] == [
        "Ship it [ship] — Publish the build now",
        "Hold [hold] — Keep it for later",
    ]
    assert note["notifyType"] == "info"
    assert f"Decided ship for run {run_id}" in note["message"]
    view = server.wait_status(run_id, {"completed", "failed"})
    assert view["status"] == "completed", view
    assert view["output"] == {"result": "shipped"}


def test_a_dismissed_dialog_decides_nothing_and_a_given_choice_decides_at_once(
    server: ServerProcess, make_pi: MakePi
) -> None:
    """Cancelling the `/workflow decide` dialog leaves the decision waiting;
    `/workflow decide RUN CHOICE` decides without a dialog."""
    server.write_workflow("approve", APPROVE)
    run_id = server.start_run("approve")
    waiting = server.wait_status(run_id, "waiting")
    pi = make_pi()  # dialogs are cancelled by default

    status = pi.slash(f"/workflow status {run_id}")
    dismissed = pi.slash(f"/workflow decide {run_id}")
    after_dismiss = server.run(run_id)
    start = pi.mark()
    decided = pi.slash(f"/workflow decide {run_id} hold")

    assert "decision: Ship the build?" in status["message"]
    assert "choices: ship (Ship it), hold (Hold)" in status["message"]
    assert dismissed["notifyType"] == "warning"
    assert "No choice made" in dismissed["message"]
    assert after_dismiss["status"] == "waiting"
    assert after_dismiss["revision"] == waiting["revision"]
    assert decided["notifyType"] == "info"
    assert f"Decided hold for run {run_id}" in decided["message"]
    assert not [r for r in pi.since(start) if r.get("method") == "select"]
    view = server.wait_status(run_id, {"completed", "failed"})
    assert view["output"] == {"result": "held"}


def test_killing_pi_while_a_run_computes_leaves_the_run_to_complete(
    root: Path, server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """A run started from Pi keeps computing and completes after Pi is SIGKILLed."""
    server.write_workflow("gated", GATED)
    started, gate = root / "started", root / "gate"
    provider.on(last_is_tool_result, text("Started."))
    provider.on(
        user_text_matches(r"start gated"),
        tool_call(
            "workflow",
            {
                "action": "start",
                "workflow": "gated",
                "input": {"started": str(started), "gate": str(gate)},
            },
        ),
    )
    pi = make_pi()
    [end] = tool_results(pi.run_prompt("start gated"))
    match = RUN_ID.search(result_text(end))
    assert match, result_text(end)
    run_id = match.group(0)
    wait_for(started.exists, 30, "the run's node to start computing")

    pi.kill()

    assert pi.process is not None
    assert pi.process.poll() is not None
    assert server.run(run_id)["status"] == "running"
    gate.write_text("open")
    view = server.wait_status(run_id, {"completed", "failed"})
    assert view["status"] == "completed", view
    assert view["output"] == {"done": True}
    assert server.diagnose() == []


def test_a_refused_tool_command_shows_the_model_the_server_message(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """A command the server refuses becomes the tool's error, carrying the server's one-line
    message, which the model receives."""
    provider.on(last_is_tool_result, text("That run does not exist."))
    provider.on(
        user_text_matches(r"cancel"),
        tool_call("workflow", {"action": "cancel", "runId": "run_nosuchrun"}),
    )
    with server.client() as client:
        try:
            client.cancel("run_nosuchrun")
        except NotFoundError as exc:
            expected = exc.message
        else:
            raise AssertionError("cancelling a missing run was accepted")
    pi = make_pi()

    [end] = tool_results(pi.run_prompt("cancel it"))

    assert end["isError"] is True
    assert result_text(end) == expected
    answered = [r for r in provider.requests() if last_is_tool_result(r)]
    assert answered[-1].tool_results()[-1] == expected


def test_after_a_new_session_the_extension_serves_the_new_one(
    server: ServerProcess, make_pi: MakePi
) -> None:
    """`new_session` shuts the extension's session down and starts the next one, whose
    `/workflow` command works."""
    server.write_workflow("quick", QUICK)
    pi = make_pi(session_id="first-session")
    assert "quick (project)" in pi.slash("/workflow list")["message"]

    pi.command({"type": "new_session"})
    state = pi.command({"type": "get_state"})

    assert state["data"]["sessionId"] != "first-session"
    assert "quick (project)" in pi.slash("/workflow list")["message"]
    assert pi.process is not None
    assert pi.process.poll() is None


def test_the_extension_starts_a_server_when_none_runs(root: Path, provider: MockProvider) -> None:
    """With no server running, `/workflow list` starts one through the pi-workflows CLI; the
    server keeps running after Pi exits."""
    home, project = root / "state", root / "project"
    (project / ".pi" / "workflows").mkdir(parents=True)
    (project / ".pi" / "workflows" / "quick.workflow.py").write_text(QUICK)
    pi = PiProcess(
        root,
        provider,
        cwd=project,
        env={"PI_WORKFLOWS_HOME": str(home), "PI_WORKFLOWS_IDLE_EXIT_SECONDS": "0"},
    )
    pid: int | None = None
    try:
        with pi:
            note = pi.slash("/workflow list")
        assert note["notifyType"] == "info", note
        assert "quick (project)" in note["message"]
        with Client(home, autostart=False, timeout=10) as client:
            pid = int(client.status()["pid"])
        assert (home / "logs" / "server.log").is_file()
    finally:
        with contextlib.suppress(ServerUnavailableError), Client(home, autostart=False) as client:
            client.stop(wait=True, timeout=30)
        if pid is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).kill()


def test_pi_survives_the_server_going_away_and_reconnects_later(
    server: ServerProcess, make_pi: MakePi
) -> None:
    """When the server dies under an open connection, Pi keeps running, a command reports the
    failed auto-start in one line, and once a server is back the next command reconnects."""
    server.write_workflow("quick", QUICK)
    pi = make_pi(env={"PI_WORKFLOWS_CLI": "/bin/false"})
    assert "quick (project)" in pi.slash("/workflow list")["message"]

    server.kill()
    failed = pi.slash("/workflow list")
    server.start()
    again = pi.slash("/workflow list")

    assert failed["notifyType"] == "error"
    assert "\n" not in failed["message"]
    assert "could not be started" in failed["message"]
    assert pi.process is not None
    assert pi.process.poll() is None
    assert again["notifyType"] == "info"
    assert "quick (project)" in again["message"]


def test_a_command_whose_reply_is_lost_is_retried_with_the_same_key(
    root: Path, provider: MockProvider
) -> None:
    """When the connection drops after `run.start` was sent, the extension reconnects and
    sends it again with a new request id and the same client id, idempotency key and payload."""
    project = root / "project"
    project.mkdir()
    starts: list[Request] = []

    def handler(_connection: int, request: Request) -> Reply:
        if request.operation != "run.start":
            return ok(request)
        starts.append(request)
        if len(starts) == 1:
            return DROP
        return ok(request, {"runId": "run_retried", "workflow": "quick", "revision": 1})

    home = root / "state"
    with scripted_peer(home, handler) as peer:
        pi = PiProcess(
            root,
            provider,
            cwd=project,
            session_id="retry-session",
            env={
                "PI_WORKFLOWS_HOME": str(home),
                "PI_WORKFLOWS_CLI": "/bin/false",
                "LC_TIME": "C",
                "VIRTUAL_ENV": str(root / "venv"),
                "PWF_NOT_LISTED": "x",
            },
        )
        with pi:
            note = pi.slash('/workflow start quick {"n": 1}')
        pi_environment = pi.prepare()

    assert note["notifyType"] == "info", note
    assert note["message"] == "Started run run_retried of workflow quick."
    first, second = starts
    assert first.request_id != second.request_id
    assert first.client_id == second.client_id == "pi:retry-session"
    assert first.idempotency_key == second.idempotency_key
    assert first.idempotency_key is not None
    assert first.idempotency_key.startswith("pi:command.start:")
    assert first.payload == second.payload
    assert first.payload == {
        "workflow": "quick",
        "input": {"n": 1},
        "projectDir": str(project),
        "originSession": "retry-session",
        # Pi's default variables, by the same rule as the Python clients' (never the rest)
        "environment": snapshot(pi_environment),
        "workingDirectory": str(project),
    }
    assert first.payload["environment"]["LC_TIME"] == "C"
    assert "PWF_NOT_LISTED" not in first.payload["environment"]
    assert peer.connections >= 2
