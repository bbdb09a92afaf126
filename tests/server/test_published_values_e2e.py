"""Values out of a running run (``ctx.publish``) through a real server, real runners, the
Python client and the CLI: a waiting reader is answered when the run publishes, bounds are
refused to the callback with one line, a failed run keeps what it published, and a missing
key or run is one line and exit 1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.client import NotFoundError

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

PUBLISHES = """
import threading
from pi_workflows import Workflow, checkpoint, compute, edge

def work(ctx):
    ctx.publish("status", {"phase": "ready", "input": ctx.input})
    refused = []
    for key, value in (("no spaces", 1), ("big", "x" * 70_000), ("bad", {1, 2})):
        try:
            ctx.publish(key, value)
        except (ValueError, TypeError) as exc:
            refused.append(str(exc))
    seen = []
    thread = threading.Thread(target=lambda: _try(ctx, seen))
    thread.start()
    thread.join()
    return {"refused": refused, "fromThread": seen}

def _try(ctx, seen):
    try:
        ctx.publish("k0", "from a thread")
    except RuntimeError as exc:
        seen.append(str(exc))

def later(ctx):
    ctx.publish("answer", ctx.outputs["ask"])
    for n in range(98):  # 'status', 'answer' and k0..k97: the run's 100 keys
        ctx.publish(f"k{n}", n)
    try:
        ctx.publish("k98", 98)
    except ValueError as exc:
        return {"refused": str(exc)}
    return {"refused": None}

workflow = Workflow("publishes", start="work", nodes={
    "work": compute(work),
    "ask": checkpoint(lambda ctx: {"question": "go?"}),
    "later": compute(later),
    "hold": checkpoint(lambda ctx: {"question": "done?"}),
}, edges=[edge("work", "ask"), edge("ask", "later"), edge("later", "hold")])
"""

FAILS = """
from pi_workflows import Workflow, compute

def fail(ctx):
    ctx.publish("partial", {"done": 1})
    raise RuntimeError("broke after publishing")

workflow = Workflow("fails", start="fail", nodes={"fail": compute(fail)})
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server with the two workflows."""
    process = ServerProcess(tmp_path)
    process.write_workflow("publishes", PUBLISHES)
    process.write_workflow("fails", FAILS)
    process.start()
    yield process
    process.cleanup()


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("pi-workflows: error: ")
    return lines[0]


def test_a_reader_waiting_for_a_key_is_answered_when_the_run_publishes_it(
    server: ServerProcess,
) -> None:
    """A reader that waits for ``answer`` before the run reaches the node that publishes
    it gets the value once the checkpoint is answered, while the run still runs; the value
    published first is read at once; the callback was told each refused publish in one
    line; ``run show`` lists the keys and ``run get`` prints the value."""
    run_id = server.start_run("publishes", {"n": 7})
    with server.client() as client:
        assert client.get_value(run_id, "status", wait=60) == {"phase": "ready", "input": {"n": 7}}
    view = server.wait_status(run_id, "waiting")
    refused = _output_of(server, run_id, "work")["refused"]
    assert len(refused) == 3, refused
    assert "key 'no spaces' is malformed" in refused[0]
    assert "is 70002 bytes of JSON; the limit is 65536" in refused[1]
    assert "not JSON" in refused[2] or "JSON" in refused[2]
    assert all("\n" not in line for line in refused)
    (thread_error,) = _output_of(server, run_id, "work")["fromThread"]
    assert "not in a thread it started" in thread_error
    assert [k["key"] for k in view["published"]] == ["status"]

    got: dict[str, Any] = {}

    def read() -> None:
        try:
            with server.client() as reader:
                got["record"] = reader.published_value(run_id, "answer", wait=60)
        except Exception as exc:  # shown by the assertion below
            got["error"] = exc

    reader = threading.Thread(target=read)
    reader.start()
    with server.client() as client:
        client.answer_checkpoint(run_id, {"go": True})
    reader.join(60)
    assert not reader.is_alive()
    assert "error" not in got, (got, server.run(run_id)["error"])
    record = got["record"]
    assert (record["key"], record["value"], record["nodeId"], record["version"]) == (
        "answer",
        {"go": True},
        "later",
        1,
    )
    server.wait_status(run_id, "waiting")
    assert "already published 100 keys, the limit" in _output_of(server, run_id, "later")["refused"]
    assert len(server.run(run_id)["published"]) == 100

    done = server.cli("run", "get", run_id, "answer")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"go": True}
    done = server.cli("run", "get", run_id, "status", "--json")
    assert json.loads(done.stdout)["value"]["phase"] == "ready"
    shown = server.cli("run", "show", run_id).stdout
    assert any(line.startswith("published") and "answer" in line for line in shown.splitlines())
    assert server.diagnose() == []


def test_a_missing_key_or_run_is_one_line_and_exit_1(server: ServerProcess) -> None:
    """A key never published, after a short wait, and an unknown run: exit 1 with one line
    naming what is missing; a bad wait is a usage error."""
    run_id = server.start_run("publishes")
    server.wait_status(run_id, "waiting")
    started = time.monotonic()
    done = server.cli("run", "get", run_id, "nope", "--wait", "1s")
    assert done.returncode == 1
    assert time.monotonic() - started >= 1.0
    line = _one_error_line(done.stderr)
    assert f"run {run_id} has published no value 'nope' (not yet)" in line
    done = server.cli("run", "get", "run_missing", "status")
    assert done.returncode == 1
    assert "run_missing" in _one_error_line(done.stderr)
    done = server.cli("run", "get", run_id, "status", "--wait", "soon")
    assert done.returncode == 2
    with server.client() as client, pytest.raises(NotFoundError) as caught:
        client.get_value(run_id, "nope")
    assert caught.value.code == "valueNotPublished"


def test_a_failed_run_keeps_what_it_published_and_a_wait_on_it_ends_at_once(
    server: ServerProcess,
) -> None:
    """The node published, then raised: the run failed and the value stays readable; a
    reader waiting 60 s for a key the ended run never published is answered at once."""
    run_id = server.start_run("fails")
    server.wait_status(run_id, "failed")
    with server.client() as client:
        assert client.get_value(run_id, "partial") == {"done": 1}
        started = time.monotonic()
        with pytest.raises(NotFoundError, match="the run ended failed"):
            client.get_value(run_id, "never", wait=60)
        assert time.monotonic() - started < 10


def _output_of(server: ServerProcess, run_id: str, node: str) -> Any:
    with server.client() as client:
        return client.node_output(run_id, node)["output"]
