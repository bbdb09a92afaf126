"""A checkpoint for the person (`checkpoint(for_person=True)`) in the real Pi: a card and a
text dialog for the person, never a model turn.

Every test runs a real pi-workflows server, the real Pi in RPC mode with only our extension
loaded, and the scripted model; Pi's dialogs are `extension_ui_request` lines the test
answers (`PiProcess.answer_dialog`). They check that the question opens a dialog by itself
when it becomes the session's active request, that what the person types is the answer
(wrapped into the answer schema's one string field), that the workflow's rejection is shown
in the dialog asked again, that a dismissed dialog leaves the run waiting and
`/workflow answer RUN` asks again, and that the model can answer it neither with the tool's
`answer` nor with `submit`. The pure rules of `questions.ts` are checked under the pinned
Node as well.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pi.support.mock_provider import (
    MockProvider,
    last_is_tool_result,
    text,
    tool_call,
    user_text_contains,
)
from pi.support.pi_rpc import MakePi, PiProcess, Record, evaluate_extension
from pi.support.records import result_text, tool_results, workflow_messages

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(120)

SESSION = "questions-session"
QUESTION_ENTRY = "pi-workflows-question"
CHANGE_SCHEMA = {
    "type": "object",
    "properties": {"change": {"type": "string", "minLength": 1}},
    "required": ["change"],
    "additionalProperties": False,
}

ASK = f"""
from pi_workflows import Rejected, Workflow, checkpoint, compute, edge


def check(answer, ctx):
    if "please" not in answer["change"]:
        raise Rejected("ask nicely: say please")


workflow = Workflow(
    "ask",
    start="ask",
    nodes={{
        "ask": checkpoint({{"question": "What should change in the plan?", "plan": "add 2 and 3"}},
                          answer={CHANGE_SCHEMA!r}, validate=check, for_person=True),
        "done": compute(lambda ctx: ctx.outputs["ask"]),
    }},
    edges=[edge("ask", "done")],
)
"""


def inputs(pi: PiProcess, since: int = 0) -> list[Record]:
    """The text dialogs Pi was asked to show."""
    return pi.ui_requests("input", since)


def question_cards(pi: PiProcess) -> list[Record]:
    """The question cards in Pi's session."""
    return [
        e
        for e in pi.entries()
        if e.get("type") == "custom" and e.get("customType") == QUESTION_ENTRY
    ]


def typed(*answers: str | None) -> Any:
    """A dialog answerer that types `answers` into the text dialogs in turn (None dismisses)."""
    queue = list(answers)

    def answer(request: Record) -> Record | None:
        if request.get("method") != "input" or not queue:
            return None
        value = queue.pop(0)
        return None if value is None else {"value": value}

    return answer


def run_questions_ts(expression: str) -> Any:
    """Evaluate `expression` over `questions.ts`'s pure exports (as `q`); its JSON value."""
    return evaluate_extension("questions.ts", "q", expression)


# --- the pure rules --------------------------------------------------------------------------


def test_typed_text_becomes_the_answer_its_schema_asks_for() -> None:
    """A string schema takes the text; an object whose one required field is a string takes
    `{field: text}`; anything else (or no schema) reads the text as JSON, and text that is not
    JSON is sent as a string for the server to judge."""
    cases = {
        "string": [{"type": "string"}, "  yes please "],
        "field": [CHANGE_SCHEMA, "add a comment"],
        "onlyField": [{"type": "object", "properties": {"note": {"type": "string"}}}, "hi"],
        "number": [{"type": "object", "properties": {"n": {"type": "integer"}}}, '{"n": 2}'],
        "untypedJson": [None, "[1, 2]"],
        "untypedText": [None, "just words"],
        "twoRequired": [
            {
                "type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                "required": ["a", "b"],
            },
            "not json",
        ],
    }
    found = run_questions_ts(
        "Object.fromEntries(Object.entries("
        + json.dumps(cases)
        + ").map(([k, [s, t]]) => [k, q.answerFromText(t, q.answerShape(s))]))"
    )

    assert found == {
        "string": "yes please",
        "field": {"change": "add a comment"},
        "onlyField": {"note": "hi"},
        "number": {"n": 2},
        "untypedJson": [1, 2],
        "untypedText": "just words",
        "twoRequired": "not json",
    }


# --- with the real Pi ------------------------------------------------------------------------


def test_a_question_for_the_person_is_a_dialog_and_never_a_model_turn(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The question becomes a card and opens a text dialog by itself. What the person types
    is the answer (`{"change": text}`); the workflow's rejection comes back in the dialog,
    asked again, and the next answer completes the run. The model never sees the question:
    its one turn is the run's result."""
    server.write_workflow("ask", ASK)
    run_id = server.start_run("ask", origin_session=SESSION)
    pi = make_pi(session_id=SESSION)
    pi.answer_dialog = typed("add a comment", "add a comment, please")

    done = server.wait_status(run_id, {"completed", "failed"})
    note = pi.wait_notify(lambda r: "Answered" in r.get("message", ""))
    wait_for(provider.requests, 30, "the turn that presents the run's result")

    assert done["status"] == "completed", done
    assert done["output"] == {"change": "add a comment, please"}
    first, second = inputs(pi)
    assert f"Workflow run {run_id} asks you: What should change in the plan?" in first["title"]
    assert "Not accepted" not in first["title"]
    assert "Not accepted: ask nicely: say please; answer again." in second["title"]
    assert note["notifyType"] == "info"
    assert f"of run {run_id}" in note["message"]
    [card] = question_cards(pi)
    assert "--- Workflow question for the person ---" in card["data"]["text"]
    assert f"/workflow answer {run_id}" in card["data"]["text"]
    assert workflow_messages(pi.entries(), "step") == []
    # The model's only turn is the run's result, after the answer: it never saw the question.
    assert [r.last_user_text().splitlines()[0] for r in provider.requests()] == [
        "--- Workflow run finished ---"
    ]
    assert not any("What should change" in json.dumps(r.messages) for r in provider.requests())
    [(kind, status)] = server.query(
        "SELECT kind, status FROM workflow_messages WHERE run_id = ? AND request_id IS NOT NULL",
        run_id,
    )
    assert (kind, status) == ("question", "sent")
    assert server.diagnose() == []


def test_the_model_cannot_answer_a_question_for_the_person_and_the_person_asks_again(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The person dismisses the dialog: the run still waits, and they are told how to ask
    again. The model, asked to answer it, is refused by the tool's `answer` (nothing sent) and
    by the server for `submit`. `/workflow answer RUN` opens the dialog again, and the answer
    typed there completes the run."""
    server.write_workflow("ask", ASK)
    run_id = server.start_run("ask", origin_session=SESSION)
    waiting = server.wait_status(run_id, "waiting")
    request_id = waiting["waitingOn"]["requestId"]
    assert waiting["waitingOn"]["forPerson"] is True
    provider.on(
        user_text_contains("answer it with the tool"),
        tool_call(
            "workflow",
            {
                "action": "answer",
                "runId": run_id,
                "requestId": request_id,
                "value": {"change": "x"},
            },
        ),
    )
    provider.on(
        user_text_contains("submit it"),
        tool_call(
            "workflow",
            {
                "action": "submit",
                "runId": run_id,
                "requestId": request_id,
                "output": {"change": "x"},
            },
        ),
    )
    provider.on(last_is_tool_result, text("I cannot."))
    pi = make_pi(session_id=SESSION)  # dialogs are dismissed by default

    dismissed = pi.wait_notify(lambda r: "No answer given" in r.get("message", ""))
    answered_by_tool = tool_results(pi.run_prompt("answer it with the tool"))
    submitted = tool_results(pi.run_prompt("submit it"))
    still = server.run(run_id)
    submissions = server.query(
        "SELECT COUNT(*) FROM interactive_submissions WHERE request_id = ?", request_id
    )
    start = pi.mark()
    pi.answer_dialog = typed("please add a comment")
    asked = pi.slash(f"/workflow answer {run_id}")
    done = server.wait_status(run_id, {"completed", "failed"})

    assert dismissed["notifyType"] == "warning"
    assert f"/workflow answer {run_id} asks again" in dismissed["message"]
    [refused] = answered_by_tool
    assert refused["isError"] is True
    assert result_text(refused) == (
        f"Run {run_id} waits on a question for the person, not the model: the workflow tool"
        f" cannot answer it; the person answers it (/workflow answer {run_id})"
    )
    [not_submitted] = submitted
    assert not_submitted["isError"] is True
    assert "is for a person, not the model" in result_text(not_submitted)
    assert (still["status"], still["waitingOn"]["requestId"]) == ("waiting", request_id)
    assert submissions == [(0,)]
    assert len(inputs(pi, start)) == 1
    assert asked["message"] == f"Answered {request_id} of run {run_id}."
    assert done["output"] == {"change": "please add a comment"}
    assert server.diagnose() == []
