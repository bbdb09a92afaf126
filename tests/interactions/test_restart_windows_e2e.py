"""Server restarts while a submission is being validated, through real processes.

A server that dies with a ``validating`` submission leaves it for the next one: that same
submission is validated again and settles once. If the request's deadline passed while no
server ran, the next one rejects the submission, closes the request as timed out and the
same attempt routes through ``$result.outcome`` (or the run ends ``timed_out``).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import psutil
import pytest

from pi_workflows.client import ClientError

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(120)

SESSION = "session-r"

GATED = """
import os, time
from pathlib import Path
from pi_workflows import Workflow, agent, compute, switch

STARTED = Path({started!r})
RELEASE = Path({release!r})

def check(output, ctx):
    with STARTED.open("a") as out:
        out.write(f"{{os.getpid()}}\\n")
    while not RELEASE.exists():
        time.sleep(0.02)  # held until the test releases it (or its runner is killed)

workflow = Workflow(
    "gated",
    start="a",
    nodes={{
        "a": agent(prompt="p", expected_output="{{}}", validate=check, timeout={timeout}),
        {done}
    }},
    edges={edges},
)
"""
DONE = """"done": compute(lambda ctx: {"a": ctx.outputs.get("a"),
                                  "outcome": ctx.results["a"]["outcome"]}),"""
ROUTED = '[switch("a", on="$result.outcome", cases={"ok": "done", "timed_out": "done"})]'


def _gated(
    server: ServerProcess, tmp_path: Path, timeout: float | None = None, routed: bool = True
) -> tuple[Path, Path]:
    started, release = tmp_path / "started.txt", tmp_path / "release"
    server.write_workflow(
        "gated",
        GATED.format(
            started=str(started),
            release=str(release),
            timeout=timeout,
            done=DONE if routed else "",
            edges=ROUTED if routed else "[]",
        ),
    )
    return started, release


def _pids(started: Path) -> list[int]:
    return [int(line) for line in started.read_text().splitlines()] if started.exists() else []


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _submit_and_die(server: ServerProcess, request_id: str, started: Path, window: str) -> None:
    """Submit ``{"n": 1}`` under key ``once`` and leave the server dead in ``window``:
    ``recorded`` (it exits right after the ``validating`` submission commits) or
    ``validating`` (SIGKILL while its validation runner is inside ``validate``)."""
    with server.client(client_id="s", timeout=10) as client:
        if window == "recorded":
            with contextlib.suppress(ClientError):
                client.submit(request_id, {"n": 1}, idempotency_key="once")
            assert server.wait_exit(30) == 137
            return
        held = client.submit(request_id, {"n": 1}, idempotency_key="once", wait=0)
        assert held["status"] == "validating"
    wait_for(lambda: _pids(started), 30, "validate to start")
    server.kill()


def _deadline_of(server: ServerProcess, request_id: str) -> int:
    [(deadline,)] = server.query(
        "SELECT deadline_at FROM interactive_requests WHERE request_id = ?", request_id
    )
    return int(deadline)


def test_a_server_killed_during_validation_validates_that_same_submission_once(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: SIGKILL of the server while its validation runner is inside ``validate``.
    The next server stops the orphan, validates the same submission again, and it settles
    once: one submission, one answered request, one completed attempt; the retry adopts."""
    started, release = _gated(server_process, tmp_path)
    server = server_process.start(PI_WORKFLOWS_SUBMIT_WAIT_SECONDS="0.2")
    run_id = server.start_run("gated")
    request_id = server.wait_status(run_id, "waiting")["waitingOn"]["requestId"]
    attempt_id = server.run(run_id)["attempts"][-1]["attemptId"]
    _submit_and_die(server, request_id, started, "validating")
    [orphan] = _pids(started)
    server.start()
    wait_for(lambda: _gone(orphan), 30, "the orphaned validation runner to be stopped")
    wait_for(lambda: len(_pids(started)) == 2, 30, "the same submission to be validated again")
    assert server.run(run_id)["waitingOn"]["status"] == "validating"
    release.write_text("go")
    with server.client(client_id="s") as client:
        receipt = client.submit(request_id, {"n": 1}, idempotency_key="once")
    assert (receipt.adopted, receipt["status"]) == (True, "accepted")
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"a": {"n": 1}, "outcome": "ok"}
    a = [(x["attemptId"], x["status"]) for x in done["attempts"] if x["nodeId"] == "a"]
    assert a == [(attempt_id, "completed")]
    assert server.query("SELECT status, error FROM interactive_submissions") == [("accepted", None)]
    assert server.query(
        "SELECT COUNT(*) FROM events WHERE run_id = ? AND type = ?",
        run_id,
        "interaction.submitted",
    ) == [(1,)]
    assert server.query("SELECT status FROM interactive_requests") == [("answered",)]
    assert server.diagnose() == []


@pytest.mark.parametrize("window", ["recorded", "validating"])
def test_a_deadline_passing_while_the_server_is_down_rejects_the_validating_submission(
    server_process: ServerProcess, tmp_path: Path, window: str
) -> None:
    """Window: the server dies with a ``validating`` submission (just recorded, or inside
    ``validate``) and the step's deadline passes before the next start. That server rejects
    the submission, closes the request ``timed_out``, and the same attempt routes through
    ``$result.outcome``; validate never runs again."""
    started, release = _gated(server_process, tmp_path, timeout=5.0)
    faults = "command.interaction.submit.after_commit=exit" if window == "recorded" else None
    server = server_process.start(faults=faults, PI_WORKFLOWS_SUBMIT_WAIT_SECONDS="0.2")
    run_id = server.start_run("gated")
    request_id = server.wait_status(run_id, "waiting")["waitingOn"]["requestId"]
    attempt_id = server.run(run_id)["attempts"][-1]["attemptId"]
    _submit_and_die(server, request_id, started, window)
    validations = len(_pids(started))
    deadline = _deadline_of(server, request_id)
    wait_for(lambda: time.time_ns() // 1_000_000 > deadline, 15, "the deadline to pass")
    release.write_text("go")  # an orphan that still ran would now finish: it must not count
    server.start()
    done = server.wait_status(run_id, {"completed", "failed", "timed_out"}, 60)
    assert done["output"] == {"a": None, "outcome": "timed_out"}
    a = [(x["attemptId"], x["status"]) for x in done["attempts"] if x["nodeId"] == "a"]
    assert a == [(attempt_id, "timed_out")]
    [(status, error)] = server.query("SELECT status, error FROM interactive_submissions")
    assert status == "rejected"
    assert "deadline passed" in error
    assert server.query("SELECT status FROM interactive_requests") == [("timed_out",)]
    assert len(_pids(started)) == validations  # never validated again
    assert server.diagnose() == []


def test_a_deadline_passing_while_the_server_is_down_with_no_route_times_the_run_out(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: as above, for a step with no ``$result.outcome`` route and an origin session:
    the run ends ``timed_out``, and the session's reservation is released (no active request,
    nothing open, the step's message withdrawn, the terminal message pending)."""
    started, _release = _gated(server_process, tmp_path, timeout=5.0, routed=False)
    server = server_process.start(faults="command.interaction.submit.after_commit=exit")
    run_id = server.start_run("gated", origin_session=SESSION)
    request_id = server.wait_status(run_id, "waiting")["waitingOn"]["requestId"]
    with server.client() as client:
        assert client.get_session(SESSION)["activeRequest"]["requestId"] == request_id
    _submit_and_die(server, request_id, started, "recorded")
    deadline = _deadline_of(server, request_id)
    wait_for(lambda: time.time_ns() // 1_000_000 > deadline, 15, "the deadline to pass")
    server.start()
    done = server.wait_status(run_id, {"completed", "failed", "timed_out"}, 60)
    assert done["status"] == "timed_out"
    assert [x["status"] for x in done["attempts"]] == ["timed_out"]
    assert _pids(started) == []
    with server.client() as client:
        view = client.get_session(SESSION)
        assert client.list_interactions(SESSION) == []
    assert view["activeRequest"] is None
    assert [(m["kind"], m["body"]["status"]) for m in view["messages"]] == [
        ("terminal", "timed_out")
    ]
    assert [(r["runId"], r["status"]) for r in view["runs"]] == [(run_id, "timed_out")]
    assert server.query(
        "SELECT status FROM workflow_messages WHERE kind = 'step' AND run_id = ?", run_id
    ) == [("cancelled",)]
    assert server.diagnose() == []
