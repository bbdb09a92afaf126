"""Reminders: a model turn that ends without submitting its agent step, through the server.

The Python client plays the Pi extension: it presents the session's step, reports the turn
it ran for it and reports the turn ended ``completed`` with nothing submitted. The first two
such turns get the step presented again as a reminder; the third fails the attempt
``missingSubmission``, which the workflow routes through ``$result.outcome``. A checkpoint
gets no reminder (a person may answer it), and an aborted turn pauses instead.
"""

from __future__ import annotations

from typing import Any

import pytest

from pi_workflows.client import Client, RejectedError

from support.server import ServerProcess, wait_for

SESSION = "session-remind"

FLOW = """
from pi_workflows import Rejected, Workflow, agent, checkpoint, compute, switch


def check(output, ctx):
    if output.get("title") != "ok":
        raise Rejected("the title must be ok")


workflow = Workflow(
    "remind",
    start="step",
    nodes={
        "step": agent(prompt="Write a title", expected_output='{"title": "ok"}',
                      validate=check),
        "done": compute(lambda ctx: {"title": ctx.outputs["step"]["title"]}),
        "missed": compute(lambda ctx: {"missed": ctx.results["step"]["error"]}),
    },
    edges=[switch("step", on="$result.outcome",
                  cases={"ok": "done", "failed": "missed", "timed_out": "missed"})],
)
"""

ASK = """
from pi_workflows import Workflow, checkpoint

workflow = Workflow("ask", start="ask", nodes={"ask": checkpoint({"question": "Name?"})})
"""


def _turn(client: Client, epoch: int, stop: str = "completed") -> dict[str, Any]:
    """Present the active step (report it in the branch), run a turn for it, end the turn."""
    active = wait_for(lambda: client.get_session(SESSION)["activeRequest"], 30, "the step")
    message = active["workflowMessageId"]
    client.report_messages(SESSION, epoch, {message: f"entry-{message}"})
    client.report_turn(SESSION, epoch, "started", workflow_message_id=message)
    return dict(client.report_turn(SESSION, epoch, "ended", stop_reason=stop))


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_two_reminders_then_the_step_fails_missing_submission(server: ServerProcess) -> None:
    """Turns that end without a submission (one with only a rejected one) get the step
    presented again as reminder 1 and 2 of 2; the third fails the attempt, and the workflow
    routes the failure with the ``missingSubmission`` error."""
    server.write_workflow("remind", FLOW)
    run_id = server.start_run("remind", {}, origin_session=SESSION)
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        epoch = client.attach_session(SESSION)
        assert _turn(client, epoch)["reminder"] == "reminded"
        view = client.get_session(SESSION)
        step = view["activeRequest"]
        assert step["messageStatus"] == "pending"
        [message] = [m for m in view["messages"] if m["kind"] == "step"]
        assert message["text"].startswith("--- Reminder 1 of 2: your last turn ended")
        assert step["requestId"] in message["text"]
        with pytest.raises(RejectedError) as refused:  # a wrong submission is no submission
            client.submit(step["requestId"], {"title": "no"})
        assert refused.value.code == "validationRejected"
        assert _turn(client, epoch)["reminder"] == "reminded"
        second = [m for m in client.get_session(SESSION)["messages"] if m["kind"] == "step"]
        assert second[0]["text"].startswith("--- Reminder 2 of 2:")
        assert "this is the last reminder" in second[0]["text"]
        assert _turn(client, epoch)["reminder"] == "failed"
    done = server.wait_status(run_id, {"completed", "failed", "paused"})
    assert done["status"] == "completed", done
    assert done["output"]["missed"].startswith("missingSubmission: the model ended 3 turns")
    [(status, reminders)] = server.query("SELECT status, reminders FROM interactive_requests")
    assert (status, reminders) == ("failed", 2)
    events = [
        row[0]
        for row in server.query(
            "SELECT type FROM events WHERE run_id = ? AND type IN"
            " ('step.reminded', 'interaction.missed') ORDER BY revision",
            run_id,
        )
    ]
    assert events == ["step.reminded", "step.reminded", "interaction.missed"]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_submission_after_a_reminder_completes_the_step(server: ServerProcess) -> None:
    """A reminded model that then submits a valid output completes the step normally."""
    server.write_workflow("remind", FLOW)
    run_id = server.start_run("remind", {}, origin_session=SESSION)
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        epoch = client.attach_session(SESSION)
        assert _turn(client, epoch)["reminder"] == "reminded"
        step = client.get_session(SESSION)["activeRequest"]
        assert client.submit(step["requestId"], {"title": "ok"})["status"] == "accepted"
    done = server.wait_status(run_id, {"completed", "failed", "paused"})
    assert done["output"] == {"title": "ok"}
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_no_reminders_for_a_checkpoint_and_an_aborted_turn_pauses(
    server: ServerProcess,
) -> None:
    """A checkpoint's turn ending without an answer is normal (a person may answer it); an
    agent step's turn the person aborts pauses the run, and is not counted as forgotten."""
    server.write_workflow("ask", ASK)
    server.write_workflow("remind", FLOW)
    asked = server.start_run("ask", {}, origin_session=SESSION)
    server.wait_status(asked, "waiting")
    with server.client() as client:
        epoch = client.attach_session(SESSION)
        assert _turn(client, epoch)["reminder"] is None
        client.cancel(asked)
        run_id = server.start_run("remind", {}, origin_session=SESSION)
        server.wait_status(run_id, "waiting")
        ended = _turn(client, epoch, stop="aborted")
    assert (ended["paused"], ended["reminder"]) == (run_id, None)
    assert server.query("SELECT reminders FROM interactive_requests WHERE run_id = ?", run_id) == [
        (0,)
    ]
    assert server.run(run_id)["parkReason"] == "turnAborted"
