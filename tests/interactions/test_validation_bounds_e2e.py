"""The bounds on a submission's validation, through the real server.

The submitter's answer is held until the outcome is durable, but only for
``PI_WORKFLOWS_SUBMIT_WAIT_SECONDS``: past it the answer is ``validating`` and asking again
with the same key and payload adopts the final outcome. A validation runner that runs past
``PI_WORKFLOWS_VALIDATE_SECONDS`` is stopped and only its submission is rejected.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pi_workflows.client import RejectedError

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(120)

GATED = """
import os, time
from pathlib import Path
from pi_workflows import Rejected, Workflow, agent

STARTED = Path({started!r})
RELEASE = Path({release!r})

def check(output, ctx):
    with STARTED.open("a") as out:
        out.write(f"{{os.getpid()}}\\n")
    if output.get("wait"):
        while not RELEASE.exists():
            time.sleep(0.02)  # held until the test releases it (or the server kills it)
    if output.get("ok") is not True:
        raise Rejected("ok must be true")

workflow = Workflow("gated", start="a", nodes={{"a": agent(
    prompt="p", expected_output='{{"ok": true}}', validate=check)}}, edges=[])
"""


def _gated(server: ServerProcess, tmp_path: Path) -> tuple[Path, Path]:
    started, release = tmp_path / "started.txt", tmp_path / "release"
    server.write_workflow("gated", GATED.format(started=str(started), release=str(release)))
    return started, release


def _calls(started: Path) -> list[int]:
    return [int(line) for line in started.read_text().splitlines()] if started.exists() else []


def test_a_validation_longer_than_the_hold_answers_validating_and_a_retry_adopts_the_outcome(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Past the server's hold the answer is ``accepted`` with status ``validating``; the same
    command again (same key, same payload) is answered ``validating`` while it runs and the
    final ``accepted`` once it committed, for the one submission."""
    started, release = _gated(server_process, tmp_path)
    server = server_process.start(PI_WORKFLOWS_SUBMIT_WAIT_SECONDS="0.5")
    run_id = server.start_run("gated")
    request_id = server.wait_status(run_id, "waiting")["waitingOn"]["requestId"]
    payload = {"requestId": request_id, "output": {"ok": True, "wait": True}}
    with server.client(client_id="session-1") as client:
        held = client.call("interaction.submit", payload, idempotency_key="k-1")
        assert held.outcome == "accepted"
        assert held["status"] == "validating"
        wait_for(lambda: _calls(started), 30, "validate to start")
        again = client.call("interaction.submit", payload, idempotency_key="k-1")
        assert (again.outcome, again["status"]) == ("adopted", "validating")
        assert again["submissionId"] == held["submissionId"]
        assert server.run(run_id)["waitingOn"]["status"] == "validating"
        release.write_text("go")

        def final() -> str | None:
            answer = client.call("interaction.submit", payload, idempotency_key="k-1")
            return None if answer["status"] == "validating" else answer.outcome + answer["status"]

        assert wait_for(final, 30, "the final outcome") == "adoptedaccepted"
    assert server.wait_status(run_id, {"completed", "failed"})["output"] == {
        "ok": True,
        "wait": True,
    }
    assert len(_calls(started)) == 1
    assert server.query("SELECT status FROM interactive_submissions") == [("accepted",)]
    assert server.diagnose() == []


def test_the_client_polls_a_held_submission_until_its_outcome(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """``Client.submit`` keeps asking with its key while the answer is ``validating``, so a
    rejection that commits after the server's hold still reaches the caller as one."""
    started, release = _gated(server_process, tmp_path)
    server = server_process.start(PI_WORKFLOWS_SUBMIT_WAIT_SECONDS="0.2")
    run_id = server.start_run("gated")
    request_id = server.wait_status(run_id, "waiting")["waitingOn"]["requestId"]
    output = {"ok": False, "wait": True}
    outcome: dict[str, BaseException] = {}

    def submit() -> None:
        with server.client(client_id="session-1") as client:
            try:
                client.submit(request_id, output, idempotency_key="k")
            except BaseException as exc:  # handed to the test thread
                outcome["error"] = exc

    thread = threading.Thread(target=submit)
    thread.start()
    wait_for(lambda: _calls(started), 30, "validate to start")
    # The same command from another connection is held as long and answered after the
    # first one's hold ran out: by then the submitter was told ``validating``.
    with server.client(client_id="session-1") as other:
        payload = {"requestId": request_id, "output": output}
        assert other.call("interaction.submit", payload, idempotency_key="k")["status"] == (
            "validating"
        )
    release.write_text("go")
    thread.join(60)
    assert not thread.is_alive()
    rejected = outcome["error"]
    assert isinstance(rejected, RejectedError)
    assert rejected.code == "validationRejected"
    assert rejected.message == "ok must be true"
    assert len(_calls(started)) == 1
    assert server.wait_status(run_id, "waiting")["waitingOn"]["status"] == "pending"


def test_a_validation_past_its_time_limit_rejects_only_that_submission(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: validate runs past ``PI_WORKFLOWS_VALIDATE_SECONDS``; the server stops its
    runner, that submission is rejected ``validation did not finish: ...``, the request stays
    open, and a corrected submission of the same request is accepted."""
    started, _release = _gated(server_process, tmp_path)  # never released
    server = server_process.start(PI_WORKFLOWS_VALIDATE_SECONDS="1")
    run_id = server.start_run("gated")
    request_id = server.wait_status(run_id, "waiting")["waitingOn"]["requestId"]
    with server.client() as client:
        with pytest.raises(RejectedError) as stopped:
            client.submit(request_id, {"ok": True, "wait": True})
        assert stopped.value.code == "validationRejected"
        assert stopped.value.message.startswith("validation did not finish: ")
        assert "longer than 1 s" in stopped.value.message
        view = server.wait_status(run_id, "waiting")
        assert (view["waitingOn"]["requestId"], view["waitingOn"]["status"]) == (
            request_id,
            "pending",
        )
        assert client.submit(request_id, {"ok": True})["status"] == "accepted"
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"ok": True}
    assert [a["status"] for a in done["attempts"]] == ["completed"]
    statuses = server.query("SELECT status FROM interactive_submissions ORDER BY rowid")
    assert statuses == [("rejected",), ("accepted",)]
    assert len(_calls(started)) == 2
    assert server.diagnose() == []


@pytest.mark.parametrize("ending", ["cancel", "deadline"])
def test_a_held_submission_hears_its_request_closed_at_once_not_at_the_end_of_its_hold(
    server_process: ServerProcess, tmp_path: Path, ending: str
) -> None:
    """A submission held for its validation is answered when its run is cancelled (a command
    naming the run) or its step's deadline passes (the sweep stops the validation, whose
    limit is the step's deadline, and closes the request): the held answer looks again on
    its run's changes (and at least every second), so it is rejected when the request
    closes and never waits out its 60 s hold."""
    started, release = tmp_path / "started.txt", tmp_path / "release"
    source = GATED.format(started=str(started), release=str(release))
    if ending == "deadline":
        source = source.replace("validate=check)", "validate=check, timeout=8)")
    server_process.write_workflow("gated", source)
    server = server_process.start(PI_WORKFLOWS_SUBMIT_WAIT_SECONDS="60")
    run_id = server.start_run("gated")
    request_id = server.wait_status(run_id, "waiting")["waitingOn"]["requestId"]
    outcome: dict[str, BaseException] = {}
    answered = threading.Event()

    def submit() -> None:
        with server.client(client_id="session-1", timeout=90) as client:
            try:
                client.call(
                    "interaction.submit",
                    {"requestId": request_id, "output": {"ok": True, "wait": True}},
                    idempotency_key="k",
                )
            except BaseException as exc:  # handed to the test thread
                outcome["error"] = exc
            answered.set()

    thread = threading.Thread(target=submit)
    thread.start()
    wait_for(lambda: _calls(started), 30, "validate to start")
    if ending == "cancel":
        with server.client() as client:
            client.cancel(run_id)
    # Well inside the hold: the answer came from the change, not from the hold running out.
    assert answered.wait(25), "the held submission was not answered when its request closed"
    thread.join(10)
    rejected = outcome["error"]
    assert isinstance(rejected, RejectedError)
    assert rejected.code == "requestClosed"  # not a validation's refusal: do not retry
    [(status, error)] = server.query("SELECT status, error FROM interactive_submissions")
    assert status == "rejected"
    assert error == rejected.message
    # At the deadline the validation runner's own limit (the step's deadline) may reject
    # the submission a commit before the sweep closes the request: wait for that commit.
    expected = [({"cancel": "cancelled", "deadline": "timed_out"}[ending],)]
    wait_for(
        lambda: server.query("SELECT status FROM interactive_requests") == expected,
        30,
        "the request to be closed",
    )
    release.write_text("go")
    assert server.diagnose() == []


DEADLINED = GATED.replace("validate=check)}}", "validate=check, timeout=seconds(3))}}").replace(
    "import Rejected, Workflow, agent", "import Rejected, Workflow, agent, seconds"
)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["pause", "deadline"])
def test_a_held_submission_whose_request_closes_hears_request_closed(
    server_process: ServerProcess, tmp_path: Path, how: str
) -> None:
    """Window: a submission is being validated when its run is paused or its step's deadline
    passes: its held answer is ``requestClosed`` (do not submit again now), never
    ``validationRejected`` (which would ask the model for a corrected submission)."""
    started, release = tmp_path / "started.txt", tmp_path / "release"
    source = DEADLINED if how == "deadline" else GATED
    server_process.write_workflow(
        "gated", source.format(started=str(started), release=str(release))
    )
    server = server_process.start(PI_WORKFLOWS_DRAIN_SECONDS="0.5")
    run_id = server.start_run("gated")
    request_id = server.wait_status(run_id, "waiting")["waitingOn"]["requestId"]
    answers: dict[str, object] = {}

    def submit() -> None:
        with server.client(timeout=60) as client:
            try:
                answers["receipt"] = client.submit(request_id, {"ok": True, "wait": True})
            except RejectedError as exc:
                answers["refused"] = exc

    submitter = threading.Thread(target=submit)
    submitter.start()
    wait_for(lambda: _calls(started), 30, "validation to start")
    if how == "pause":
        with server.client() as client:
            client.pause(run_id)
    submitter.join(60)
    refused = answers.get("refused")
    assert isinstance(refused, RejectedError), answers
    assert refused.code == "requestClosed", refused
    expected = "paused" if how == "pause" else "timed_out"
    [(status,)] = server.query(
        "SELECT CASE WHEN ? = 'paused' THEN r.status ELSE q.status END FROM runs r"
        " JOIN interactive_requests q USING (run_id) WHERE r.run_id = ?",
        expected,
        run_id,
    )
    assert status == expected
    release.write_text("go")
    assert server.diagnose() == []
