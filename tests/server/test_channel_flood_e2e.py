"""A runner flooding its private channel is bounded and stopped alone (spec S10, real processes).

Workflow code runs inside the runner child, so a node can write anything on the runner's
private channel: it finds the socket among ``/proc/self/fd`` (the only socket a runner
holds) and writes on a duplicate of it from its callback thread while the runner's main
thread, which owns the channel, waits for the callback. A second run's runner works in a
node meanwhile and clients keep asking; the server's memory is sampled throughout.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from support.server import ServerProcess, wait_for

MIB = 1024 * 1024
# What a flooding runner offers; a server that buffered it would grow by as much.
OFFERED = 256 * MIB
# The server's growth allowed while it is flooded (its own baseline is about 32 MiB).
RSS_GROWTH_LIMIT = 32 * MIB
# The most a flooder can get the kernel to accept before the server stops reading: the
# frame cap (1 MiB), the stream reader's read-ahead (twice that) and the socket buffers.
ACCEPTED_LIMIT = 8 * MIB
# Frames of just under 1 MiB that the server must read, decode and refuse one by one.
BIG_FRAMES = 256

FLOOD_HELPERS = """
import json
import os
import select
import socket
import time
from pathlib import Path

PATIENCE = 120.0  # a gate the test never opens ends the wait (the test has failed by then)


def channel():
    sockets = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                sockets.append(int(name))
        except OSError:
            pass
    (fd,) = sockets
    return socket.socket(fileno=os.dup(fd))


def put(path, data):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.rename(path)


def wait(path):
    deadline = time.monotonic() + PATIENCE
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def offer(sock, first, chunk, total, count):
    # Write ``first`` then ``chunk`` over and over until ``total`` bytes were accepted or the
    # server closed; ``count`` (a witness file) says how many were accepted so far.
    sock.setblocking(False)
    accepted, pending, noted = 0, first, 0
    put(count, {"accepted": 0, "closed": None})
    while accepted < total:
        select.select([], [sock], [], 1.0)
        try:
            sent = sock.send(pending)
        except BlockingIOError:
            continue
        except OSError as exc:
            put(count, {"accepted": accepted, "closed": type(exc).__name__})
            return accepted
        accepted += sent
        pending = pending[sent:] or chunk
        if accepted - noted >= 16384:
            noted = accepted
            put(count, {"accepted": accepted, "closed": None})
    put(count, {"accepted": accepted, "closed": None})
    return accepted
"""

OVERSIZED = """
from pathlib import Path

from pi_workflows import Workflow, compute

from floodkit import channel, offer, put, wait

HEAD = b'{"type":"message","schema":"pi-workflows.runner.v1","payload":{"x":"'


def flood(ctx):
    witness = Path(ctx.input["witness"])
    if (witness / "partial.json").exists():
        return {"calm": True}
    sock = channel()
    part = offer(sock, HEAD, b"a" * 65536, 512 * 1024, witness / "partial-count.json")
    put(witness / "partial.json", {"accepted": part})
    wait(witness / "more")
    offer(sock, b"a" * 65536, b"a" * 65536, ctx.input["offered"], witness / "count.json")
    return {"offered": True}


workflow = Workflow("oversized", start="flood", nodes={"flood": compute(flood)}, edges=[])
"""

MALFORMED = """
import json
from pathlib import Path

from pi_workflows import Workflow, compute

from floodkit import channel, offer

_GOOD = {"type": "message", "schema": "pi-workflows.runner.v1", "runId": "run_x",
         "generation": 1, "runnerEpoch": 1, "messageId": "m-1", "kind": "node.update",
         "payload": {}}
# One kind of bad frame per runner: not JSON; JSON with an unknown envelope field and a
# wrong schema; binary junk with NULs and newlines.
FLOODS = [
    b"{not json at all\\n",
    json.dumps({**_GOOD, "schema": "pi-workflows.runner.v0", "surprise": 1}).encode() + b"\\n",
    bytes(range(256)) * 4 + b"\\n",
]


def flood(ctx):
    witness = Path(ctx.input["witness"])
    n = len(list(witness.glob("count-*.json")))
    chunk = FLOODS[n % len(FLOODS)] * 64
    offer(channel(), chunk, chunk, ctx.input["offered"], witness / f"count-{n}.json")
    return {"offered": True}


workflow = Workflow("malformed", start="flood", nodes={"flood": compute(flood)}, edges=[])
"""

BOGUS = """
import json
import select
import threading
import time
from pathlib import Path

from pi_workflows import Workflow, compute

from floodkit import channel, put, wait

# Well-formed frames with this runner's identity that no server may act on: unknown kinds,
# known kinds with malformed payloads, a read of a digest that does not exist.
KINDS = [
    ("bogus.kind", {}),
    ("node.frobnicate", {"x": 1}),
    ("node.start", {}),
    ("effect.settle", {"effectId": "eff_none", "status": "nope"}),
    ("blob.read", {"digest": "0" * 64, "offset": 0, "length": 1}),
]


def _frame(identity, run_id, generation, message_id, kind, payload):
    return json.dumps({
        "type": "message", "schema": "pi-workflows.runner.v1", "runId": run_id,
        "generation": generation, "runnerEpoch": identity["runnerEpoch"],
        "messageId": message_id, "kind": kind, "payload": payload,
    }).encode() + b"\\n"


def _bogus(identity, run_id, i):
    kind, payload = KINDS[i % len(KINDS)]
    return _frame(identity, run_id, identity["generation"], f"bogus-{i}", kind, payload)


def _big(identity, run_id, i):
    # Just under the 1 MiB frame limit: the server reads and decodes every byte of it.
    frame = _frame(identity, run_id, identity["generation"], f"bogus-{i}", "bogus.big",
                   {"pad": "x" * (1024 * 1024 - 1024)})
    assert len(frame) <= 1024 * 1024
    return frame


def flood(ctx):
    witness = Path(ctx.input["witness"])
    if (witness / "started").exists():
        return {"calm": True}
    (witness / "started").touch()
    wait(witness / "identity.json")
    identity = json.loads((witness / "identity.json").read_text())
    sock = channel()

    # 1. Pipeline frames without reading a reply until the server stops reading them.
    sock.setblocking(False)
    sent, accepted, pending, stalled = 0, 0, b"", None
    while True:
        if not pending:
            pending = _bogus(identity, ctx.run_id, sent)
            sent += 1
        try:
            n = sock.send(pending)
        except BlockingIOError:
            stalled = stalled or time.monotonic()
            if time.monotonic() - stalled > 1.0:
                break
            select.select([], [sock], [], 0.1)
            continue
        stalled = None
        accepted += n
        pending = pending[n:]
    put(witness / "stalled.json", {"frames": sent, "accepted": accepted})

    # 2. Read the replies in a thread and keep sending until the test says stop.
    sock.setblocking(True)
    replies = sock.makefile("rb")
    got = {"n": 0, "bad": []}

    def read():
        while True:
            line = replies.readline()
            if not line:
                got["bad"].append("end of channel")
                return
            reply = json.loads(line)
            if reply.get("messageId") == "bogus-end":
                return
            expected = f"bogus-{got['n']}"
            if (reply.get("messageId"), reply.get("outcome")) != (expected, "rejected"):
                if len(got["bad"]) < 5:
                    got["bad"].append(reply)
            got["n"] += 1

    reader = threading.Thread(target=read)
    reader.start()
    sock.sendall(pending)
    put(witness / "flooding.json", {"frames": sent})
    deadline = time.monotonic() + 120
    while not (witness / "stop").exists() and time.monotonic() < deadline:
        for _ in range(100):
            sock.sendall(_bogus(identity, ctx.run_id, sent))
            sent += 1
    small = sent
    for _ in range(ctx.input["bigFrames"]):  # then hundreds of MiB the server must read
        sock.sendall(_big(identity, ctx.run_id, sent))
        sent += 1
    # The reply to a last frame tells the reader every earlier one was answered.
    end = _frame(identity, ctx.run_id, identity["generation"], "bogus-end", "bogus.end", {})
    sock.sendall(end)
    reader.join()
    put(witness / "flood.json",
        {"frames": sent, "small": small, "replies": got["n"], "bad": got["bad"]})

    # 3. Frames for another run, or for a later generation of this one.
    sock.setblocking(False)
    offered = 0
    for i in range(10000):
        if i % 2:
            frame = _frame(identity, ctx.run_id, identity["generation"] + 1, f"stale-{i}",
                           "node.update", {"attemptId": ctx.attempt_id, "body": {"x": i}})
        else:
            frame = _frame(identity, identity["otherRunId"], identity["generation"],
                           f"hijack-{i}", "node.update",
                           {"attemptId": identity["otherAttemptId"], "body": {"hijack": i}})
        try:
            sock.send(frame)
        except OSError:
            break
        offered += 1
    sock.setblocking(True)
    answers = []
    while line := replies.readline():
        answers.append(json.loads(line))
        put(witness / "hijack.json", {"offered": offered, "answers": answers})
    return {"flooded": sent}


workflow = Workflow("bogus", start="flood", nodes={"flood": compute(flood)}, edges=[])
"""

STEADY = """
import time
from pathlib import Path

from pi_workflows import Workflow, compute, edge


def hold(ctx):
    release = Path(ctx.input["witness"]) / "release"
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"held": True}


workflow = Workflow(
    "steady",
    start="hold",
    nodes={"hold": compute(hold), "after": compute(lambda ctx: {"after": True})},
    edges=[edge("hold", "after")],
)
"""

QUICK = """
from pi_workflows import Workflow, compute, edge

workflow = Workflow(
    "quick",
    start="a",
    nodes={"a": compute(lambda ctx: {"a": 1}), "b": compute(lambda ctx: {"b": 2})},
    edges=[edge("a", "b")],
)
"""


class PeakRss:
    """Samples a process's resident memory in a thread; ``growth`` is peak minus baseline."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self.baseline = self._process.memory_info().rss
        self.peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            self._stop.wait(0.01)

    @property
    def growth(self) -> int:
        """The largest growth seen so far, in bytes."""
        return self.peak - self.baseline

    @contextmanager
    def sampling(self) -> Iterator[PeakRss]:
        """Sample for the duration of the block."""
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(timeout=10)


def _json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def _put(path: Path, data: Any) -> None:
    """Write a witness file whole (a workflow polling for it never reads half of it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.rename(path)


def _witnessed(server: ServerProcess, run_id: str, path: Path, what: str) -> Any:
    """Wait for a witness file of the flooding node; fail at once if its runner is gone."""

    def seen() -> Any:
        value = _json(path)
        if value is None and server.run(run_id)["status"] != "running":
            raise AssertionError(f"run ended before {what}: {server.run(run_id)}")
        return value

    return wait_for(seen, 90, what)


def _setup(server: ServerProcess, tmp_path: Path, name: str, source: str, grace: str = "1") -> Path:
    witness = tmp_path / "witness"
    witness.mkdir()
    server.write_module("floodkit", FLOOD_HELPERS)
    server.write_workflow(name, source)
    server.write_workflow("steady", STEADY)
    server.write_workflow("quick", QUICK)
    server.start(PI_WORKFLOWS_KILL_GRACE_SECONDS=grace)
    return witness


def _runners(server: ServerProcess, run_id: str) -> list[tuple[Any, ...]]:
    return server.query(
        "SELECT pid, status, outcome FROM run_runners WHERE run_id = ? ORDER BY runner_epoch",
        run_id,
    )


def _start_bystander(server: ServerProcess, witness: Path) -> tuple[str, int]:
    """A run whose runner works in a node (until ``release``) while the flood happens."""
    run_id = server.start_run("steady", {"witness": str(witness)})

    def working() -> dict[str, Any] | None:
        view = server.run(run_id)
        runner, attempts = view["runner"], view["attempts"]
        if runner and runner["status"] == "ready" and attempts:
            return view
        return None

    view = wait_for(working, 60, "the bystander's runner to work in its node")
    assert [a["status"] for a in view["attempts"]] == ["running"]
    return run_id, int(view["runner"]["pid"])


def _bystander_unharmed(server: ServerProcess, witness: Path, run_id: str, pid: int) -> None:
    """Its one runner is still the same live process; released, it completes the run."""
    assert _runners(server, run_id) == [(pid, "ready", None)]
    (witness / "release").touch()
    view = server.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert view["status"] == "completed", view
    assert view["output"] == {"after": True}


def _served(server: ServerProcess) -> None:
    """Another client's reads and a whole new run are served."""
    with server.client() as client:
        assert client.status()["pid"] == server.process.pid  # type: ignore[union-attr]
        assert client.list_runs()
    quick = server.start_run("quick")
    assert server.wait_status(quick, {"completed", "failed"}, 60)["status"] == "completed"


def _clean(server: ServerProcess) -> None:
    assert server.diagnose() == []
    with server.client() as client:
        status = client.status()
    assert status["expiredClaims"] == 0
    assert status["runners"] == []


@pytest.mark.timeout(180)
def test_a_runner_offering_an_oversized_frame_is_cut_off_at_the_frame_limit_alone(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """A runner that writes the first half MiB of a frame, then offers 256 MiB more without
    a newline, is read only up to the 1 MiB frame limit: the server's memory stays flat,
    other runs and clients are served while it holds the partial frame, only that runner's
    channel is closed and its runner stopped (``crashed``), and its run, which had committed
    progress, is recovered and completed by the next runner (docs/server.md)."""
    server = server_process
    witness = _setup(server, tmp_path, "oversized", OVERSIZED)
    bystander, bystander_pid = _start_bystander(server, witness)
    assert server.process is not None
    with PeakRss(server.process.pid).sampling() as rss:
        run_id = server.start_run("oversized", {"witness": str(witness), "offered": OFFERED})
        partial = _witnessed(server, run_id, witness / "partial.json", "half a frame")
        assert 512 * 1024 <= partial["accepted"] < 1024 * 1024
        _served(server)  # while the server holds the unfinished frame of the flooder
        assert _runners(server, run_id)[0][1] == "ready"
        (witness / "more").touch()
        view = server.wait_status(run_id, {"completed", "failed", "paused"}, 90)
    assert view["status"] == "completed", view
    assert view["output"] == {"calm": True}
    assert rss.growth < RSS_GROWTH_LIMIT, f"server grew {rss.growth / MIB:.1f} MiB"
    count = _json(witness / "count.json")
    assert count is not None
    assert count["accepted"] < ACCEPTED_LIMIT, count  # of 256 MiB offered
    wait_for(
        lambda: all(row[1] == "exited" for row in _runners(server, run_id)), 60, "runner exits"
    )
    assert [row[2] for row in _runners(server, run_id)] == ["crashed", "exited"]
    assert [(a["attemptNo"], a["status"]) for a in view["attempts"]] == [
        (1, "interrupted"),
        (2, "completed"),
    ]
    assert "broke its channel: frame exceeds 1048576 bytes" in server.tail(400)
    _bystander_unharmed(server, witness, bystander, bystander_pid)
    _clean(server)


@pytest.mark.timeout(180)
def test_a_runner_flooding_malformed_frames_is_stopped_alone_and_its_run_parks_after_three(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """A node that floods its channel with malformed frames (not JSON, a wrong schema with
    an unknown field, binary junk) on every attempt has each runner stopped at its first bad
    frame (``crashed``) with the server's memory flat and the other run untouched; after the
    third runner the run parks ``runnerCrashed``, as docs/server.md says of a node that keeps
    stopping its runner."""
    server = server_process
    witness = _setup(server, tmp_path, "malformed", MALFORMED)
    bystander, bystander_pid = _start_bystander(server, witness)
    assert server.process is not None
    with PeakRss(server.process.pid).sampling() as rss:
        run_id = server.start_run("malformed", {"witness": str(witness), "offered": OFFERED})
        view = server.wait_status(run_id, {"completed", "failed", "paused"}, 90)
        _served(server)
    assert view["status"] == "paused", view
    assert view["parkReason"] == "runnerCrashed"
    assert view["parkDetail"].startswith("node flood stopped its runner 3 times")
    assert rss.growth < RSS_GROWTH_LIMIT, f"server grew {rss.growth / MIB:.1f} MiB"
    counts = [_json(witness / f"count-{n}.json") for n in range(3)]
    assert all(c is not None and c["accepted"] < ACCEPTED_LIMIT for c in counts), counts
    assert not (witness / "count-3.json").exists()
    wait_for(
        lambda: all(row[1] == "exited" for row in _runners(server, run_id)), 60, "runner exits"
    )
    assert [row[2] for row in _runners(server, run_id)] == ["crashed"] * 3
    assert [(a["attemptNo"], a["status"]) for a in view["attempts"]] == [
        (1, "interrupted"),
        (2, "interrupted"),
        (3, "interrupted"),
    ]
    assert server.tail(400).count(f"runner of run {run_id} sent a bad frame") == 3
    _bystander_unharmed(server, witness, bystander, bystander_pid)
    _clean(server)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_flood_of_well_formed_bogus_runner_messages_grows_nothing(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Well-formed messages with the runner's own identity that the server cannot act on
    (unknown kinds, malformed payloads, a missing blob; thousands of small ones, then 256
    of just under 1 MiB) are each answered ``rejected`` and leave no row, event or log line
    behind, with the server's memory flat; a runner that does not read its replies is
    simply not read any more (its replies do not pile up in the server); the server serves
    other runs during the flood; and the first message for another run or a later
    generation is answered ``claimLost`` and ends that runner's channel. The run then parks
    ``proposalRefused`` (the server refused its proposals, docs/server.md) and completes
    after ``run resume``."""
    server = server_process
    # The runner answered claimLost gets the grace to note that answer before it is stopped.
    witness = _setup(server, tmp_path, "bogus", BOGUS, grace="5")
    bystander, bystander_pid = _start_bystander(server, witness)
    (other_attempt,) = server.run(bystander)["attempts"]
    log_before = server.log.stat().st_size
    bystander_events = server.query("SELECT COUNT(*) FROM events WHERE run_id = ?", bystander)
    assert server.process is not None
    with PeakRss(server.process.pid).sampling() as rss:
        run_id = server.start_run("bogus", {"witness": str(witness), "bigFrames": BIG_FRAMES})
        wait_for((witness / "started").exists, 60, "the flooding node to start")
        ((epoch, generation),) = server.query(
            "SELECT runner_epoch, generation FROM run_runners WHERE run_id = ?", run_id
        )
        history = "SELECT revision, type FROM events WHERE run_id = ? ORDER BY revision"
        events = server.query(history, run_id)
        replies = "SELECT COUNT(*) FROM runner_messages WHERE runner_epoch = ?"
        stored = server.query(replies, epoch)
        _put(
            witness / "identity.json",
            {
                "runnerEpoch": epoch,
                "generation": generation,
                "otherRunId": bystander,
                "otherAttemptId": other_attempt["attemptId"],
            },
        )
        stalled = _witnessed(server, run_id, witness / "stalled.json", "the flood to stall")
        flooding = _witnessed(server, run_id, witness / "flooding.json", "the flood to go on")
        _served(server)  # during the flood: it goes on until the test says stop
        assert server.query(history, run_id) == events
        assert server.query(replies, epoch) == stored  # the node.start reply, nothing more
        (witness / "stop").touch()
        flood = _witnessed(server, run_id, witness / "flood.json", "the flood to end")
        hijack = _witnessed(server, run_id, witness / "hijack.json", "the stale frames' answer")
        view = server.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert stalled["accepted"] < ACCEPTED_LIMIT, stalled
    assert flood["bad"] == [], flood
    assert flood["replies"] == flood["frames"] == flood["small"] + BIG_FRAMES, flood
    assert flood["small"] > flooding["frames"], flood  # the flood went on while others ran
    assert rss.growth < RSS_GROWTH_LIMIT, f"server grew {rss.growth / MIB:.1f} MiB"
    assert server.log.stat().st_size - log_before < 4096  # one line, not one per message
    # Nothing the runner sent was recorded: after the node started, only the server's park.
    settled = server.query(history, run_id)
    assert settled[: len(events)] == events
    assert [kind for _, kind in settled[len(events) :]] == ["run.parked"]
    # Only the first stale frame was read: it was answered claimLost, then the channel ended.
    assert hijack["offered"] >= 1
    ((answer,),) = [hijack["answers"]]
    assert (answer["messageId"], answer["outcome"]) == ("hijack-0", "claimLost"), hijack
    assert (
        server.query("SELECT COUNT(*) FROM events WHERE run_id = ?", bystander) == bystander_events
    )
    assert view["status"] == "paused", view
    assert view["parkReason"] == "proposalRefused"
    wait_for(
        lambda: all(row[1] == "exited" for row in _runners(server, run_id)), 60, "runner exits"
    )
    assert [row[2] for row in _runners(server, run_id)] == ["claimLost"]
    assert server.query(replies, epoch) == [(0,)]  # deleted with the runner's exit record
    with server.client() as client:
        client.resume(run_id)
    view = server.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert view["status"] == "completed", view
    assert view["output"] == {"calm": True}
    _bystander_unharmed(server, witness, bystander, bystander_pid)
    _clean(server)
