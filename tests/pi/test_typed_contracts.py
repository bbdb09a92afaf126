"""Typed contracts in the real Pi: the model reads the schema in the presented step and
checkpoint, and a wrong output or answer comes back to it as the tool's error naming the
wrong field, so it can correct it. Real server, the real `pi` in RPC mode with our
extension, the scripted model."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from pi.support.mock_provider import (
    ChatRequest,
    MockProvider,
    last_is_tool_result,
    last_tool_result_contains,
    request_id_in,
    text,
    tool_call,
    user_text_contains,
)
from pi.support.pi_rpc import MakePi
from pi.support.records import result_text, tool_results

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(180)

SESSION = "typed-session"
STEP_MARK = "--- Workflow step ---"
CHECKPOINT_MARK = "--- Workflow checkpoint ---"
TERMINAL_MARK = "--- Workflow run finished ---"
RUN_ID = re.compile(r"\brun_[0-9a-z]+")
COLOR = {
    "type": "object",
    "properties": {"color": {"enum": ["red", "blue"]}},
    "required": ["color"],
}

TYPED = f"""
from pydantic import BaseModel

from pi_workflows import Workflow, agent, checkpoint, compute, edge


class Count(BaseModel):
    n: int


workflow = Workflow(
    "typed",
    start="count",
    nodes={{
        "count": agent("Count the files", output=Count),
        "pick": checkpoint("Which color?", answer={COLOR!r}),
        "done": compute(lambda ctx: {{"count": ctx.outputs["count"],
                                      "color": ctx.outputs["pick"]}}),
    }},
    edges=[edge("count", "pick"), edge("pick", "done")],
)
"""


def submit(output: Any) -> Any:
    """Submit `output` for the step's request (its id is in the step text)."""

    def arguments(request: ChatRequest) -> dict[str, Any]:
        step = "\n".join(request.user_texts())
        return {"action": "submit", "requestId": request_id_in(step), "output": output}

    return tool_call("workflow", arguments)


def answer(value: Any) -> Any:
    """Answer the checkpoint presented last with `value`."""

    def arguments(request: ChatRequest) -> dict[str, Any]:
        shown = request.user_texts()
        checkpoint = next(t for t in reversed(shown) if CHECKPOINT_MARK in t)
        run = RUN_ID.search(checkpoint)
        assert run
        return {
            "action": "answer",
            "runId": run.group(0),
            "requestId": request_id_in(checkpoint),
            "value": value,
        }

    return tool_call("workflow", arguments)


def test_the_model_sees_the_schemas_and_corrects_what_they_refuse(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The step text ends with the generated expected output and the model's JSON Schema,
    the checkpoint text with its expected answer; each wrong value is refused with its path
    and the corrected one continues the run."""
    server.write_workflow("typed", TYPED)
    run_id = server.start_run("typed", origin_session=SESSION)
    provider.on(last_tool_result_contains("the step's schema"), submit({"n": 2}))
    provider.on(last_tool_result_contains("the checkpoint's schema"), answer({"color": "red"}))
    provider.on(user_text_contains(STEP_MARK), submit({"n": "two"}))
    provider.on(user_text_contains(CHECKPOINT_MARK), answer({"color": "green"}))
    provider.on(user_text_contains(TERMINAL_MARK), text("The run finished."))
    provider.on(last_is_tool_result, text("Done."))
    pi = make_pi(session_id=SESSION)

    done = server.wait_status(run_id, {"completed", "failed"})
    pi.wait_for(lambda r: r.get("type") == "agent_settled")

    assert done["output"] == {"count": {"n": 2}, "color": {"color": "red"}}
    [step] = [r.last_user_text() for r in provider.requests() if user_text_contains(STEP_MARK)(r)]
    expected = step.split("Expected output:\n", 1)[1]
    assert expected.startswith('A JSON object "Count" with these fields:\n- n (integer, required)')
    assert '"required":["n"]' in expected.splitlines()[-1]
    [pick] = [
        r.last_user_text() for r in provider.requests() if user_text_contains(CHECKPOINT_MARK)(r)
    ]
    assert "Question: Which color?" in pick
    assert '- color (one of "red", "blue", required)' in pick
    schema_line = "It must match this JSON Schema: " + json.dumps(COLOR, separators=(",", ":"))
    assert "Expected answer:\nA JSON object with these fields:\n" in pick
    assert f"{schema_line}\nHow to answer: " in pick
    wait_for(
        lambda: len([r for r in tool_results(pi.records) if r["isError"]]) >= 2, 30,
        "both refusals' tool results",
    )  # fmt: skip
    refusals = [result_text(r) for r in tool_results(pi.records) if r["isError"]]
    assert refusals == [
        "the output does not match the step's schema: output.n: Input should be a valid integer,"
        " unable to parse string as an integer (got 'two'); correct it and submit again",
        "the answer does not match the checkpoint's schema: answer.color: 'green' is not one of"
        " ['red', 'blue']; correct it and submit again",
    ]
