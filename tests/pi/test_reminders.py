"""Reminders with the real Pi: a scripted model that forgets to submit its step.

The step is presented in the origin session; the model answers with prose instead of calling
the `workflow` tool. The server presents the step again as reminder 1 and 2 of 2, each in a
new model turn in the same session; after the third turn without a submission the attempt
fails `missingSubmission` and the workflow routes it. A model that submits after a reminder
completes the step.
"""

from __future__ import annotations

from typing import Any

import pytest

from pi.support.mock_provider import (
    ChatRequest,
    MockProvider,
    last_is_tool_result,
    request_id_in,
    text,
    tool_call,
    user_text_contains,
)
from pi.support.pi_rpc import MakePi
from pi.support.records import content_text, workflow_messages

from support.server import ServerProcess, wait_for

SESSION = "remind-session"
STEP_MARK = "--- Workflow step ---"
REMINDER_MARK = "--- Reminder "
TERMINAL_MARK = "--- Workflow run finished ---"

FLOW = """
from pi_workflows import Workflow, agent, compute, switch

workflow = Workflow(
    "remind",
    start="title",
    nodes={
        "title": agent(prompt="Write a title for the report", expected_output='{"title": "..."}'),
        "done": compute(lambda ctx: {"title": ctx.outputs["title"]["title"]}),
        "missed": compute(lambda ctx: {"missed": ctx.results["title"]["error"]}),
    },
    edges=[switch("title", on="$result.outcome",
                  cases={"ok": "done", "failed": "missed", "timed_out": "missed"})],
)
"""

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _submit(request: ChatRequest) -> dict[str, Any]:
    return {
        "action": "submit",
        "requestId": request_id_in(request.last_user_text()),
        "output": {"title": "Reminded"},
    }


def _finish(provider: MockProvider) -> None:
    provider.on(user_text_contains(TERMINAL_MARK), text("The run finished."), name="terminal")
    provider.on(last_is_tool_result, text("Done."), name="after a tool result")


def test_a_model_that_never_submits_is_reminded_twice_then_the_step_fails(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """Three turns of prose: two reminders arrive as new steps in the same session, then the
    run routes the step's `missingSubmission` failure and finishes."""
    server.write_workflow("remind", FLOW)
    provider.on(user_text_contains(STEP_MARK), text("I will write the title later."))
    _finish(provider)
    run_id = server.start_run("remind", {}, origin_session=SESSION)
    server.wait_status(run_id, "waiting")
    pi = make_pi(session_id=SESSION)

    done = server.wait_status(run_id, {"completed", "failed"}, 60)
    assert done["output"]["missed"].startswith("missingSubmission: the model ended 3 turns")
    entries = pi.entries()
    steps = workflow_messages(entries, "step")
    texts = [content_text(step) for step in steps]
    assert len(steps) == 3, texts
    assert not texts[0].startswith(REMINDER_MARK)
    assert texts[1].startswith("--- Reminder 1 of 2:")
    assert texts[2].startswith("--- Reminder 2 of 2:")
    asked = [r for r in provider.requests() if user_text_contains(STEP_MARK)(r)]
    assert len(asked) == 3  # one model turn per presentation, in the one session
    wait_for(lambda: [r for r in provider.requests() if user_text_contains(TERMINAL_MARK)(r)],
             30, "the terminal result's turn")  # fmt: skip
    assert server.diagnose() == []


def test_a_reminded_model_that_submits_completes_the_step(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The model forgets once, then submits when reminded: the step completes."""
    server.write_workflow("remind", FLOW)
    provider.on(user_text_contains(REMINDER_MARK), tool_call("workflow", _submit))
    provider.on(user_text_contains(STEP_MARK), text("Later."))
    _finish(provider)
    run_id = server.start_run("remind", {}, origin_session=SESSION)
    server.wait_status(run_id, "waiting")
    make_pi(session_id=SESSION)

    done = server.wait_status(run_id, {"completed", "failed"}, 60)
    assert done["output"] == {"title": "Reminded"}
    assert server.query("SELECT reminders FROM interactive_requests") == [(1,)]
    assert server.diagnose() == []
