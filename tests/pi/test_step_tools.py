"""A limited step turns on the Pi tools it allows that the session has but had not turned on.

A default Pi registers `read`, `bash`, `edit`, `write`, `grep`, `find` and `ls` and turns on
only the first four. A step allowing `read, grep, find, ls` (as `builtin:implement`'s plan
does) must give the model those tools, and the session must get its own set back once the
step is over, also when Pi is killed during the step or quits after it (Pi records the active
tools in the session and restores them when it opens it again). Every Pi test runs a real
server, the real Pi in RPC mode with its default tools (`builtin_tools=True`) and only our
extension, and the scripted model; what the model is offered is read from its requests. The
pure rules of `toolset.ts` are checked directly under the pinned Node.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from pi.support.mock_provider import (
    ChatRequest,
    MockProvider,
    Reply,
    last_is_tool_result,
    last_tool_result_contains,
    request_id_in,
    text,
    tool_call,
    user_text_contains,
)
from pi.support.pi_rpc import MakePi, PiProcess, Record, evaluate_extension
from pi.support.records import content_text, workflow_messages

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(120)

SESSION = "step-tools-session"
STEP_MARK = "--- Workflow step ---"
READ_TOOLS = ["read", "grep", "find", "ls"]
DEFAULT_ON = {"read", "bash", "edit", "write"}
"""The tools a default Pi turns on (besides our `workflow`)."""
TURNED_ON = {"grep", "find", "ls"}
TOOLS_ENTRY = "pi-workflows-tools"

LOOK_THEN_DECIDE = """
from pi_workflows import Workflow, agent, choice, compute, edge, human_decision

workflow = Workflow(
    "look",
    start="look",
    nodes={
        "look": agent(prompt="Look at the project", expected_output='{"route": "fix"}',
                      allowed_tools=["read", "grep", "find", "ls"]),
        "approve": human_decision(title="Go on?", choices=[choice("yes"), choice("no")]),
        "done": compute(lambda ctx: {"route": ctx.outputs["look"]["route"]}),
    },
    edges=[edge("look", "approve"), edge("approve", "done")],
)
"""
"""An agent step allowing the read-only tools, then a decision (no model turn after the step)."""


# --- helpers ---------------------------------------------------------------------------------


def submit_fix(request: ChatRequest) -> dict[str, Any]:
    """The `workflow` submit arguments for the step the model was sent."""
    return {
        "action": "submit",
        "requestId": request_id_in("\n".join(request.user_texts())),
        "output": {"route": "fix"},
    }


def offered(provider: MockProvider, fragment: str) -> list[set[str]]:
    """The tool sets offered with each request whose last user text contains `fragment`."""
    return [set(r.tool_names) for r in provider.requests() if user_text_contains(fragment)(r)]


def tool_records(entries: list[Record]) -> list[dict[str, Any]]:
    """The data of the extension's tool records, in order."""
    return [e["data"] for e in entries if e.get("customType") == TOOLS_ENTRY]


def idle(pi: PiProcess) -> bool:
    """True when Pi runs no model turn."""
    return not pi.command({"type": "get_state"})["data"]["isStreaming"]


def decision_waits(server: ServerProcess, run_id: str) -> bool:
    """True once the run waits on its decision."""
    return (server.run(run_id).get("waitingOn") or {}).get("kind") == "decision"


def run_toolset_ts(expression: str) -> Any:
    """Evaluate `expression` over `toolset.ts`'s exports (as `tools`); its JSON value."""
    return evaluate_extension("toolset.ts", "tools", expression)


# --- the pure rules --------------------------------------------------------------------------


def test_what_a_branch_says_may_still_be_on_after_a_restart() -> None:
    """An `activate` record without its `restore` leaves its tools outstanding; a `restore`
    leaves outstanding only the tools the transcript's loadout (Pi's system messages) still
    holds with no loadout change after it; nothing recorded, nothing outstanding."""
    activate = {
        "type": "custom",
        "customType": TOOLS_ENTRY,
        "data": {"action": "activate", "requestId": "req_1", "added": ["grep", "ls"]},
    }
    restore = {
        "type": "custom",
        "customType": TOOLS_ENTRY,
        "data": {"action": "restore", "requestId": "req_1", "removed": ["grep", "ls"]},
    }

    def system(added: list[str], removed: list[str]) -> dict[str, Any]:
        message = {
            "role": "system",
            "toolsAdded": [{"name": n} for n in added],
            "toolsRemoved": [{"name": n} for n in removed],
        }
        return {"type": "message", "message": message}

    first = system(["read", "bash", "workflow"], [])
    during = system(["grep", "ls"], [])
    after = system([], ["grep", "ls"])
    branches = {
        "nothing": [first],
        "killed": [first, activate, during],
        "quitBeforeAnyRequest": [first, activate, during, restore],
        "recordedSince": [first, activate, during, restore, after],
        "neverRequested": [first, activate, restore],
        "otherRecord": [{"type": "custom", "customType": "x", "data": {}}],
    }
    found = run_toolset_ts(
        "Object.fromEntries(Object.entries("
        + json.dumps(branches)
        + ").map(([k, b]) => [k, tools.outstanding(b) ?? null]))"
    )

    assert found == {
        "nothing": None,
        "killed": {"requestId": "req_1", "added": ["grep", "ls"]},
        "quitBeforeAnyRequest": {"requestId": "req_1", "added": ["grep", "ls"]},
        "recordedSince": None,
        "neverRequested": None,
        "otherRecord": None,
    }
    on = run_toolset_ts(
        "tools.toTurnOn(['read', 'ls', 'ls', 'frob', 'hid'], new Set(['read']),"
        " new Set(['read', 'ls', 'grep']))"
    )
    assert on == ["ls"]


# --- with the real Pi ------------------------------------------------------------------------


def test_a_step_turns_on_its_allowed_tools_and_the_session_gets_its_own_back_after_it(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """In a default Pi, a step allowing `read, grep, find, ls` is sent with all four offered
    to the model (its text names exactly those), its `ls` call runs, and once the step is
    submitted the next request offers the session's own set again: `grep`, `find` and `ls`
    off, `bash`, `edit` and `write` still on. Both changes are recorded in the session."""
    server.write_workflow("look", LOOK_THEN_DECIDE)
    (server.project / "notes.txt").write_text("notes\n")
    provider.on(user_text_contains(STEP_MARK), tool_call("ls", {"path": "."}), name="the step")
    provider.on(last_tool_result_contains("notes.txt"), tool_call("workflow", submit_fix))
    provider.on(last_is_tool_result, text("Submitted."), name="after the submission")
    provider.on(user_text_contains("what now"), text("Nothing."), name="the person")
    run_id = server.start_run("look", origin_session=SESSION)
    pi = make_pi(session_id=SESSION, builtin_tools=True)

    wait_for(lambda: decision_waits(server, run_id) and idle(pi), 30, "the step to be done")
    ls_runs = [
        r for r in pi.records if r.get("type") == "tool_execution_end" and r["toolName"] == "ls"
    ]
    pi.run_prompt("what now?")

    [during] = offered(provider, STEP_MARK)
    assert during == DEFAULT_ON | TURNED_ON | {"workflow"}
    assert [r["isError"] for r in ls_runs] == [False]
    [after] = offered(provider, "what now")
    assert after == DEFAULT_ON | {"workflow"}
    [step] = workflow_messages(pi.entries(), "step")
    assert "you may call only `read`, `grep`, `find`, `ls` and the `workflow` tool" in content_text(
        step
    )
    request_id = step["details"]["requestId"]
    assert tool_records(pi.entries()) == [
        {"action": "activate", "requestId": request_id, "added": ["grep", "find", "ls"]},
        {"action": "restore", "requestId": request_id, "removed": ["grep", "find", "ls"]},
    ]


def restored(pi: PiProcess, count: int) -> bool:
    """True once the session holds `count` restore records."""
    return len([d for d in tool_records(pi.entries()) if d["action"] == "restore"]) >= count


def test_tools_a_step_turned_on_are_off_when_pi_opens_the_session_after_quitting(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """A Pi that quits right after the step (no model request since its tools went off, so
    the session still records them as on) is followed by one that offers the session's own
    set again: it turns `grep`, `find` and `ls` off as soon as it knows the step is over."""
    server.write_workflow("look", LOOK_THEN_DECIDE)
    provider.on(user_text_contains(STEP_MARK), tool_call("workflow", submit_fix), name="submit")
    provider.on(last_is_tool_result, text("Submitted."), name="after the submission")
    provider.on(user_text_contains("hello"), text("Hello."), name="the person")
    run_id = server.start_run("look", origin_session=SESSION)
    first = make_pi(session_id=SESSION, builtin_tools=True)
    wait_for(lambda: decision_waits(server, run_id) and idle(first), 30, "the step to be done")
    # The extension turns the tools off once it learns the step is over, which may come
    # just after the run shows its decision waiting.
    wait_for(lambda: restored(first, 1), 30, "the tools turned off after the step")
    first.stop()

    second = make_pi(session_id=SESSION, builtin_tools=True)
    wait_for(lambda: restored(second, 2), 30, "the tools turned off again")
    second.run_prompt("hello")

    [during] = offered(provider, STEP_MARK)
    assert during == DEFAULT_ON | TURNED_ON | {"workflow"}
    [after] = offered(provider, "hello")
    assert after == DEFAULT_ON | {"workflow"}
    assert [d["action"] for d in tool_records(second.entries())] == [
        "activate",
        "restore",
        "restore",
    ]


def test_tools_a_step_turned_on_are_off_after_pi_was_killed_during_the_step(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """Pi is killed in the middle of the step's turn (after an `ls` with the tools on), and
    the step is then submitted by another client. The next Pi on the session first keeps the
    step's tools (the branch says the step may still be in force), then turns them off once
    the server says the run moved on, and the person's next request is offered the session's
    own set."""
    server.write_workflow("look", LOOK_THEN_DECIDE)
    (server.project / "notes.txt").write_text("notes\n")
    held, release = threading.Event(), threading.Event()

    def hold(_request: ChatRequest) -> Reply:
        held.set()
        release.wait(30)
        return Reply(text="too late")

    provider.on(user_text_contains(STEP_MARK), tool_call("ls", {"path": "."}), name="the step")
    provider.on(last_tool_result_contains("notes.txt"), hold, times=1, name="held after ls")
    provider.on(user_text_contains("hello"), text("Hello."), name="the person")
    run_id = server.start_run("look", origin_session=SESSION)
    first = make_pi(session_id=SESSION, builtin_tools=True)
    assert held.wait(30), "the step's turn never asked the model after its ls"
    first.kill()
    release.set()
    request_id = server.run(run_id)["waitingOn"]["requestId"]
    with server.client() as client:
        client.submit(request_id, {"route": "fix"})
    wait_for(lambda: decision_waits(server, run_id), 30, "the decision")

    second = make_pi(session_id=SESSION, builtin_tools=True)
    wait_for(lambda: restored(second, 1), 30, "the tools turned off")
    second.run_prompt("hello")

    [during] = offered(provider, STEP_MARK)
    assert during == DEFAULT_ON | TURNED_ON | {"workflow"}
    [after] = offered(provider, "hello")
    assert after == DEFAULT_ON | {"workflow"}
    assert tool_records(second.entries()) == [
        {"action": "activate", "requestId": request_id, "added": ["grep", "find", "ls"]},
        {"action": "restore", "requestId": request_id, "removed": ["grep", "find", "ls"]},
    ]
