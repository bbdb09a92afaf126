"""A step's `allowed_tools` with the real Pi, and the model-facing holes around steps.

Every real-Pi test runs a real pi-workflows server, the real Pi binary in RPC mode with only
our extension loaded and the built-in `read` and `bash` tools turned on (`--tools`), and the
scripted model. They check that a limited step blocks every other tool call through Pi's
`tool_call` hook (the model sees why), that the limit is lifted once the step is answered and
applied again after a Pi restart, that a step this Pi cannot guard is refused rather than
presented, that a detached run's headless Pi starts with only the tools its steps allow, that
an assistant-message reply the server never got is submitted on reattach, and that the tool
says a closed step is closed, needs request ids and leaves a protected decision's run alone.
The pure rules (`tool_flags`, `toollimit.ts`) are checked directly as well.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi.support.mock_provider import (
    MODEL_ID,
    PROVIDER,
    REQUEST_ID,
    ChatRequest,
    MockProvider,
    Reply,
    last_is_tool_result,
    last_tool_result_contains,
    message_text,
    request_id_in,
    text,
    tool_call,
    user_text_contains,
)
from pi.support.pi_rpc import (
    MakePi,
    PiProcess,
    Record,
    evaluate_extension,
    node_bin,
    pi_binary,
)
from pi.support.records import content_text, result_text, tool_results, workflow_messages
from pi_workflows.server.agents import tool_flags

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(120)

SESSION = "tools-session"
STEP_MARK = "--- Workflow step ---"
TERMINAL_MARK = "--- Workflow run finished ---"
CHECKPOINT_MARK = "--- Workflow checkpoint ---"
ASSISTANT_MARK = "Your visible reply is this step's output"
BLOCKED = "Blocked by pi-workflows"
CLOSED_ADVICE = (
    "this workflow step is closed: do not submit or answer it again unless the workflow"
    " presents it to you again"
)
TOOLS = ["--tools", "read,bash,workflow"]
"""Pi's tools in these tests: the built-in `read` and `bash`, and our `workflow`."""
HAIKU = "An old silent pond / a frog jumps into the pond / splash! Silence again."

LIMITED = """
from pi_workflows import Workflow, agent, compute, edge

workflow = Workflow(
    "limited",
    start="classify",
    nodes={{
        "classify": agent(prompt="Classify the report", expected_output='{{"route": "fix"}}',
                          allowed_tools={tools!r}),
        "done": compute(lambda ctx: {{"route": ctx.outputs["classify"]["route"]}}),
    }},
    edges=[edge("classify", "done")],
)
"""

HAIKU_FLOW = """
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
from pi_workflows import Workflow, choice, compute, human_decision, edge

workflow = Workflow(
    "approve",
    start="approve",
    nodes={
        "approve": human_decision(title="Ship the build?",
                                  choices=[choice("ship", "Ship it"), choice("hold", "Hold")]),
        "done": compute(lambda ctx: {"choice": ctx.outputs["approve"]["choice"]}),
    },
    edges=[edge("approve", "done")],
)
"""


# --- helpers ---------------------------------------------------------------------------------


def write_limited(server: ServerProcess, tools: list[str]) -> None:
    """Write the `limited` workflow: one agent step allowing `tools`, then a compute node."""
    server.write_workflow("limited", LIMITED.format(tools=tools))


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
    """The replies every test needs last: to a finished run, and after a tool result."""
    provider.on(user_text_contains(TERMINAL_MARK), text("The run finished."), name="terminal")
    provider.on(last_is_tool_result, text("Done."), name="after a tool result")


def tool_ends(records: list[Record], name: str) -> list[Record]:
    """The `tool_execution_end` records of tool `name`."""
    return [
        r for r in records if r.get("type") == "tool_execution_end" and r.get("toolName") == name
    ]


def entries_until(pi: PiProcess, predicate: Any, what: str) -> list[Record]:
    """Pi's session entries once `predicate(entries)` holds (polled with a deadline)."""

    def check() -> list[Record] | None:
        entries = pi.entries()
        return entries if predicate(entries) else None

    return list(wait_for(check, 30, what))


def idle(pi: PiProcess) -> bool:
    """True when Pi runs no model turn."""
    return not pi.command({"type": "get_state"})["data"]["isStreaming"]


def prompt_between_turns(pi: PiProcess, message: str) -> list[Record]:
    """`run_prompt` once Pi runs no turn: a Pi reopened on a session whose step's turn was
    lost presents the step again with a turn of its own, which may start at any moment; a
    prompt that meets it ("already processing") waits for it to end and is sent again."""
    end = time.monotonic() + 60.0
    while True:
        wait_for(lambda: idle(pi), 30, "Pi between turns")
        try:
            return pi.run_prompt(message)
        except AssertionError as exc:
            if "already processing" not in str(exc) or time.monotonic() > end:
                raise


def requests_with(provider: MockProvider, fragment: str) -> list[ChatRequest]:
    """The model requests whose last message is a user message containing `fragment`."""
    return [r for r in provider.requests() if user_text_contains(fragment)(r)]


def run_toollimit_ts(expression: str) -> Any:
    """Evaluate `expression` over `toollimit.ts`'s exports (as `limit`); its JSON value."""
    return evaluate_extension("toollimit.ts", "limit", expression)


# --- the pure rules --------------------------------------------------------------------------


def test_headless_tool_flags_are_the_union_of_the_steps_limits_or_pis_defaults() -> None:
    """`--tools` names the union of the agent steps' tools plus `workflow`; a step without a
    limit (an agent without `allowed_tools`, or a checkpoint) keeps Pi's default tools."""
    agent = lambda tools: {"kind": "agent", "allowedTools": tools}  # noqa: E731
    compute = {"kind": "compute"}
    steps = {"a": agent(["read"]), "b": agent(["grep", "read"]), "c": compute}
    assert tool_flags({"nodes": steps}) == ["--tools", "grep,read,workflow"]
    assert tool_flags({"nodes": {"a": agent([])}}) == ["--tools", "workflow"]
    assert tool_flags({"nodes": {"a": agent(["read"]), "b": agent(None)}}) == []
    assert tool_flags({"nodes": {"a": agent(["read"]), "b": {"kind": "checkpoint"}}}) == []
    for bad in ("read,bash", "mcp__*", "-write", " "):
        with pytest.raises(ValueError, match="not a tool name Pi's --tools can carry"):
            tool_flags({"nodes": {"a": agent([bad])}})


def test_a_pi_without_the_tool_call_hook_or_a_tool_cannot_enforce_a_limit() -> None:
    """`enforcementProblem` names a Pi older than 1.x and each allowed tool Pi does not have;
    a Pi that has every allowed tool has no problem, and a missing `allowedTools` is unreadable."""
    known = "new Set(['read', 'bash', 'workflow'])"
    found = run_toollimit_ts(
        "{"
        f"old: limit.enforcementProblem(['read'], {known}, '0.73.1'),"
        f"none: limit.enforcementProblem(['read'], {known}, undefined),"
        f"typo: limit.enforcementProblem(['read', 'frobnicate'], {known}, '1.6.0'),"
        f"fine: limit.enforcementProblem(['read', 'bash'], {known}, '1.6.0') ?? null,"
        "missing: limit.parseAllowedTools(undefined),"
        "empty: limit.parseAllowedTools([]),"
        "}"
    )
    assert "this Pi (0.73.1) has no tool_call hook" in found["old"]
    assert "unknown version" in found["none"]
    assert found["typo"].startswith("the step allows a tool this Pi does not have: frobnicate")
    assert found["fine"] is None
    assert found["missing"]["kind"] == "unreadable"
    assert found["empty"] == {"kind": "limit", "tools": []}


# --- the limit in the origin session ---------------------------------------------------------


def test_a_limited_step_blocks_other_tools_until_it_is_answered(
    root: Path, server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """During a step with `allowed_tools=["read"]` the model's `bash` call is blocked and the
    model sees why; it then submits, and once the step is answered `bash` runs again."""
    write_limited(server, ["read"])
    marker = root / "ran-bash"
    bash = tool_call("bash", {"command": f"touch {marker}"})
    provider.on(last_tool_result_contains(BLOCKED), submit_route("fix"), name="after the block")
    provider.on(user_text_contains(STEP_MARK), bash, name="the step")
    provider.on(user_text_contains("run bash now"), bash, name="the person's bash")
    finish_rules(provider)
    run_id = server.start_run("limited", origin_session=SESSION)
    pi = make_pi(session_id=SESSION, extra_args=TOOLS)

    done = server.wait_status(run_id, {"completed", "failed"})
    wait_for(lambda: requests_with(provider, TERMINAL_MARK) and idle(pi), 30, "the result turn")

    assert done["output"] == {"route": "fix"}
    [blocked] = tool_ends(pi.records, "bash")
    assert blocked["isError"] is True
    [step] = workflow_messages(pi.entries(), "step")
    reason = result_text(blocked)
    assert BLOCKED in reason, reason
    assert "allows only read and workflow" in reason, reason
    assert step["details"]["requestId"] in reason
    assert not marker.exists()
    [after_block] = [r for r in provider.requests() if last_tool_result_contains(BLOCKED)(r)]
    assert BLOCKED in message_text(after_block.last)
    assert "you may call only `read` and the `workflow` tool" in content_text(step)
    assert step["details"]["allowedTools"] == ["read"]

    records = pi.run_prompt("run bash now")

    [ran] = tool_ends(records, "bash")
    assert ran["isError"] is False, ran
    assert marker.exists()


def test_an_empty_allowed_tools_list_lets_only_the_workflow_tool_through(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """With `allowed_tools=[]` even `read` is blocked, and the `workflow` tool still submits."""
    write_limited(server, [])
    provider.on(last_tool_result_contains(BLOCKED), submit_route("skip"), name="after the block")
    provider.on(
        user_text_contains(STEP_MARK), tool_call("read", {"path": "README.md"}), name="the step"
    )
    finish_rules(provider)
    run_id = server.start_run("limited", origin_session=SESSION)
    pi = make_pi(session_id=SESSION, extra_args=TOOLS)

    done = server.wait_status(run_id, {"completed", "failed"})

    assert done["output"] == {"route": "skip"}
    wait_for(lambda: tool_ends(pi.records, "read"), 30, "the blocked read's end")
    [blocked] = tool_ends(pi.records, "read")
    assert blocked["isError"] is True
    assert "allows only the workflow tool" in result_text(blocked)
    wait_for(lambda: tool_results(pi.records), 30, "the workflow tool's result")
    assert tool_results(pi.records)[0]["isError"] is False
    [step] = workflow_messages(pi.entries(), "step")
    assert "you may call only the `workflow` tool" in content_text(step)


def test_the_limit_is_applied_again_after_pi_restarts_while_the_step_is_open(
    root: Path, server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """Pi is killed in the middle of the step's turn (after a `read`), leaving the step open;
    a new Pi on the same session is handed the step again in a turn of its own (the killed
    turn was lost), blocks `bash` in it (from the step entry's recorded limit and the
    server's view), and lifts the limit once the step is submitted."""
    write_limited(server, ["read"])
    (server.project / "report.txt").write_text("a report\n")
    marker = root / "ran-bash"
    bash = tool_call("bash", {"command": f"touch {marker}"})
    held, release = threading.Event(), threading.Event()

    def hold(_request: ChatRequest) -> Reply:
        held.set()
        release.wait(30)
        return Reply(text="too late")

    # The model reads in the step's first turn (then Pi dies), tries `bash` when the step
    # is presented again, and submits once `bash` was blocked: the step is submitted in the
    # turn that presents it again, so no turn ends without a submission (no reminder).
    provider.on(last_tool_result_contains(BLOCKED), submit_route("fix"), name="submit")
    provider.on(
        user_text_contains(STEP_MARK), tool_call("read", {"path": "report.txt"}), times=1,
        name="read",
    )  # fmt: skip
    provider.on(user_text_contains(STEP_MARK), bash, name="bash in the step")
    provider.on(user_text_contains("run bash"), bash, name="bash")
    provider.on(last_tool_result_contains("a report"), hold, times=1, name="held after read")
    finish_rules(provider)
    run_id = server.start_run("limited", origin_session=SESSION)
    first = make_pi(session_id=SESSION, extra_args=TOOLS)
    assert held.wait(30), "the step's turn never asked the model after its read"
    first.kill()
    release.set()

    second = make_pi(session_id=SESSION, extra_args=TOOLS)
    server.wait_status(run_id, {"completed", "failed"})
    wait_for(lambda: requests_with(provider, TERMINAL_MARK) and idle(second), 30, "the result")
    blocked = tool_ends(second.since(0), "bash")
    ran = tool_ends(prompt_between_turns(second, "run bash again"), "bash")

    assert [(r["isError"], BLOCKED in result_text(r)) for r in blocked] == [(True, True)]
    assert [r["isError"] for r in ran] == [False]
    assert marker.exists()
    assert server.run(run_id)["output"] == {"route": "fix"}
    first_step, *again = workflow_messages(second.entries(), "step")
    assert "(presented again)" not in content_text(first_step)
    assert [("(presented again)" in content_text(m)) for m in again] == [True]


def test_a_step_allowing_a_tool_this_pi_lacks_is_refused_and_its_run_paused(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """A limit naming a tool this Pi does not have cannot be checked, so the step is not
    presented: the person gets an error and a card naming the tool, and the run is paused."""
    write_limited(server, ["read", "frobnicate"])
    finish_rules(provider)
    run_id = server.start_run("limited", origin_session=SESSION)
    pi = make_pi(session_id=SESSION, extra_args=TOOLS)

    paused = server.wait_status(run_id, "paused")
    error = pi.wait_notify(lambda r: r.get("notifyType") == "error")
    cards = entries_until(
        pi, lambda es: [e for e in es if e.get("customType") == "pi-workflows-refusal"], "the card"
    )

    assert paused["parkReason"] == "userPaused"
    assert paused["waitingOn"]["status"] == "pending"
    assert "a tool this Pi does not have: frobnicate" in error["message"]
    assert f"/workflow resume {run_id}" in error["message"]
    [card] = [e for e in cards if e.get("customType") == "pi-workflows-refusal"]
    assert card["type"] == "custom"
    assert card["data"]["requestId"] == paused["waitingOn"]["requestId"]
    assert workflow_messages(pi.entries(), "step") == []
    assert requests_with(provider, STEP_MARK) == []


# --- assistant-message replies, closed steps, and what the tool refuses ----------------------


def test_an_assistant_reply_the_server_never_got_is_submitted_when_the_session_reattaches(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The server dies between the model's reply and its submission (and cannot be started
    from Pi); once a server is back, the coordinator reattaches and submits that reply from
    the branch, once, and the run completes with it as the step's output."""
    server.write_workflow("haiku", HAIKU_FLOW)
    run_id = server.start_run("haiku", origin_session=SESSION)
    server.wait_status(run_id, "waiting")

    def reply_after_the_server_died(_request: ChatRequest) -> Reply:
        server.kill()
        return Reply(text=HAIKU)

    provider.on(user_text_contains(ASSISTANT_MARK), reply_after_the_server_died, times=1)
    finish_rules(provider)
    pi = make_pi(session_id=SESSION, env={"PI_WORKFLOWS_CLI": "/bin/false"})
    failed = pi.wait_notify(lambda r: "was not submitted" in str(r.get("message")))
    assert "it is submitted when the server is back" in failed["message"]
    assert server.query("SELECT COUNT(*) FROM interactive_submissions") == [(0,)]

    server.start()

    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"haiku": HAIKU}
    assert server.query("SELECT status FROM interactive_submissions") == [("accepted",)]
    assert len(requests_with(provider, ASSISTANT_MARK)) == 1


def test_a_reply_to_a_step_closed_meanwhile_tells_the_model_not_to_answer_it_again(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The run is cancelled while the model writes its reply to an assistant-message step;
    the refused submission adds a note that the step is closed (no reply-again note, no new
    turn for it)."""
    server.write_workflow("haiku", HAIKU_FLOW)
    run_id = server.start_run("haiku", origin_session=SESSION)
    server.wait_status(run_id, "waiting")

    def reply_after_cancel(_request: ChatRequest) -> Reply:
        with server.client() as client:
            client.cancel(run_id)
        return Reply(text=HAIKU)

    provider.on(user_text_contains(ASSISTANT_MARK), reply_after_cancel, times=1)
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)

    entries = entries_until(pi, lambda es: workflow_messages(es, "closed"), "the closed note")

    [note] = workflow_messages(entries, "closed")
    assert "--- Workflow step closed ---" in content_text(note)
    assert "Do not answer or submit it again" in content_text(note)
    assert workflow_messages(entries, "rejection") == []
    assert server.run(run_id)["status"] == "cancelled"
    assert not [r for r in provider.requests() if user_text_contains("step closed")(r)]


def test_a_submission_for_a_closed_step_says_not_to_submit_it_again(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The model submits a step whose run was cancelled: the tool's error is the server's
    message followed by the advice not to submit the closed step again."""
    write_limited(server, ["read"])
    held, release = threading.Event(), threading.Event()

    def later(_request: ChatRequest) -> Reply:
        held.set()
        release.wait(30)
        return Reply(text="Later.")

    provider.on(user_text_contains("submit the old step"), submit_route("fix"), name="late")
    provider.on(user_text_contains(STEP_MARK), later, name="later, once the run is cancelled")
    finish_rules(provider)
    run_id = server.start_run("limited", origin_session=SESSION)
    pi = make_pi(session_id=SESSION, extra_args=TOOLS)
    assert held.wait(30), "the step's turn never asked the model"
    with server.client() as client:
        client.cancel(run_id)
    server.wait_status(run_id, "cancelled")
    release.set()
    wait_for(lambda: requests_with(provider, TERMINAL_MARK) and idle(pi), 30, "the result turn")

    [end] = tool_results(pi.run_prompt("submit the old step"))

    assert end["isError"] is True
    assert "cancelled" in result_text(end)
    assert result_text(end).endswith(CLOSED_ADVICE)


def test_the_tool_needs_the_request_id_to_answer_a_checkpoint(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """An `answer` without `requestId` is refused before anything is sent, with a message
    naming the field; the run keeps waiting."""
    server.write_workflow("ask", ASK)
    run_id = server.start_run("ask")
    server.wait_status(run_id, "waiting")
    provider.on(
        user_text_contains("answer it"),
        tool_call("workflow", {"action": "answer", "runId": run_id, "value": {"name": "pi"}}),
    )
    finish_rules(provider)
    pi = make_pi()

    [end] = tool_results(pi.run_prompt("answer it"))

    assert end["isError"] is True
    assert result_text(end) == (
        "answer needs `requestId`, the checkpoint's request id, from its text"
    )
    assert server.run(run_id)["status"] == "waiting"


def test_the_tool_refuses_to_pause_or_cancel_a_run_waiting_on_a_human_decision(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """A run waiting on a protected decision is the person's to pause or cancel: the tool
    refuses both with one line naming the person's commands, and the run keeps waiting."""
    server.write_workflow("approve", APPROVE)
    run_id = server.start_run("approve")
    server.wait_status(run_id, "waiting")
    provider.on(
        user_text_contains("pause it"),
        tool_call("workflow", {"action": "pause", "runId": run_id}),
    )
    provider.on(
        user_text_contains("cancel it"),
        tool_call("workflow", {"action": "cancel", "runId": run_id, "reason": "no"}),
    )
    finish_rules(provider)
    pi = make_pi()

    [paused] = tool_results(pi.run_prompt("pause it"))
    [cancelled] = tool_results(pi.run_prompt("cancel it"))

    assert paused["isError"] is True
    assert cancelled["isError"] is True
    assert result_text(paused) == (
        f"Run {run_id} waits on a protected human decision: the workflow tool cannot pause it;"
        f" the person decides (/workflow decide {run_id}) or pauses it (/workflow pause {run_id})"
    )
    assert "cannot cancel it" in result_text(cancelled)
    assert server.run(run_id)["status"] == "waiting"


EXHAUSTS = """
from pi_workflows import Workflow, compute, retry


def fails(ctx):
    raise RuntimeError("always")


workflow = Workflow("exhausts", start="call",
                    nodes={"call": compute(fails, retry=retry(attempts=2, delay=0,
                                                                on_exhausted="pause"))})
"""


def test_the_tool_refuses_to_resume_a_run_whose_retries_ran_out(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """Only a person starts a fresh round of tries: the tool's `resume` of a run parked
    `retriesExhausted` is refused with one line naming the person's commands, and the run
    stays parked with its two tries."""
    server.write_workflow("exhausts", EXHAUSTS)
    run_id = server.start_run("exhausts")
    assert server.wait_status(run_id, "paused")["parkReason"] == "retriesExhausted"
    provider.on(
        user_text_contains("resume it"),
        tool_call("workflow", {"action": "resume", "runId": run_id}),
    )
    finish_rules(provider)
    pi = make_pi()

    [resumed] = tool_results(pi.run_prompt("resume it"))

    assert resumed["isError"] is True
    assert result_text(resumed) == (
        f"Run {run_id} paused because a node's retries ran out (retriesExhausted): only a"
        f" person starts a fresh round of tries (/workflow resume {run_id} or pi-workflows run"
        f" resume {run_id})"
    )
    view = server.run(run_id)
    assert (view["status"], view["parkReason"]) == ("paused", "retriesExhausted")
    assert len(view["attempts"]) == 2


# --- the headless Pi of a detached run -------------------------------------------------------


ARGV_FILE = "headless-argv.txt"
"""Where the headless Pi's wrapper writes the arguments it was started with, one a line
(Pi sets its process title, so `/proc/PID/cmdline` no longer shows them)."""


@pytest.fixture
def detached_server(root: Path, provider: MockProvider) -> Iterator[ServerProcess]:
    """A started server whose headless agents are the real Pi (behind a wrapper that records
    its arguments, then execs it), configured by the user's `~/.pi/agent` (the server's
    `HOME`) to use the scripted model."""
    wrapper = root / "pi-wrapper"
    wrapper.write_text(
        f'#!/bin/sh\nprintf \'%s\\n\' "$@" > {root / ARGV_FILE}\nexec {pi_binary()} "$@"\n'
    )
    wrapper.chmod(0o755)
    process = ServerProcess(
        root / "detached",
        env={
            "PI_WORKFLOWS_PI": str(wrapper),
            "PATH": f"{node_bin()}{os.pathsep}{os.environ.get('PATH', '')}",
            "PI_OFFLINE": "1",
            "PI_TELEMETRY": "0",
            "PI_SKIP_VERSION_CHECK": "1",
            "NO_COLOR": "1",
        },
    )
    process.env.pop("PI_CODING_AGENT_DIR", None)
    agent_dir = process.user_home / ".pi" / "agent"
    agent_dir.mkdir(parents=True)
    (agent_dir / "models.json").write_text(json.dumps(provider.models_json()))
    settings = {"defaultProvider": PROVIDER, "defaultModel": MODEL_ID, "quietStartup": True}
    (agent_dir / "settings.json").write_text(json.dumps({**settings, "retry": {"enabled": False}}))
    try:
        yield process.start()
    finally:
        process.cleanup()


def test_a_detached_runs_headless_pi_starts_with_only_the_tools_its_steps_allow(
    root: Path, detached_server: ServerProcess, provider: MockProvider
) -> None:
    """The headless Pi of a detached run whose step allows `read` is started with
    `--tools read,workflow`: the model is offered only those two tools, and the step is
    completed with the `workflow` tool."""
    server = detached_server
    write_limited(server, ["read"])
    provider.on(user_text_contains(STEP_MARK), submit_route("fix"), name="the step")
    finish_rules(provider)
    with server.client() as client:
        run_id = str(
            client.start_run(
                "limited", {}, project_dir=server.project, detached=True, env=server.user_env()
            )["runId"]
        )

    done = server.wait_status(run_id, {"completed", "failed"})

    assert done["output"] == {"route": "fix"}
    [step_request] = requests_with(provider, STEP_MARK)
    assert sorted(step_request.tool_names) == ["read", "workflow"]
    argv = (root / ARGV_FILE).read_text().splitlines()
    assert argv[argv.index("--tools") + 1] == "read,workflow"
    assert "--no-extensions" in argv


TWO_STEPS = """
from pi_workflows import Workflow, agent, compute, edge

workflow = Workflow(
    "two",
    start="first",
    nodes={
        "first": agent(prompt="First step: look around", expected_output='{"route": "fix"}',
                       allowed_tools=["read"]),
        "second": agent(prompt="Second step: run the check", expected_output='{"route": "fix"}',
                        allowed_tools=["bash"]),
        "done": compute(lambda ctx: {"second": ctx.outputs["second"]["route"]}),
    },
    edges=[edge("first", "second"), edge("second", "done")],
)
"""


def test_a_headless_pi_serving_two_steps_enforces_each_steps_own_tools(
    root: Path, detached_server: ServerProcess, provider: MockProvider
) -> None:
    """One headless Pi serves a step allowing `read`, then one allowing `bash`: it starts with
    the union (`bash,read,workflow`), and `bash` is blocked in the first step and runs in the
    second."""
    server = detached_server
    server.write_workflow("two", TWO_STEPS)
    first, second = root / "first-bash", root / "second-bash"

    def submit_latest(request: ChatRequest) -> dict[str, Any]:
        latest = REQUEST_ID.findall("\n".join(request.user_texts()))[-1]
        return {"action": "submit", "requestId": latest, "output": {"route": "fix"}}

    provider.on(last_tool_result_contains(BLOCKED), tool_call("workflow", submit_latest))
    provider.on(last_tool_result_contains("Submitted the output"), text("Submitted."))
    provider.on(last_is_tool_result, tool_call("workflow", submit_latest), name="after bash")
    provider.on(user_text_contains("First step"), tool_call("bash", {"command": f"touch {first}"}))
    provider.on(
        user_text_contains("Second step"), tool_call("bash", {"command": f"touch {second}"})
    )
    provider.on(user_text_contains(TERMINAL_MARK), text("The run finished."))
    with server.client() as client:
        run_id = str(
            client.start_run(
                "two", {}, project_dir=server.project, detached=True, env=server.user_env()
            )["runId"]
        )

    done = server.wait_status(run_id, {"completed", "failed"})

    assert done["output"] == {"second": "fix"}
    assert not first.exists()
    assert second.exists()
    argv = (root / ARGV_FILE).read_text().splitlines()
    assert argv[argv.index("--tools") + 1] == "bash,read,workflow"
    blocked = [r for r in provider.requests() if last_tool_result_contains(BLOCKED)(r)]
    assert len(blocked) == 1
    assert "allows only read and workflow" in message_text(blocked[0].last)
    assert server.query("SELECT COUNT(*) FROM agent_processes WHERE run_id = ?", run_id) == [(1,)]
