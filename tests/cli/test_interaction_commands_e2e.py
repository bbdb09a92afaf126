"""`interaction submit|list`, `session show` and `run start --session` through the real CLI.

Each command runs as its own `pi-workflows` process against a real server: a submission is
validated in a runner child, a rejected one exits 1 with the validation message on one
line, keys make a repeated submission harmless, and an origin session is recorded and
shown.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(120)

SESSION = "cli-session-1"

STEP = """
from pi_workflows import Rejected, Workflow, agent, compute, edge

def check(output, ctx):
    if output.get("route") == "twice":
        raise Rejected("route must be fix or skip,\\nnot twice")
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
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server whose project has the `step` workflow (one validated agent step)."""
    process = ServerProcess(tmp_path)
    process.write_workflow("step", STEP)
    process.start()
    yield process
    process.cleanup()


def pw(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `pi-workflows --home HOME ARGS` in a child process, from the project directory."""
    return server.cli(*args)


def ok(server: ServerProcess, *args: str) -> str:
    """Run a command that must succeed; its stdout."""
    result = pw(server, *args)
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a failed command, without its prefix."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pi-workflows: error: ")
    return lines[0].removeprefix("pi-workflows: error: ")


def waiting(server: ServerProcess, *start: str) -> tuple[str, str]:
    """Start `step` through the CLI and wait for its request; (run id, request id)."""
    run_id = ok(server, "run", "start", "step", *start).strip()
    view = server.wait_status(run_id, "waiting")
    return run_id, str(view["waitingOn"]["requestId"])


def submissions(server: ServerProcess) -> list[tuple[Any, ...]]:
    """Every submission: (status, error), oldest first."""
    return server.query(
        "SELECT status, error FROM interactive_submissions ORDER BY submitted_at, rowid"
    )


def test_a_valid_submission_is_answered_and_the_run_goes_on(server: ServerProcess) -> None:
    """`interaction submit RUN --output JSON` waits for validation, prints `answered` and
    exits 0; the run completes with the submitted output."""
    run_id, request_id = waiting(server)
    out = ok(server, "interaction", "submit", run_id, "--output", '{"route": "fix"}')
    assert out.startswith(f"answered {request_id} of run {run_id} ")
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"route": "fix"}
    assert submissions(server) == [("accepted", None)]


def test_a_rejected_submission_exits_1_with_the_validation_message_on_one_line(
    server: ServerProcess,
) -> None:
    """A refused output exits 1 with the exact validation message as the only stderr line
    (a multi-line message too); the request stays open and a corrected one is answered."""
    run_id, request_id = waiting(server)
    refused = pw(server, "interaction", "submit", run_id, "--output", '{"route": "maybe"}')
    assert one_error_line(refused) == "route must be fix or skip"
    assert refused.stdout == ""
    twice = pw(server, "interaction", "submit", run_id, "--output", '{"route": "twice"}')
    assert "route must be fix or skip," in one_error_line(twice)
    assert "not twice" in one_error_line(twice)
    view = server.wait_status(run_id, "waiting")
    assert view["waitingOn"]["requestId"] == request_id
    assert view["waitingOn"]["status"] == "pending"
    as_json = pw(server, "interaction", "submit", run_id, "--output", "{}", "--json")
    assert as_json.returncode == 1
    error = json.loads(as_json.stdout)["error"]
    assert error == {"code": "validationRejected", "message": "route must be fix or skip"}
    ok(server, "interaction", "submit", run_id, "--output", '{"route": "skip"}')
    assert server.wait_status(run_id, {"completed", "failed"})["output"] == {"route": "skip"}
    assert [status for status, _ in submissions(server)] == [
        "rejected",
        "rejected",
        "rejected",
        "accepted",
    ]


def test_an_idempotency_key_adopts_the_same_submission_and_conflicts_on_another(
    server: ServerProcess,
) -> None:
    """`--request-id` names the request; the same `--idempotency-key` and output adopt the
    stored outcome (also after the run went on), another output under it is a conflict."""
    run_id, request_id = waiting(server)
    args = ["interaction", "submit", run_id, "--request-id", request_id]
    first = json.loads(
        ok(server, *args, "--output", '{"route": "fix"}', "--idempotency-key", "k-1", "--json")
    )
    assert first["adopted"] is False
    assert (first["requestId"], first["runId"], first["status"]) == (
        request_id,
        run_id,
        "accepted",
    )
    server.wait_status(run_id, "completed")
    again = json.loads(
        ok(server, *args, "--output", '{"route": "fix"}', "--idempotency-key", "k-1", "--json")
    )
    assert again["adopted"] is True
    assert again["submissionId"] == first["submissionId"]
    human = ok(server, *args, "--output", '{"route": "fix"}', "--idempotency-key", "k-1")
    assert "(already answered by this command earlier)" in human
    changed = pw(server, *args, "--output", '{"route": "skip"}', "--idempotency-key", "k-1")
    assert "k-1" in one_error_line(changed)
    closed = pw(server, *args, "--output", '{"route": "skip"}', "--idempotency-key", "k-2")
    assert request_id in one_error_line(closed)
    unknown = pw(server, "interaction", "submit", run_id, "--request-id", "req_nope",
                 "--output", "{}")  # fmt: skip
    assert "req_nope" in one_error_line(unknown)
    assert submissions(server) == [("accepted", None)]


def test_interaction_list_shows_every_open_request_or_one_sessions(
    server: ServerProcess,
) -> None:
    """`interaction list` lists all open requests oldest first; `--session ID` only that
    session's; `--json` prints them as `{interactions: [...]}`."""
    assert ok(server, "interaction", "list").strip() == "no open requests"
    solo_run, solo_request = waiting(server)
    session_run, session_request = waiting(server, "--session", SESSION)
    lines = ok(server, "interaction", "list").splitlines()
    heads = [line for line in lines if not line.startswith(" ")]  # what each asks is indented
    assert [line.split()[0] for line in heads] == [solo_request, session_request]
    assert f"run {session_run}  step/classify  agent  pending" in heads[1]
    only = ok(server, "interaction", "list", "--session", SESSION).splitlines()
    assert [line.split()[0] for line in only if not line.startswith(" ")] == [session_request]
    listed = json.loads(ok(server, "interaction", "list", "--session", SESSION, "--json"))
    [item] = listed["interactions"]
    assert item["requestId"] == session_request
    assert item["runId"] == session_run
    assert item["originSession"] == SESSION
    assert (item["workflow"], item["nodeId"], item["kind"]) == ("step", "classify", "agent")
    assert item["runStatus"] == "waiting"
    every = json.loads(ok(server, "interaction", "list", "--json"))["interactions"]
    assert [i["runId"] for i in every] == [solo_run, session_run]
    assert json.loads(ok(server, "interaction", "list", "--session", "other", "--json")) == {
        "interactions": []
    }


def test_session_show_prints_the_sessions_view(server: ServerProcess) -> None:
    """`session show ID` names the active request, the messages to add and the runs;
    `--json` prints the SessionView."""
    run_id, request_id = waiting(server, "--session", SESSION)
    view = json.loads(ok(server, "session", "show", SESSION, "--json"))
    assert view["sessionId"] == SESSION
    assert view["coordinatorEpoch"] is None  # nobody attached yet
    active = view["activeRequest"]
    assert (active["requestId"], active["runId"], active["kind"]) == (request_id, run_id, "agent")
    assert [m["kind"] for m in view["messages"]] == ["step"]
    assert request_id in view["messages"][0]["text"]
    assert [(r["runId"], r["status"]) for r in view["runs"]] == [(run_id, "waiting")]
    with server.client() as client:
        client.attach_session(SESSION)
    human = ok(server, "session", "show", SESSION).splitlines()
    assert human[0] == f"session {SESSION} (coordinator epoch 1)"
    assert human[1] == (
        f"active request {request_id}: agent of run {run_id} (pending; message pending)"
    )
    assert human[2].startswith(
        f"delivery: presenting: waiting for Pi session {SESSION} to present it (since "
    )
    assert human[3] == "1 message(s) to add"
    assert human[4].split()[1] == "step"
    assert (
        view["activeRequest"].get("delivery") is None
        or view["activeRequest"]["delivery"]["state"] == "presenting"
    )
    assert human[-1] == f"run {run_id}  step  waiting"
    unknown = pw(server, "session", "show", "nobody")
    assert unknown.returncode != 0
    assert "no session nobody" in unknown.stderr  # never attached, no run names it


def test_run_start_with_a_session_records_it_as_the_origin(server: ServerProcess) -> None:
    """`run start NAME --session ID` records the origin session: `run show --json` has it,
    and the run is the session's; a run started without one has none."""
    with_session, _ = waiting(server, "--session", SESSION)
    without, _ = waiting(server)
    shown = json.loads(ok(server, "run", "show", with_session, "--json"))
    assert shown["originSession"] == SESSION
    assert shown["executionMode"] == "attached"
    assert shown["origin"] == "client:cli"
    assert json.loads(ok(server, "run", "show", without, "--json"))["originSession"] is None
    with server.client() as client:
        wait_for(
            lambda: [r["runId"] for r in client.get_session(SESSION)["runs"]] == [with_session],
            30,
            "the session's runs",
        )
