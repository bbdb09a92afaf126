"""The interactive bridge with the real Pi: the extension as its session's coordinator.

Every test runs a real pi-workflows server, the real Pi binary in RPC mode with only our
extension loaded, and the scripted model, whose replies are rules over what it is sent (it
echoes the request id it finds in the step text). The extension attaches to the server for
its Pi session, reports what the session already shows, presents the session's workflow
messages and reports model turns; the tests check Pi's entries, the model's requests and the
server's state.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from pi.support.mock_provider import (
    REQUEST_ID,
    ChatRequest,
    MockProvider,
    Reply,
    failure,
    last_is_tool_result,
    last_tool_result_contains,
    request_id_in,
    text,
    tool_call,
    user_text_contains,
)
from pi.support.pi_rpc import MakePi, PiProcess, Record
from pi.support.records import (
    content_text,
    decision_cards,
    result_text,
    session_file,
    tool_calls,
    tool_results,
    workflow_messages,
)
from pi_workflows.client import Client, RejectedError, ServerUnavailableError

from support.server import ServerProcess, wait_for

SESSION = "bridge-session"
STEP_MARK = "--- Workflow step ---"
CHECKPOINT_MARK = "--- Workflow checkpoint ---"
TERMINAL_MARK = "--- Workflow run finished ---"
REJECTED_MARK = "--- Workflow step reply rejected ---"
ASSISTANT_MARK = "Your visible reply is this step's output"
PROTECTED = "Protected human decisions cannot be answered by the workflow tool"
CLOSED_ADVICE = (
    "this workflow step is closed: do not submit or answer it again unless the workflow"
    " presents it to you again"
)
RUN_ID = re.compile(r"\brun_[0-9a-z]+")

STEP = """
import json, os
from pathlib import Path
from pi_workflows import Rejected, Workflow, agent, compute, switch

PIDS = Path(__file__).with_name("validate-pids.jsonl")

def check(output, ctx):
    with PIDS.open("a") as out:
        out.write(json.dumps({{"pid": os.getpid(), "ppid": os.getppid()}}) + "\\n")
    if output.get("route") not in ("fix", "skip"):
        raise Rejected("route must be fix or skip")

workflow = Workflow(
    "step",
    start="classify",
    nodes={{
        "classify": agent(prompt="Classify the report", expected_output='{{"route": "fix"}}',
                          validate=check, timeout={timeout}),
        "done": compute(lambda ctx: {{"route": ctx.outputs["classify"]["route"]}}),
        "late": compute(lambda ctx: {{"result": ctx.results["classify"]["outcome"]}}),
    }},
    edges=[switch("classify", on="$result.outcome",
                  cases={{"ok": "done", "failed": "done", "timed_out": "late"}})],
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

NOTE = """
from pi_workflows import Workflow, checkpoint, compute, edge, notify

workflow = Workflow(
    "note",
    start="hello",
    nodes={
        "hello": notify(lambda ctx: "Starting " + ctx.input["name"]),
        "ask": checkpoint({"question": "Go on?"}),
        "done": compute(lambda ctx: {"answer": ctx.outputs["ask"]}),
    },
    edges=[edge("hello", "ask"), edge("ask", "done")],
)
"""

HAIKU = "An old silent pond / a frog jumps into the pond / splash! Silence again."

ASSISTANT = """
from pi_workflows import Workflow, agent, assistant_message, compute, edge

workflow = Workflow(
    "haiku",
    start="write",
    nodes={
        "write": agent(prompt="Write a haiku about a pond", expected_output=assistant_message()),
        "done": compute(lambda ctx: {"haiku": ctx.outputs["write"]}),
    },
    edges=[edge("write", "done")],
)
"""


# --- helpers ---------------------------------------------------------------------------------


def write_step(server: ServerProcess, timeout: float = 600) -> Path:
    """Write the `step` workflow; returns the file its `validate` records pids in."""
    path = server.write_workflow("step", STEP.format(timeout=timeout))
    return path.with_name("validate-pids.jsonl")


def submit_route(route: str) -> Any:
    """A reply submitting `{"route": route}` for the first request id the model was sent."""

    def arguments(request: ChatRequest) -> dict[str, Any]:
        return {
            "action": "submit",
            "requestId": request_id_in("\n".join(request.user_texts())),
            "output": {"route": route},
        }

    return tool_call("workflow", arguments)


def finish_rules(provider: MockProvider) -> None:
    """The replies every test needs last: after a tool result, and to a finished run."""
    provider.on(user_text_contains(TERMINAL_MARK), text("The run finished."), name="terminal")
    provider.on(last_is_tool_result, text("Done."), name="after a tool result")


def start_from_origin(server: ServerProcess, workflow: str, run_input: Any = None) -> str:
    """Start a run whose origin is `SESSION`, as a Pi on that session would."""
    return server.start_run(workflow, run_input, origin_session=SESSION)


def entries_until(pi: PiProcess, predicate: Any, what: str) -> list[Record]:
    """Pi's session entries once `predicate(entries)` holds (polled with a deadline)."""

    def check() -> list[Record] | None:
        entries = pi.entries()
        return entries if predicate(entries) else None

    return list(wait_for(check, 30, what))


def coordinator_epoch(server: ServerProcess, session: str = SESSION) -> int | None:
    """The session's coordinator epoch on the server (how many times it was attached)."""
    rows = server.query("SELECT coordinator_epoch FROM sessions WHERE session_id = ?", session)
    return int(rows[0][0]) if rows else None


def wait_presenting(pi: PiProcess, server: ServerProcess, epoch: int, since: int = 0) -> None:
    """Wait until Pi's coordinator attached with `epoch`, reported and shows the view."""
    wait_for(lambda: coordinator_epoch(server) == epoch, 30, f"coordinator epoch {epoch}")
    pi.wait_for(
        lambda r: r.get("type") == "extension_ui_request" and r.get("method") == "setWidget",
        what="the session's widget",
        since=since,
    )


def wait_idle(pi: PiProcess, first: Any, what: str) -> None:
    """Wait until `first()` holds and then Pi is not streaming (a turn it caused is over)."""
    wait_for(
        lambda: first() and not pi.command({"type": "get_state"})["data"]["isStreaming"],
        30,
        what,
    )


def message_rows(server: ServerProcess, kind: str) -> list[tuple[Any, ...]]:
    """`(message id, status, entry id)` of the server's workflow messages of `kind`."""
    return server.query(
        "SELECT message_id, status, entry_id FROM workflow_messages WHERE kind = ?"
        " ORDER BY created_at, rowid",
        kind,
    )


def requests_with(provider: MockProvider, fragment: str) -> list[ChatRequest]:
    """The model requests whose last message is a user message containing `fragment`."""
    return [r for r in provider.requests() if user_text_contains(fragment)(r)]


def stop_started_server(server: ServerProcess) -> None:
    """Stop a server the extension started (not `server`'s own process) and wait for it."""
    try:
        with Client(server.home, autostart=False, timeout=10) as client:
            pid = int(client.status()["pid"])
            client.stop(wait=True, timeout=30)
    except ServerUnavailableError:
        return
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).wait(timeout=30)


def run_of(records: list[Record]) -> str:
    """The run id in the one `workflow` tool result of `records`."""
    [end] = tool_results(records)
    match = RUN_ID.search(result_text(end))
    assert match, result_text(end)
    return match.group(0)


# --- the interactive bridge ------------------------------------------------------------------


def test_a_run_started_from_pi_belongs_to_that_session_and_presents_its_step(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The model starts a run with the tool; the run's origin is Pi's own session id, and its
    agent step comes back into that session as the next model turn."""
    write_step(server)
    provider.on(
        user_text_contains("start step"),
        tool_call("workflow", {"action": "start", "workflow": "step"}),
    )
    provider.on(user_text_contains(STEP_MARK), text("I will classify it soon."))
    finish_rules(provider)
    pi = make_pi()
    session_id = pi.command({"type": "get_state"})["data"]["sessionId"]
    start = pi.mark()

    run_id = run_of(pi.run_prompt("please start step"))

    view = server.wait_status(run_id, "waiting")
    assert (view["originSession"], view["origin"]) == (session_id, f"client:pi:{session_id}")
    entries = entries_until(pi, lambda es: workflow_messages(es, "step"), "the step")
    [step] = workflow_messages(entries, "step")
    assert step["details"]["runId"] == run_id
    assert step["details"]["requestId"] == view["waitingOn"]["requestId"]
    wait_for(lambda: requests_with(provider, STEP_MARK), 30, "the step's model turn")
    wait_for(
        lambda: len([r for r in pi.since(start) if r.get("type") == "agent_start"]) == 2,
        30,
        "the prompt's turn, then the step's",
    )
    with server.client() as client:
        assert client.list_interactions(session_id)[0]["runId"] == run_id


def test_a_committed_request_is_presented_once_with_its_exact_text(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """A request that opened before Pi started is shown once, as its exact step text; its
    workflow message id is only in the entry's details; the server records that entry as the
    message's evidence and the model turn it started."""
    write_step(server)
    run_id = start_from_origin(server, "step")
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        view = client.get_session(SESSION)
    active = view["activeRequest"]
    [shown] = [m for m in view["messages"] if m["workflowMessageId"] == active["workflowMessageId"]]
    provider.on(user_text_contains(STEP_MARK), submit_route("fix"))
    finish_rules(provider)

    pi = make_pi(session_id=SESSION)

    entries = entries_until(pi, lambda es: workflow_messages(es, "step"), "the step")
    [step] = workflow_messages(entries, "step")
    assert content_text(step) == shown["text"]
    assert active["requestId"] in content_text(step)
    assert step["display"] is True
    assert step["details"] == {
        "workflowMessageId": active["workflowMessageId"],
        "runId": run_id,
        "requestId": active["requestId"],
        "kind": "step",
        "requestKind": "agent",
    }
    assert active["workflowMessageId"] not in content_text(step)
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"route": "fix"}
    [asked] = requests_with(provider, STEP_MARK)
    assert asked.last_user_text() == shown["text"]
    assert wait_for(
        lambda: message_rows(server, "step") == [(active["workflowMessageId"], "sent", step["id"])],
        30,
        "the step to be reported as sent",
    )
    step_turn = wait_for(
        lambda: server.query(
            "SELECT message_id, run_id, stop_reason FROM workflow_turns WHERE status = 'ended'"
            " AND message_id = ?",
            active["workflowMessageId"],
        ),
        30,
        "the step's turn to end",
    )
    assert step_turn == [(active["workflowMessageId"], run_id, "completed")]


PRESENTED_AGAIN = "--- Presented again: the turn that was working on this step ended"


def _killed_mid_turn(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider, *, first_route: str | None
) -> tuple[str, int]:
    """Present the step, let the model look something up (or first submit `first_route`,
    which validation rejects), and SIGKILL Pi while its turn waits on the model. Returns the
    run id and how many model requests were made."""
    write_step(server)
    run_id = start_from_origin(server, "step")
    held, release = threading.Event(), threading.Event()

    def hold(_request: ChatRequest) -> Reply:
        held.set()
        release.wait(30)
        return Reply(text="too late")

    provider.on(user_text_contains(PRESENTED_AGAIN), submit_route("skip"), name="again")
    if first_route is None:
        provider.on(user_text_contains(STEP_MARK), tool_call("workflow", {"action": "list"}))
    else:
        provider.on(user_text_contains(STEP_MARK), submit_route(first_route))
    provider.on(last_is_tool_result, hold, times=1, name="held after the first call")
    finish_rules(provider)
    first = make_pi(session_id=SESSION)
    entries_until(first, lambda es: workflow_messages(es, "step"), "the step")
    assert held.wait(30), "the step's turn never asked the model after its first call"
    first.kill()
    release.set()
    asked = 2  # the step's turn asked the model twice: the step, then after its call
    wait_for(lambda: len(provider.requests()) == asked, 30, "the held request to be logged")
    return run_id, asked


def _reopened_presents_again_once(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider, run_id: str, asked: int
) -> PiProcess:
    """The same session reopened: the step (in its branch) is presented once more and its
    turn submits; the dead turn is recorded lost."""
    second = make_pi(session_id=SESSION)
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"route": "skip"}
    steps = workflow_messages(second.entries(), "step")
    assert len(steps) == 2, [content_text(step)[:80] for step in steps]
    assert content_text(steps[1]).startswith(PRESENTED_AGAIN)
    assert len(requests_with(provider, PRESENTED_AGAIN)) == 1, "one new turn, once"
    rows = message_rows(server, "step")
    assert [(status, entry) for _, status, entry in rows] == [
        ("sent", steps[0]["id"]),
        ("sent", steps[1]["id"]),
    ]
    turns = server.query(
        "SELECT stop_reason FROM workflow_turns WHERE run_id = ? ORDER BY started_at, rowid",
        run_id,
    )
    assert turns[0] == ("lost",)
    assert server.query("SELECT turns_lost FROM interactive_requests WHERE run_id = ?", run_id) == [
        (1,)
    ]
    assert len(provider.requests()) > asked
    assert server.diagnose() == []
    return second


def test_restarting_pi_before_submission_presents_the_same_request_once(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """Pi shows the step, the model looks something up and Pi dies (SIGKILL) inside the
    step's turn. The step is in the session's branch, but that is no presentation: the same
    session reopened presents it once more (`Presented again`) in a new turn, and its model
    submits it once. (A turn that ended without a submission is reminded instead, see
    tests/pi/test_reminders.py.)"""
    run_id, asked = _killed_mid_turn(server, make_pi, provider, first_route=None)
    _reopened_presents_again_once(server, make_pi, provider, run_id, asked)


def test_restarting_pi_after_a_rejected_submission_presents_the_step_again_once(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The model submits a route validation rejects, and Pi dies while the model reads the
    rejection: reopened, the step is presented once more and the corrected submission is
    the one accepted."""
    run_id, asked = _killed_mid_turn(server, make_pi, provider, first_route="maybe")
    _reopened_presents_again_once(server, make_pi, provider, run_id, asked)
    statuses = server.query(
        "SELECT s.status FROM interactive_submissions s JOIN interactive_requests q"
        " USING (request_id) WHERE q.run_id = ? ORDER BY s.submitted_at, s.rowid",
        run_id,
    )
    assert statuses == [("rejected",), ("accepted",)]


def test_a_provider_failing_every_turn_is_retried_with_backoff_then_pauses_the_run(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The model provider answers HTTP 500 for every call: the step is presented again after
    a backoff twice (the person sees one line each time), then the run pauses
    `agentUnavailable` with the provider's words and one error line in Pi; once the provider
    works, `/workflow resume` presents the step again and it completes."""
    server.stop()
    server.start(PI_WORKFLOWS_TURN_RETRIES="2", PI_WORKFLOWS_TURN_RETRY_SECONDS="0.2")
    write_step(server)
    broken = provider.on(
        user_text_contains(STEP_MARK), failure(500, "upstream is down"), times=3, name="down"
    )
    provider.on(user_text_contains(STEP_MARK), submit_route("skip"), name="step")
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)
    start = pi.mark()
    run_id = start_from_origin(server, "step")

    parked = server.wait_status(run_id, {"paused", "completed", "failed"}, 60)

    assert (parked["status"], parked["parkReason"]) == ("paused", "agentUnavailable")
    assert "upstream is down" in parked["parkDetail"]
    assert "(3 turns in a row" in parked["parkDetail"]
    assert broken.used == 3
    retried = [
        n["message"] for n in pi.notifications(start) if "is presented again in" in n["message"]
    ]
    assert [m.split("(retry ")[-1] for m in retried] == ["1 of 2)", "2 of 2)"], retried
    assert all("upstream is down" in m for m in retried)
    paused = pi.wait_notify(lambda r: "is paused (agentUnavailable)" in str(r["message"]),
                            since=start)  # fmt: skip
    assert paused["notifyType"] == "error"
    assert f"/workflow resume {run_id}" in paused["message"]
    assert (
        server.query(
            "SELECT stop_reason, error IS NOT NULL FROM workflow_turns WHERE run_id = ?"
            " ORDER BY started_at, rowid",
            run_id,
        )
        == [("error", 1)] * 3
    )
    pi.slash(f"/workflow resume {run_id}")
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"route": "skip"}
    assert server.diagnose() == []


def test_a_deadline_that_passes_while_the_server_is_down_routes_the_same_attempt(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The step is shown and not answered (the model is still thinking); the server dies,
    the deadline passes, the next server times out that same attempt into its timeout route,
    and Pi's coordinator attaches again and presents the run's result."""
    write_step(server, timeout=2.0)
    run_id = start_from_origin(server, "step")
    held, release = threading.Event(), threading.Event()

    def thinking(_request: ChatRequest) -> Reply:
        held.set()
        release.wait(30)
        return Reply(text="Thinking about it.")

    provider.on(user_text_contains(STEP_MARK), thinking, times=1, name="still thinking")
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)
    entries_until(pi, lambda es: workflow_messages(es, "step"), "the step")
    assert held.wait(30), "the step's turn never asked the model"
    view = server.run(run_id)
    attempt = view["attempts"][-1]["attemptId"]
    request_id = view["waitingOn"]["requestId"]
    [(deadline,)] = server.query(
        "SELECT deadline_at FROM interactive_requests WHERE request_id = ?", request_id
    )

    server.kill()
    release.set()  # the turn ends while no server runs; its report waits for the next one
    wait_for(lambda: time.time_ns() // 1_000_000 > deadline, 10, "the deadline to pass")
    server.start()

    done = server.wait_status(run_id, {"completed", "failed", "timed_out"})
    assert done["output"] == {"result": "timed_out"}
    classify = [a for a in done["attempts"] if a["nodeId"] == "classify"]
    assert [(a["attemptId"], a["status"]) for a in classify] == [(attempt, "timed_out")]
    assert server.query(
        "SELECT status FROM interactive_requests WHERE request_id = ?", request_id
    ) == [("timed_out",)]
    entries = entries_until(pi, lambda es: workflow_messages(es, "terminal"), "the result")
    assert coordinator_epoch(server) == 2
    assert "Status: completed" in content_text(workflow_messages(entries, "terminal")[0])
    assert len(workflow_messages(entries, "step")) == 1
    assert pi.process is not None
    assert pi.process.poll() is None
    assert server.diagnose() == []


def test_a_submission_retried_after_the_server_died_replays_the_same_receipt(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The server dies right after committing the tool's submission; the extension starts a
    server and sends the same command again (same key), which gets the one submission's
    receipt: one submission, validated once, and the run goes on."""
    write_step(server)
    server.stop()
    server.start(faults="command.interaction.submit.after_commit=exit")
    run_id = start_from_origin(server, "step")
    server.wait_status(run_id, "waiting")
    provider.on(user_text_contains(STEP_MARK), submit_route("fix"))
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)
    try:
        assert server.wait_exit(30) == 137
        end = pi.wait_for(
            lambda r: r.get("type") == "tool_execution_end" and r.get("toolName") == "workflow"
        )
        done = server.wait_status(run_id, {"completed", "failed"})
    finally:
        stop_started_server(server)
    assert done["output"] == {"route": "fix"}
    assert end["isError"] is False, end
    details = end["result"]["details"]
    assert details["outcome"] == "adopted"
    [(submission_id, status)] = server.query(
        "SELECT submission_id, status FROM interactive_submissions"
    )
    assert (details["receipt"]["submissionId"], details["receipt"]["status"], status) == (
        submission_id,
        "accepted",
        "accepted",
    )
    pids = (server.project / ".pi" / "workflows" / "validate-pids.jsonl").read_text()
    assert len(pids.splitlines()) == 1


def test_validation_runs_only_in_a_runner_the_server_supervises(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The model's submission is validated by the node's `validate` in a runner child of the
    server: never in Pi, never in the server itself."""
    pids = write_step(server)
    run_id = start_from_origin(server, "step")
    provider.on(user_text_contains(STEP_MARK), submit_route("fix"))
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)

    done = server.wait_status(run_id, {"completed", "failed"})

    assert done["output"] == {"route": "fix"}
    [seen] = [json.loads(line) for line in pids.read_text().splitlines()]
    assert server.process is not None
    assert pi.process is not None
    server_pid = server.process.pid
    template = [child.pid for child in psutil.Process(server_pid).children()]
    assert seen["pid"] not in (pi.process.pid, server_pid, os.getpid())
    assert seen["ppid"] != pi.process.pid
    assert seen["ppid"] == server_pid or seen["ppid"] in template


def test_a_rejected_submission_reaches_the_model_and_its_correction_continues(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The model's first output fails `validate`: the tool's error is exactly the validation
    message, the request stays open, and the corrected submission for the same request is
    accepted in the same attempt."""
    write_step(server)
    run_id = start_from_origin(server, "step")
    provider.on(last_tool_result_contains("route must be fix or skip"), submit_route("fix"))
    provider.on(user_text_contains(STEP_MARK), submit_route("maybe"))
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)

    done = server.wait_status(run_id, {"completed", "failed"})
    pi.wait_for(lambda r: r.get("type") == "agent_settled")

    assert done["output"] == {"route": "fix"}
    first, second = tool_results(pi.records)[:2]
    assert first["isError"] is True
    assert result_text(first) == "route must be fix or skip"
    assert second["isError"] is False
    calls = tool_calls(pi.records)
    assert calls[0]["requestId"] == calls[1]["requestId"]
    assert (calls[0]["output"], calls[1]["output"]) == ({"route": "maybe"}, {"route": "fix"})
    classify = [a["status"] for a in done["attempts"] if a["nodeId"] == "classify"]
    assert classify == ["completed"]
    assert server.query(
        "SELECT status, error FROM interactive_submissions ORDER BY submitted_at, rowid"
    ) == [("rejected", "route must be fix or skip"), ("accepted", None)]
    answered = [r for r in provider.requests() if last_is_tool_result(r)]
    assert answered[0].tool_results()[-1] == "route must be fix or skip"


def test_a_submission_for_a_request_that_is_no_longer_open_is_refused(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The step is answered elsewhere; the model's late submission for it is refused as the
    tool's error with the server's message, and the run keeps the first answer."""
    write_step(server)
    run_id = start_from_origin(server, "step")
    provider.on(user_text_contains("submit the old one"), submit_route("fix"))
    provider.on(user_text_contains(STEP_MARK), text("Later."))
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)
    entries_until(pi, lambda es: workflow_messages(es, "step"), "the step")
    request_id = server.run(run_id)["waitingOn"]["requestId"]
    with server.client() as client:
        client.submit(request_id, {"route": "skip"})
        server.wait_status(run_id, "completed")
        with pytest.raises(RejectedError) as closed:
            client.submit(request_id, {"route": "fix"})
    assert closed.value.code == "requestClosed"
    wait_idle(pi, lambda: requests_with(provider, TERMINAL_MARK), "the presentation turn")

    records = pi.run_prompt("submit the old one")

    [end] = tool_results(records)
    assert end["isError"] is True
    assert result_text(end) == f"{closed.value.message.rstrip('. ')}; {CLOSED_ADVICE}"
    assert server.run(run_id)["output"] == {"route": "skip"}
    assert len(server.query("SELECT 1 FROM interactive_submissions")) == 1


def test_a_submission_for_an_earlier_attempt_of_the_step_is_refused_and_the_new_one_stays_open(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The run is restarted while its step waits, so the step opens a new request in a new
    attempt; the model submits with the old attempt's request id: the tool returns the
    server's refusal, the new request stays open, and the model's submission for it then
    completes the run."""
    write_step(server)
    run_id = start_from_origin(server, "step")
    seen_after_refusal: list[dict[str, Any]] = []

    def request_ids(request: ChatRequest) -> list[str]:
        found = REQUEST_ID.findall("\n".join(request.user_texts()))
        return list(dict.fromkeys(found))  # distinct, in the order the steps came

    def stale(request: ChatRequest) -> dict[str, Any]:
        return {
            "action": "submit",
            "requestId": request_ids(request)[0],
            "output": {"route": "fix"},
        }

    def corrected(request: ChatRequest) -> dict[str, Any]:
        seen_after_refusal.append(server.run(run_id)["waitingOn"])
        return {
            "action": "submit",
            "requestId": request_ids(request)[-1],
            "output": {"route": "fix"},
        }

    provider.on(
        last_tool_result_contains("cannot take this answer"), tool_call("workflow", corrected)
    )
    provider.on(
        lambda r: user_text_contains(STEP_MARK)(r) and len(request_ids(r)) == 2,
        tool_call("workflow", stale),
        name="the second attempt's step",
    )
    provider.on(user_text_contains(STEP_MARK), text("Later."), name="the first attempt's step")
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)
    entries_until(pi, lambda es: workflow_messages(es, "step"), "the first step")
    wait_for(lambda: requests_with(provider, STEP_MARK), 30, "the first step's turn")
    first = server.run(run_id)
    old_request = first["waitingOn"]["requestId"]
    with server.client() as client:
        client.pause(run_id)
        server.wait_status(run_id, "paused")
        client.restart(run_id)

    done = server.wait_status(run_id, {"completed", "failed"})

    assert done["output"] == {"route": "fix"}
    wait_for(lambda: len(tool_results(pi.records)) >= 2, 30, "both tool results")
    stale_end, corrected_end = tool_results(pi.records)[:2]
    calls = tool_calls(pi.records)
    new_request = calls[1]["requestId"]
    assert calls[0]["requestId"] == old_request != new_request
    assert stale_end["isError"] is True
    with server.client() as client, pytest.raises(RejectedError) as closed:
        client.submit(old_request, {"route": "fix"})
    assert closed.value.code == "requestClosed"
    assert result_text(stale_end) == f"{closed.value.message.rstrip('. ')}; {CLOSED_ADVICE}"
    assert old_request in result_text(stale_end)
    assert "cancelled" in result_text(stale_end)
    [waiting] = seen_after_refusal
    assert (waiting["requestId"], waiting["status"]) == (new_request, "pending")
    assert corrected_end["isError"] is False
    classify = [a for a in done["attempts"] if a["nodeId"] == "classify"]
    assert [a["status"] for a in classify] == ["interrupted", "completed"]
    assert server.query("SELECT request_id, status FROM interactive_submissions") == [
        (new_request, "accepted")
    ]


def test_the_model_continues_a_presented_checkpoint_with_the_answer_action(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """An ordinary checkpoint is presented to the model, which answers it with the tool's
    `answer` action as the checkpoint text says."""
    server.write_workflow("ask", ASK)
    run_id = start_from_origin(server, "ask")

    def answer(request: ChatRequest) -> dict[str, Any]:
        step = request.last_user_text()
        run = RUN_ID.search(step)
        assert run
        return {
            "action": "answer",
            "runId": run.group(0),
            "requestId": request_id_in(step),
            "value": {"name": "pi"},
        }

    provider.on(user_text_contains(CHECKPOINT_MARK), tool_call("workflow", answer))
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)

    done = server.wait_status(run_id, {"completed", "failed"})

    assert done["output"] == {"greeting": "hello pi"}
    [step] = workflow_messages(pi.entries(), "step")
    assert step["details"]["requestKind"] == "checkpoint"
    # Pi reports the tool's end a moment after the server took the answer: wait for it.
    [end] = wait_for(lambda: tool_results(pi.records)[:1], 30, "the answer's tool result")
    assert end["isError"] is False
    assert tool_calls(pi.records)[0]["requestId"] == step["details"]["requestId"]


def test_a_decision_is_shown_to_the_person_refused_by_the_tool_and_decided_with_the_command(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """A human decision appears as a card and in the widget without a model turn and never in
    the model's context; the tool refuses to answer it; `/workflow decide` answers it."""
    server.write_workflow("approve", APPROVE)
    run_id = start_from_origin(server, "approve")
    server.wait_status(run_id, "waiting")
    provider.on(
        user_text_contains("approve run_"),
        tool_call(
            "workflow",
            lambda r: {"action": "answer", "runId": run_id_of(r), "value": "ship"},
        ),
    )
    provider.on(last_tool_result_contains(PROTECTED), text("Only you can decide that."))
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)

    [card] = decision_cards(entries_until(pi, decision_cards, "the decision card"))
    wait_presenting(pi, server, epoch=1)

    assert card["data"]["title"] == "Ship the build?"
    assert [c["id"] for c in card["data"]["choices"]] == ["ship", "hold"]
    assert f"/workflow decide {run_id}" in card["data"]["text"]
    widget = [r for r in pi.ui_requests("setWidget") if r.get("widgetLines")][-1]
    assert any(f"/workflow decide {run_id}" in line for line in widget["widgetLines"])
    status = [r for r in pi.ui_requests("setStatus") if r.get("statusText")][-1]
    assert "decision waiting" in status["statusText"]
    assert not [r for r in pi.records if r.get("type") == "agent_start"]
    assert provider.requests() == []
    # The card is in the branch; the coordinator reports that after appending it.
    wait_for(
        lambda: message_rows(server, "decision")[0][1:] == ("sent", card["id"]),
        30,
        "the decision card to be reported as sent",
    )

    records = pi.run_prompt(f"approve {run_id} for me")

    [end] = tool_results(records)
    assert (end["isError"], result_text(end)) == (True, PROTECTED)
    for request in provider.requests():
        assert "Workflow decision" not in json.dumps(request.messages)
    pi.answer_dialog = lambda r: {"value": next(o for o in r["options"] if "[ship]" in o)}
    note = pi.slash(f"/workflow decide {run_id}")
    assert f"Decided ship for run {run_id}" in note["message"]
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"result": "shipped"}


def run_id_of(request: ChatRequest) -> str:
    """The run id in the user's last prompt."""
    match = RUN_ID.search(request.last_user_text())
    assert match, request.last_user_text()
    return match.group(0)


def test_a_notification_is_delivered_once_also_across_a_pi_restart(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """A notify node's message is added to its origin session without a turn of its own,
    exactly once, and a restarted Pi on the same session does not add it again."""
    server.write_workflow("note", NOTE)
    run_id = start_from_origin(server, "note", {"name": "the build"})
    server.wait_status(run_id, "waiting")
    provider.on(user_text_contains(CHECKPOINT_MARK), text("Noted."))
    finish_rules(provider)
    first = make_pi(session_id=SESSION)
    entries = entries_until(
        first,
        lambda es: workflow_messages(es, "notification") and workflow_messages(es, "step"),
        "the notification and the step",
    )
    first.settled(0)
    [note] = workflow_messages(entries, "notification")
    assert content_text(note) == "Starting the build"
    [asked] = provider.requests()  # one turn: the checkpoint's, which also carries the note
    assert asked.user_texts()[-2] == "Starting the build"
    first.stop()

    second = make_pi(session_id=SESSION)
    wait_presenting(second, server, epoch=2)

    assert len(workflow_messages(second.entries(), "notification")) == 1
    assert [row[1:] for row in message_rows(server, "notification")] == [("sent", note["id"])]
    assert len(provider.requests()) == 1
    second.slash(f'/workflow answer {run_id} {{"go": true}}')
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"answer": {"go": True}}


def test_the_run_result_starts_one_turn_only_after_the_completion_committed(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """Once the run completes, its result is added to the session with one presentation turn,
    whose model request is made while the server already shows the run completed."""
    write_step(server)
    run_id = start_from_origin(server, "step")
    seen: list[str] = []

    def present(_request: ChatRequest) -> Reply:
        seen.append(str(server.run(run_id)["status"]))
        return Reply(text="The run finished.")

    provider.on(user_text_contains(TERMINAL_MARK), present)
    provider.on(user_text_contains(STEP_MARK), submit_route("fix"))
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)

    wait_idle(pi, lambda: seen, "the presentation turn")
    entries = pi.entries()

    assert seen == ["completed"]
    [terminal] = workflow_messages(entries, "terminal")
    assert content_text(terminal).startswith(f"{TERMINAL_MARK}\nWorkflow: step\nRun: {run_id}")
    assert 'Output: {"route":"fix"}' in content_text(terminal)
    assert len(requests_with(provider, TERMINAL_MARK)) == 1
    [(message_id, status, entry_id)] = wait_for(
        lambda: [r for r in message_rows(server, "terminal") if r[1] == "sent"],
        30,
        "the result to be reported as sent",
    )
    assert (status, entry_id) == ("sent", terminal["id"])
    wait_for(
        lambda: len(server.query("SELECT 1 FROM workflow_turns WHERE status = 'ended'")) == 2,
        30,
        "both turns to end",
    )
    turns = server.query("SELECT message_id, stop_reason FROM workflow_turns ORDER BY started_at")
    assert turns[1] == (message_id, "completed")


def test_a_finished_run_leaves_the_session_with_its_normal_visible_entries(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """After a run started, answered and finished in Pi, the session file holds the whole
    conversation on one branch — prompt, replies, tool calls, the step and the result as
    visible messages — and reopening it shows the same conversation and presents nothing."""
    write_step(server)
    provider.on(
        user_text_contains("start step"),
        tool_call("workflow", {"action": "start", "workflow": "step"}),
    )
    provider.on(user_text_contains(STEP_MARK), submit_route("fix"))
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)
    run_id = run_of(pi.run_prompt("please start step"))
    server.wait_status(run_id, "completed")
    wait_idle(pi, lambda: requests_with(provider, TERMINAL_MARK), "the presentation turn")
    pi.stop()

    stored = session_file(pi.session_dir, SESSION)[1:]

    def shape(entry: Record) -> str:
        if entry["type"] == "custom_message":
            return f"workflow {entry['details']['kind']}"
        if entry["type"] == "message":
            message = entry["message"]
            if message["role"] == "assistant":
                calls = [p for p in message["content"] if p.get("type") == "toolCall"]
                return "assistant calls workflow" if calls else "assistant text"
            return str(message["role"])
        return str(entry["type"])

    conversation = [shape(e) for e in stored if e["type"] in ("message", "custom_message")]
    assert [s for s in conversation if s != "system"] == [
        "user",
        "assistant calls workflow",
        "toolResult",
        "assistant text",
        "workflow step",
        "assistant calls workflow",
        "toolResult",
        "assistant text",
        "workflow terminal",
        "assistant text",
    ]
    for previous, entry in itertools.pairwise(stored):
        assert entry["parentId"] == previous["id"], "one branch, nothing rewound"
    for entry in workflow_messages(stored):
        assert entry["display"] is True
        assert entry["details"]["workflowMessageId"] not in content_text(entry)
    asked = len(provider.requests())

    again = make_pi(session_id=SESSION)
    wait_for(
        lambda: server.query(
            "SELECT 1 FROM sessions WHERE session_id = ? AND coordinator_epoch = 2"
            " AND reported_at >= attached_at",
            SESSION,
        ),
        30,
        "the new coordinator's report of the branch",
    )

    assert [e["id"] for e in again.entries()] == [e["id"] for e in stored]
    assert len(provider.requests()) == asked
    assert server.run(run_id)["status"] == "completed"


# --- more of the session coordinator ---------------------------------------------------------


def test_an_assistant_message_step_is_completed_by_the_visible_reply(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """For an `assistant_message()` step the model just replies; the extension submits that
    visible reply as the step's output once the turn ends."""
    server.write_workflow("haiku", ASSISTANT)
    run_id = start_from_origin(server, "haiku")
    provider.on(user_text_contains(ASSISTANT_MARK), text(HAIKU))
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)

    done = server.wait_status(run_id, {"completed", "failed"})

    assert done["output"] == {"haiku": HAIKU}
    [step] = workflow_messages(pi.entries(), "step")
    assert step["details"]["requestKind"] == "assistant"
    assert tool_results(pi.records) == []
    assert server.query("SELECT status FROM interactive_submissions") == [("accepted",)]


def test_an_empty_reply_to_an_assistant_message_step_is_asked_again(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """An empty reply is rejected as the step's output; the extension tells the model why in
    a new turn, and its next reply completes the step."""
    server.write_workflow("haiku", ASSISTANT)
    run_id = start_from_origin(server, "haiku")
    provider.on(user_text_contains(REJECTED_MARK), text(HAIKU))
    provider.on(user_text_contains(ASSISTANT_MARK), text(""))
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)

    done = server.wait_status(run_id, {"completed", "failed"})

    assert done["output"] == {"haiku": HAIKU}
    [note] = workflow_messages(pi.entries(), "rejection")
    assert "it was empty" in content_text(note)
    assert server.query(
        "SELECT status FROM interactive_submissions ORDER BY submitted_at, rowid"
    ) == [("rejected",), ("accepted",)]


def test_escape_during_a_step_turn_pauses_the_run_and_resume_presents_it_again(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The person aborts the turn the step started: the run pauses (`turnAborted`) with its
    request open; `/workflow resume` presents the step once more and the model finishes it."""
    write_step(server)
    run_id = start_from_origin(server, "step")
    asked, release = threading.Event(), threading.Event()

    def held(_request: ChatRequest) -> Reply:
        asked.set()
        release.wait(30)
        return Reply(text="too late")

    provider.on(user_text_contains("(presented again)"), submit_route("fix"))
    provider.on(user_text_contains(STEP_MARK), held, times=1)
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)
    assert asked.wait(30), "the step's model request never came"

    pi.command({"type": "abort"})
    settled = pi.wait_for(lambda r: r.get("type") == "agent_settled")
    release.set()

    paused = server.wait_status(run_id, "paused")
    assert paused["parkReason"] == "turnAborted"
    assert paused["waitingOn"]["status"] == "pending"
    assert settled is not None
    pi.slash(f"/workflow resume {run_id}")
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"route": "fix"}
    steps = workflow_messages(pi.entries(), "step")
    assert len(steps) == 2
    assert "(presented again)" in content_text(steps[1])
    assert steps[0]["details"]["requestId"] == steps[1]["details"]["requestId"]
    stops = server.query("SELECT stop_reason FROM workflow_turns ORDER BY started_at")
    assert stops[0] == ("aborted",)


def test_a_second_pi_on_the_same_session_fences_the_first(
    root: Path, server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """Another Pi process attaching to the same session takes over presenting it; the first
    one says so and presents nothing more."""
    server.write_workflow("ask", ASK)
    provider.on(user_text_contains(CHECKPOINT_MARK), text("Noted."))
    finish_rules(provider)
    first = make_pi(session_id=SESSION)
    wait_for(lambda: coordinator_epoch(server) == 1, 30, "the first coordinator")
    second_root = root / "second"
    second_root.mkdir()
    second = PiProcess(
        second_root,
        provider,
        cwd=server.project,
        env={"PI_WORKFLOWS_HOME": str(server.home)},
        session_id=SESSION,
    )
    with second:
        first.wait_for(
            lambda r: r.get("method") == "setStatus" and "another Pi" in str(r.get("statusText")),
            what="the fenced status",
        )
        run_id = start_from_origin(server, "ask")
        entries_until(second, lambda es: workflow_messages(es, "step"), "the step in the second Pi")
        assert workflow_messages(first.entries()) == []
        assert server.run(run_id)["status"] == "waiting"
