"""Notices through Apprise end to end: a real server and channel process, Apprise sending
to a `json://` target on a loopback HTTP receiver written here.

Each notice reaches the channel at most once (receipted before it is sent), a burst is one
digest, and a decision addressed to the audience arrives as a "needs a person" notice.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from pi_workflows.channels.state import read_process

from support.receiver import Receiver
from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

STEPS = """
from pi_workflows import Workflow, edge, notify

workflow = Workflow(
    "steps",
    start="n0",
    nodes={f"n{i}": notify(f"step {i} done", audience="desk") for i in range(COUNT)},
    edges=[edge(f"n{i}", f"n{i + 1}") for i in range(COUNT - 1)],
)
"""

ASK = """
from pi_workflows import Workflow, choice, human_decision

workflow = Workflow(
    "ask",
    start="ask",
    nodes={"ask": human_decision("Ship it?", [choice("yes"), choice("no")], audience="desk")},
    edges=[],
)
"""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


@pytest.fixture
def server(tmp_path: Path, receiver: Receiver) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path,
        {"PI_WORKFLOWS_CHANNEL_BACKOFF_SECONDS": "0.2", "PI_WORKFLOWS_CHANNEL_DIGEST_AT": "3"},
    )
    url = f"json://127.0.0.1:{receiver.port}/hook"
    added = process.cli("channel", "add", "desk", "--kind", "notify", "--url", url)
    assert added.returncode == 0, added.stderr
    assert process.cli("audience", "set", "desk", "--channels", "pi,web,desk").returncode == 0
    process.start()
    yield process
    process.cleanup()


def _running_pid(server: ServerProcess) -> int:
    record = wait_for(
        lambda: (r := read_process(server.home)).get("state") == "running" and r, 30,
        "the channel process",
    )  # fmt: skip
    return int(record["pid"])


def _receipt_states(server: ServerProcess) -> list[str]:
    path = server.home / "channels" / "ledger" / "desk.json"
    if not path.exists():
        return []
    return sorted(r["state"] for r in json.loads(path.read_text())["receipts"].values())


def test_each_notice_arrives_once_and_survives_a_restart_without_repeating(
    server: ServerProcess, receiver: Receiver
) -> None:
    """Two notify messages arrive once each (below the digest threshold); after the channel
    process is SIGKILLed and restarted, nothing is sent again."""
    server.write_workflow("steps", STEPS.replace("COUNT", "2"))
    run_id = server.start_run("steps")
    server.wait_status(run_id, "completed")
    wait_for(lambda: len(receiver.bodies) >= 2, 60, "two notices")
    assert sorted(b["message"] for b in receiver.bodies) == ["step 0 done", "step 1 done"]
    assert all(b["title"] == "steps: progress" for b in receiver.bodies)
    # Marked `sent` just after the receiver has it: wait, so the kill cannot land between
    # (a receipt left `sending` by a kill is never sent again, by design).
    wait_for(lambda: _receipt_states(server) == ["sent"] * 2, 30, "two sent receipts")
    first = _running_pid(server)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: _running_pid(server) != first, 30, "a new channel process")
    server.write_workflow("steps", STEPS.replace("COUNT", "1"))
    again = server.start_run("steps")
    server.wait_status(again, "completed")
    wait_for(lambda: len(receiver.bodies) >= 3, 60, "the third notice")
    assert [b["message"] for b in receiver.bodies].count("step 0 done") == 2  # two runs
    wait_for(lambda: _receipt_states(server) == ["sent"] * 3, 30, "three sent receipts")
    assert len(receiver.bodies) == 3


def test_a_burst_is_one_digest(server: ServerProcess, receiver: Receiver) -> None:
    """Eight notices that arrive at once (more than the digest threshold, 3) are sent as
    one digest message listing them, each once."""
    server.write_workflow("steps", STEPS.replace("COUNT", "8"))
    # Paused before the channel process looks: the run's eight messages are all new at once.
    with server.client() as client:
        client.call("server.status", {})
    run_id = server.start_run("steps")
    server.wait_status(run_id, "completed")
    wait_for(
        lambda: sum(b["message"].count("step ") for b in receiver.bodies
                    if "notices" in b["title"])
        + len([b for b in receiver.bodies if "notices" not in b["title"]]) >= 8,
        60, "all eight notices",
    )  # fmt: skip
    digests = [b for b in receiver.bodies if "notices" in b["title"]]
    assert digests, f"no digest among {receiver.bodies}"
    texts = "\n".join(b["message"] for b in receiver.bodies)
    for i in range(8):
        assert texts.count(f"step {i} done") == 1


def test_a_decision_for_the_audience_is_a_needs_a_person_notice(
    server: ServerProcess, receiver: Receiver
) -> None:
    """A decision addressed to an audience with a notice channel arrives there once, with
    its question, its choices and the command that answers it."""
    server.write_workflow("ask", ASK)
    run_id = server.start_run("ask")
    body = wait_for(lambda: receiver.bodies and receiver.bodies[0], 60, "the notice")
    assert body["title"] == "ask: needs a person"
    assert "Ship it?" in body["message"]
    assert f"pi-workflows decision answer {run_id} --choice ID" in body["message"]
    assert server.cli("decision", "answer", run_id, "--choice", "yes").returncode == 0
    server.wait_status(run_id, "completed")
    assert len(receiver.bodies) == 1
