"""A server that stops while it holds a submitter's answer ends that answer cleanly.

The held answer hears ``unavailable`` (code ``serverStopping``) before the connections
close, the server logs no error and no traceback, and the client sends the same command
again to the next server it starts, which adopts the stored receipt and answers with the
submission's outcome once that server's runner has validated it.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.client import Client
from pi_workflows.client import autostart as client_autostart
from pi_workflows.server import main as server_main

from support.server import ServerProcess, wait_for

GATED = """
import time
from pathlib import Path
from pi_workflows import Workflow, agent

STARTED = Path({started!r})
RELEASE = Path({release!r})


def check(output, ctx):
    with STARTED.open("a") as out:
        out.write("validating\\n")
    while not RELEASE.exists():
        time.sleep(0.02)


workflow = Workflow("gated", start="a", nodes={{"a": agent(
    prompt="p", expected_output='{{"ok": true}}', validate=check)}}, edges=[])
"""


def test_the_client_knows_the_servers_lock_refusal_status() -> None:
    """The client's auto-start recognises a server refused for the lock by its exit status."""
    assert client_autostart._ALREADY_RUNNING_EXIT == server_main.EXIT_ALREADY_RUNNING


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_held_submission_survives_a_server_stop_and_is_adopted_by_the_next_server(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: a submission is held for its validation when the server stops: the answer
    ends ``serverStopping`` without an error in the log; the client retries against a server
    it starts itself, which validates the same submission once and answers ``accepted``."""
    started, release = tmp_path / "started.txt", tmp_path / "release"
    server_process.write_workflow("gated", GATED.format(started=str(started), release=str(release)))
    server = server_process.start(
        PI_WORKFLOWS_SUBMIT_WAIT_SECONDS="60", PI_WORKFLOWS_DRAIN_SECONDS="0.5"
    )
    run_id = server.start_run("gated")
    request_id = server.wait_status(run_id, "waiting")["waitingOn"]["requestId"]
    answer: dict[str, Any] = {}

    def submit() -> None:
        with Client(server.home, autostart=True, timeout=60, start_timeout=60) as client:
            try:
                answer["receipt"] = client.call(
                    "interaction.submit",
                    {"requestId": request_id, "output": {"ok": True}},
                    idempotency_key="held-1",
                )
            except Exception as exc:  # handed to the test thread
                answer["error"] = exc

    submitter = threading.Thread(target=submit)
    submitter.start()
    try:
        wait_for(started.exists, 30, "the validation to start")
        server.stop()
        log = server.log.read_text(errors="replace")
        assert " ERROR " not in log, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
        wait_for(lambda: len(started.read_text().splitlines()) >= 2, 60,
                 "the next server to validate the submission again")  # fmt: skip
        release.write_text("go")
        submitter.join(90)
        assert not submitter.is_alive()
        receipt = answer.get("receipt")
        assert receipt is not None, answer.get("error")
        assert receipt.adopted
        assert receipt["status"] == "accepted"
        with Client(server.home, autostart=False) as client:
            done = wait_for(
                lambda: client.get_run(run_id)["status"] == "completed", 60, "the run to finish"
            )
            assert done
            assert client.diagnose() == []
        assert server.query("SELECT status FROM interactive_submissions") == [("accepted",)]
    finally:
        release.write_text("go")
        submitter.join(30)
        with Client(server.home, autostart=False) as client, contextlib.suppress(Exception):
            client.stop(wait=True, timeout=30)  # the server the client started, if any


SLOW = """
import time
from pathlib import Path
from pi_workflows import Workflow, checkpoint, compute, edge

STARTED = Path({started!r})
RELEASE = Path({release!r})


def slow(ctx):
    STARTED.write_text("1")
    while not RELEASE.exists():
        time.sleep(0.02)
    return {{"done": True}}


workflow = Workflow(
    "slow",
    start="slow",
    nodes={{"slow": compute(slow), "ask": checkpoint({{"question": "More?"}})}},
    edges=[edge("slow", "ask")],
)
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_command_sent_while_the_server_drains_is_answered_by_the_next_server(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: a client cancels a run while the server drains it for a stop: the draining
    server refuses it ``serverStopping``, the client (with auto-start) waits for that server
    to exit, starts the next one and sends the same command there, which cancels the run."""
    started, release = tmp_path / "started", tmp_path / "release"
    server_process.write_workflow("slow", SLOW.format(started=str(started), release=str(release)))
    server = server_process.start(PI_WORKFLOWS_DRAIN_SECONDS="60")
    run_id = server.start_run("slow")
    wait_for(started.exists, 30, "the node to start")
    assert server.process is not None
    server.process.terminate()
    wait_for(lambda: "waiting up to" in server.log.read_text(errors="replace"), 30, "the drain")
    answer: dict[str, Any] = {}

    def cancel() -> None:
        with Client(server.home, autostart=True, timeout=60, start_timeout=60) as client:
            try:
                answer["receipt"] = client.cancel(run_id, "not needed", idempotency_key="c-1")
            except Exception as exc:  # handed to the test thread
                answer["error"] = exc

    canceller = threading.Thread(target=cancel)
    canceller.start()
    try:
        release.write_text("go")  # the node finishes; the run parks; the old server exits
        assert server.wait_exit(60) == 0
        canceller.join(90)
        receipt = answer.get("receipt")
        assert receipt is not None, answer.get("error")
        assert receipt["status"] == "cancelled"
        with Client(server.home, autostart=False) as client:
            assert client.get_run(run_id)["status"] == "cancelled"
            assert client.diagnose() == []
    finally:
        release.write_text("go")
        canceller.join(30)
        with Client(server.home, autostart=False) as client, contextlib.suppress(Exception):
            client.stop(wait=True, timeout=30)  # the server the client started
