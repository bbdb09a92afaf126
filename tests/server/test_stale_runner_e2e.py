"""A runner of an older generation cannot write, however it speaks (spec S8, real processes).

A real server, real runner children and their real private channels: the run's claim
expires while its runner is inside an effect body (the server is frozen with SIGSTOP past
the lease), the server recovers the run under a new generation, and the old runner then
speaks on its channel. The workflows write witnesses outside the database, so what the old
code did and saw is known independently of what the server committed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from support.server import ServerProcess, wait_for

LEASE_SECONDS = 1.5
# The freeze must outlast the lease: the last renewal before it was at most one lease ago.
FREEZE_SECONDS = 2 * LEASE_SECONDS

STALE = """
import gc
import json
import os
import sys
import threading
import time
from pathlib import Path

from pi_workflows import Workflow, action, idempotent_effect

PATIENCE = 120.0  # a gate the test never opens ends the wait (the test has failed by then)


def _put(path, data):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.rename(path)


def _line(path, text):
    with path.open("a") as out:
        out.write(text + "\\n")


def _wait(path):
    deadline = time.monotonic() + PATIENCE
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def _main_thread_awaits_a_reply():
    # The runner's main thread owns the channel; it is inside Channel.request, blocked in
    # Connection.receive, once it has sent a proposal and waits for the server's answer.
    frame = sys._current_frames().get(threading.main_thread().ident)
    calls = set()
    while frame is not None:
        calls.add((os.path.basename(frame.f_code.co_filename), frame.f_code.co_name))
        frame = frame.f_back
    return {("channel.py", "request"), ("channel.py", "receive")} <= calls


def _escape(ctx, witness):
    # A copy of this runner (os.fork keeps its memory and its descriptors, the channel
    # included) that leaves the runner's process group, so stopping the runner's group
    # does not stop it, and that speaks with the runner's own Channel once the run has
    # moved on to a new generation.
    from pi_workflows.runner.channel import Channel

    (channel,) = [
        o for o in gc.get_objects() if isinstance(o, Channel) and o._run_id == ctx.run_id
    ]
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # a daemon's stdio: not the runner's output pipes
            os.dup2(null, fd)
        channel.before_proposal = None  # its output capture belongs to the runner
        identity = {
            "pid": os.getpid(),
            "runId": channel._run_id,
            "generation": channel._generation,
            "runnerEpoch": channel._epoch,
        }
        _put(witness / "escapee.json", identity)
        _wait(witness / "changed")
        finish = {"type": "finish", "status": "completed", "output": {"paidBy": "escapee"}}
        proposals = [
            ("node.update", {"attemptId": ctx.attempt_id, "body": {"staleUpdate": "escapee"}}),
            ("node.finish", {"attemptId": ctx.attempt_id, "outcome": "completed",
                             "output": {"paidBy": "escapee"}, "next": finish}),
            ("node.start", {"nodeId": "pay"}),
        ]
        said = []
        for kind, payload in proposals:
            try:
                said.append({"kind": kind, "result": "answered",
                             "reply": channel.request(kind, payload)})
            except BaseException as exc:
                said.append({"kind": kind, "result": type(exc).__name__, "error": str(exc)})
        _put(witness / "escapee-said.json", {"identity": identity, "said": said})
    finally:
        os._exit(0)


def pay(ctx):
    witness = Path(ctx.input["witness"])
    _line(witness / "bodies", f"start {os.getpid()} {ctx.effect_key}")
    if not (witness / "held.json").exists():
        escapee = _escape(ctx, witness)
        _put(witness / "held.json", {"pid": os.getpid(), "escapee": escapee})
        _wait(witness / "speak")
        ctx.publish_update({"staleUpdate": os.getpid()})  # the runner sends it as node.update
        deadline = time.monotonic() + PATIENCE
        while not _main_thread_awaits_a_reply() and time.monotonic() < deadline:
            time.sleep(0.01)
        _put(witness / "spoken.json", {"pid": os.getpid()})
        threading.Event().wait()  # never applies: this runner is stopped in here
    marker = witness / f"applied-{ctx.effect_key}"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        _line(witness / "bodies", f"already {os.getpid()}")
    else:
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        _line(witness / "bodies", f"applied {os.getpid()}")
    return {"paidBy": os.getpid()}


workflow = Workflow(
    "stale",
    start="pay",
    nodes={"pay": action(pay, effect=idempotent_effect("pay"))},
    edges=[],
)
"""


def _json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _kill_if_ours(pid: int) -> None:
    """SIGKILL a copy of a runner that is still alive (never a process that reused its pid)."""
    with contextlib.suppress(psutil.Error):
        process = psutil.Process(pid)
        if "pi_workflows" in " ".join(process.cmdline()) and not _gone(pid):
            process.kill()


def _runners(server: ServerProcess, run_id: str) -> list[tuple[Any, ...]]:
    return server.query(
        "SELECT runner_epoch, generation, pid, status, outcome, exit_code, exit_signal"
        " FROM run_runners WHERE run_id = ? ORDER BY runner_epoch",
        run_id,
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_stale_runner_cannot_write_after_its_claim_expired_and_the_generation_moved_on(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: the server is frozen past the lease while runner A (generation N) is inside
    an idempotent effect body; A's own proposal sent during the freeze is answered claimLost
    or never answered and never committed, the run is recovered under a newer generation
    whose runner applies the effect once and completes it, and a copy of A that speaks on
    A's channel after the change reaches nothing.

    How the old child speaks: A's body, still blocked before it applies, calls
    ``ctx.publish_update`` while the server is frozen, so A's real main thread sends a real
    ``node.update`` with A's run id, generation, runner epoch and message number; the body
    then sees that thread blocked waiting for the answer. A server stops a runner and
    closes its channel *before* it moves the run to a new generation (docs/server.md), so
    the only way A itself can speak after the change is a copy of it that escaped being
    stopped: A's body forked one (``os.fork`` keeps A's memory and its channel descriptor)
    that left A's process group with ``setsid``. Once the test has seen the new generation
    complete the run, that copy sends ``node.update``, ``node.finish`` (finishing the run
    with a stale output) and ``node.start`` through A's own ``Channel`` object.
    """
    witness = tmp_path / "witness"
    witness.mkdir()
    server = server_process
    server.write_workflow("stale", STALE)
    server.start(PI_WORKFLOWS_LEASE_SECONDS=str(LEASE_SECONDS), PI_WORKFLOWS_KILL_GRACE_SECONDS="1")
    run_id = server.start_run("stale", {"witness": str(witness)})
    held = wait_for(lambda: _json(witness / "held.json"), 60, "runner A inside its effect body")
    escapee = int(held["escapee"])
    try:
        identity = wait_for(lambda: _json(witness / "escapee.json"), 60, "A's copy to start")
        assert server.process is not None
        server_pid = server.process.pid
        os.kill(server_pid, signal.SIGSTOP)
        frozen = time.monotonic()
        try:
            (witness / "speak").touch()
            wait_for((witness / "spoken.json").exists, 60, "A to send its stale proposal")
            # The freeze is the fault under test, not synchronisation: the claim must expire.
            time.sleep(max(0.0, FREEZE_SECONDS - (time.monotonic() - frozen)))
        finally:
            os.kill(server_pid, signal.SIGCONT)

        view = server.wait_status(run_id, {"completed", "failed", "paused", "ambiguous"}, 90)
        assert view["status"] == "completed", view
        wait_for(
            lambda: all(row[3] == "exited" for row in _runners(server, run_id)),
            60,
            "every runner of the run to be recorded exited",
        )
        runners = _runners(server, run_id)
        first, last = runners[0], runners[-1]
        epoch_a, generation_a, pid_a = first[0], first[1], first[2]
        assert pid_a == held["pid"]
        assert first[4] == "claimLost", runners  # stopped for its lost claim, not a crash
        assert last[4] == "exited"
        assert last[1] > generation_a
        assert view["output"] == {"paidBy": last[2]}  # the new generation's body, not A's
        assert view["generation"] == last[1]
        assert _gone(pid_a)

        # Nothing of generation N after the change; A's update was never committed.
        events = server.query(
            "SELECT revision, type, generation, data_json FROM events WHERE run_id = ?"
            " ORDER BY revision",
            run_id,
        )
        change = min(rev for rev, _, gen, _ in events if gen is not None and gen > generation_a)
        assert all(rev < change for rev, _, gen, _ in events if gen == generation_a), events
        stale = [e for e in events if e[1] == "node.update" or "staleUpdate" in e[3]]
        assert not stale, events
        assert server.query(
            "SELECT COUNT(*) FROM runner_messages WHERE runner_epoch = ?", epoch_a
        ) == [(0,)]
        attempts = server.query(
            "SELECT attempt_no, generation, status FROM node_attempts WHERE run_id = ?"
            " ORDER BY attempt_no",
            run_id,
        )
        assert attempts == [(1, generation_a, "interrupted"), (2, last[1], "completed")]

        # The effect applied once, by the new generation (witnesses outside the database).
        ((effect_id, key, status),) = server.query(
            "SELECT effect_id, effect_key, status FROM effects WHERE run_id = ?", run_id
        )
        assert status == "applied"
        tries = server.query(
            "SELECT generation, status FROM effect_attempts WHERE effect_id = ?"
            " ORDER BY attempt_no",
            effect_id,
        )
        assert [gen for gen, _ in tries] == [generation_a, last[1]], tries
        assert [state for _, state in tries][-1] == "applied", tries
        assert "applied" not in [state for _, state in tries][:-1], tries
        assert (witness / "bodies").read_text().splitlines() == [
            f"start {pid_a} {key}",
            f"start {last[2]} {key}",
            f"applied {last[2]}",
        ]
        assert [p.name for p in witness.glob("applied-*")] == [f"applied-{key}"]
        assert (witness / f"applied-{key}").read_text() == str(last[2])

        # A's copy speaks on A's channel after the change: it reaches nothing.
        assert identity == {
            "pid": escapee,
            "runId": run_id,
            "generation": generation_a,
            "runnerEpoch": epoch_a,
        }
        revision = server.query("SELECT revision FROM runs WHERE run_id = ?", run_id)
        (witness / "changed").touch()
        said = wait_for(lambda: _json(witness / "escapee-said.json"), 60, "A's copy to speak")
        assert [(s["kind"], s["result"]) for s in said["said"]] == [
            ("node.update", "ChannelClosedError"),
            ("node.finish", "ChannelClosedError"),
            ("node.start", "ChannelClosedError"),
        ], said
        wait_for(lambda: _gone(escapee), 30, "A's copy to exit")
        assert server.query("SELECT revision FROM runs WHERE run_id = ?", run_id) == revision
        assert server.query("SELECT COUNT(*) FROM events WHERE run_id = ?", run_id) == [
            (len(events),)
        ]
        assert server.run(run_id)["output"] == {"paidBy": last[2]}

        assert server.diagnose() == []
        with server.client() as client:
            status = client.status()
        assert status["expiredClaims"] == 0
        assert status["runners"] == []
    finally:
        _kill_if_ours(escapee)


FORKY = """
import multiprocessing
import time
from pathlib import Path

from pi_workflows import Workflow, compute


def _linger(gate):
    deadline = time.monotonic() + 120
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def work(ctx):
    if not ctx.input.get("fork"):
        return {"forked": None}
    # A background process the node does not wait for; "fork" copies the runner's
    # descriptors, its private channel among them.
    helper = multiprocessing.get_context("fork").Process(target=_linger, args=(ctx.input["gate"],))
    helper.start()
    return {"forked": helper.pid}


workflow = Workflow("forky", start="work", nodes={"work": compute(work)}, edges=[])
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_process_forked_by_a_node_does_not_keep_its_exited_runner_alive(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """A runner that exits while a process its node forked still runs (holding a copy of the
    runner's channel) is recorded exited and gives up its slot, so the next run starts."""
    gate = tmp_path / "gate"
    server = server_process
    server.write_workflow("forky", FORKY)
    server.start(PI_WORKFLOWS_MAX_RUNNERS="1")
    helper: int | None = None
    try:
        first = server.start_run("forky", {"fork": True, "gate": str(gate)})
        view = server.wait_status(first, {"completed", "failed"}, 60)
        assert view["status"] == "completed", view
        helper = int(view["output"]["forked"])
        pid = server.query("SELECT pid FROM run_runners WHERE run_id = ?", first)[0][0]
        wait_for(lambda: _gone(pid), 30, "the first runner to exit")
        second = server.start_run("forky", {"fork": False})
        assert server.wait_status(second, {"completed", "failed"}, 20)["status"] == "completed"
        assert server.query("SELECT outcome FROM run_runners WHERE run_id = ?", first) == [
            ("exited",)
        ]
    finally:
        gate.touch()
        if helper is not None:
            _kill_if_ours(helper)
