"""A full disk under a real server: clear refusals, nothing lost, work resumes once freed.

The state directory is size-limited in one of two ways. ``tmpfs``: a 16 MiB tmpfs mounted
on it (root only; skipped otherwise or when the mount fails), filled with a filler file so
that writes fail with ENOSPC. ``fsize``: the server's ``RLIMIT_FSIZE`` lowered (with
``prlimit``) so that its writes fail with EFBIG; Python ignores SIGXFSZ, so the write fails
instead of killing the process. Space is freed by deleting the filler or raising the limit
again. Before filling, the write-ahead log is checkpointed and truncated, so the next commit
has to grow it.
"""

from __future__ import annotations

import errno
import os
import resource
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pi_workflows.client import UnavailableError

from support.server import ServerProcess, wait_for

QUICK = """
from pi_workflows import Workflow, compute

workflow = Workflow("quick", start="a", nodes={"a": compute(lambda ctx: {"n": 1})}, edges=[])
"""

GATED = """
import time
from pathlib import Path
from pi_workflows import Workflow, compute, edge

GATE = Path({gate!r})

def wait_for_gate(ctx):
    while not GATE.exists():  # the test opens the gate once the disk is full
        time.sleep(0.02)
    return {{"gated": True}}

workflow = Workflow(
    "gated",
    start="a",
    nodes={{"a": compute(wait_for_gate), "b": compute(lambda ctx: {{"n": 2}})}},
    edges=[edge("a", "b")],
)
"""

TMPFS_SIZE = "16m"
CLIENT = "disk-client"
EXIT_STORAGE = 74
SIGXFSZ_BIT = 1 << (signal.SIGXFSZ - 1)


class Disk:
    """A size limit on the state directory that can be filled and freed again."""

    kind = "none"

    def __init__(self, home: Path) -> None:
        self.home = home

    def prepare(self) -> None:
        """Set the limit up before the server starts."""

    def fill(self, server: ServerProcess) -> None:
        """Leave the server no room to write."""
        raise NotImplementedError

    def free(self, server: ServerProcess) -> None:
        """Give the server room again."""
        raise NotImplementedError

    def close(self) -> None:
        """Undo ``prepare``."""


class Tmpfs(Disk):
    """A small tmpfs on the state directory, filled by a filler file."""

    kind = "tmpfs"

    def prepare(self) -> None:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root; the RLIMIT_FSIZE variant runs instead")
        self.home.mkdir(mode=0o700, parents=True)
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "tmpfs",
             str(self.home)],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
        self.mounted = True

    def fill(self, server: ServerProcess) -> None:
        _truncate_wal(self.home)
        filler = (self.home / "filler").open("wb", buffering=0)
        with filler, pytest.raises(OSError, match="No space left") as full:  # noqa: PT012
            while True:  # write until the file system refuses
                filler.write(b"\0" * 65536)
        assert full.value.errno == errno.ENOSPC
        assert os.statvfs(self.home).f_bavail == 0

    def free(self, server: ServerProcess) -> None:
        (self.home / "filler").unlink()

    def close(self) -> None:
        if getattr(self, "mounted", False):
            done = subprocess.run(["umount", str(self.home)], check=False, timeout=30)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", str(self.home)], check=False, timeout=30)


class FileSizeLimit(Disk):
    """``RLIMIT_FSIZE`` of the server process: every write at any offset fails (EFBIG)."""

    kind = "fsize"

    def fill(self, server: ServerProcess) -> None:
        assert server.process is not None
        process = psutil.Process(server.process.pid)
        status = Path(f"/proc/{process.pid}/status").read_text()
        ignored = int(next(line for line in status.splitlines() if line.startswith("SigIgn:"))
                      .split()[1], 16)  # fmt: skip
        assert ignored & SIGXFSZ_BIT, "the server must ignore SIGXFSZ to see EFBIG"
        _truncate_wal(self.home)
        process.rlimit(psutil.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))

    def free(self, server: ServerProcess) -> None:
        assert server.process is not None
        if server.process.poll() is not None:
            return  # the limit ended with the process
        limits = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        psutil.Process(server.process.pid).rlimit(psutil.RLIMIT_FSIZE, limits)


def _truncate_wal(home: Path) -> None:
    """Checkpoint the write-ahead log and truncate it, so that the next commit must grow it."""
    conn = sqlite3.connect(home / "state.sqlite", timeout=10)
    try:
        wait_for(lambda: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0,
                 10, "a truncating checkpoint")  # fmt: skip
    finally:
        conn.close()
    wal = home / "state.sqlite-wal"  # gone if no other connection was open
    assert not wal.exists() or wal.stat().st_size == 0


@pytest.fixture(params=[Tmpfs, FileSizeLimit], ids=["tmpfs", "fsize"])
def disk(request: pytest.FixtureRequest, server_process: ServerProcess) -> Iterator[Disk]:
    """The state directory's size limit (unmounted after the server is cleaned up)."""
    limit: Disk = request.param(server_process.home)
    try:
        limit.prepare()
        yield limit
    finally:
        server_process.cleanup()
        limit.close()


def _runner_pid(server: ServerProcess, run_id: str) -> int | None:
    rows = server.query(
        "SELECT pid FROM run_runners WHERE run_id = ? AND status != 'exited'", run_id
    )
    return rows[0][0] if rows and rows[0][0] else None


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_full_disk_refuses_commands_in_one_line_and_loses_nothing(
    server_process: ServerProcess, disk: Disk, tmp_path: Path
) -> None:
    """Window: the state directory fills up while a node runs; commands are refused with one
    ``storageError`` line naming the database, the server stays up, the node's failed commit
    leaves nothing behind, and once space is freed the run and the refused command finish
    with earlier runs and receipts intact."""
    server = server_process
    gate = tmp_path / "gate"
    server.write_workflow("quick", QUICK)
    server.write_workflow("gated", GATED.format(gate=str(gate)))
    server.start(PI_WORKFLOWS_LEASE_SECONDS="2")
    assert server.process is not None
    pid = server.process.pid
    with server.client(client_id=CLIENT) as client:
        before = client.start_run("quick", {}, project_dir=server.project, idempotency_key="b")
        gated = client.start_run("gated", {}, project_dir=server.project, idempotency_key="g")
    server.wait_status(str(before["runId"]), "completed")
    gated_id = str(gated["runId"])
    runner = wait_for(lambda: _runner_pid(server, gated_id), 30, "the gated runner to spawn")
    wait_for(lambda: server.query("SELECT 1 FROM node_attempts WHERE run_id = ?", gated_id),
             30, "node a to start")  # fmt: skip

    disk.fill(server)
    with server.client(client_id=CLIENT) as client:
        with pytest.raises(UnavailableError) as refused:
            client.start_run("quick", {}, project_dir=server.project, idempotency_key="d")
        assert client.status()["epoch"] == 1  # reads are still answered
    assert refused.value.code == "storageError"
    message = str(refused.value)
    assert "\n" not in message
    assert str(server.home / "state.sqlite") in message
    assert "free disk space" in message
    gate.write_text("open")  # node a finishes now, and its commit fails
    wait_for(lambda: _gone(runner), 30, "the runner whose commit failed to be stopped")
    assert server.query("SELECT status FROM node_attempts WHERE run_id = ?", gated_id) == [
        ("running",)
    ]  # the failed node.finish left no trace
    assert server.process.poll() is None

    disk.free(server)
    with server.client(client_id=CLIENT) as client:
        during = client.start_run("quick", {}, project_dir=server.project, idempotency_key="d")
    assert not during.adopted  # nothing of the refused command had been stored
    server.wait_status(str(during["runId"]), "completed")
    view = server.wait_status(gated_id, "completed", timeout=60)
    completed = Counter(a["nodeId"] for a in view["attempts"] if a["status"] == "completed")
    assert completed == {"a": 1, "b": 1}
    with server.client(client_id=CLIENT) as client:
        again = client.start_run("quick", {}, project_dir=server.project, idempotency_key="b")
        assert again.adopted
        assert again["runId"] == before["runId"]
        assert client.get_run(str(before["runId"]))["output"] == {"n": 1}
    assert server.diagnose() == []
    assert server.process.pid == pid
    assert server.process.poll() is None  # the same server stayed up throughout
    assert server.query("SELECT epoch FROM server_state") == [(1,)]


def _start_server(home: Path, disk: Disk) -> subprocess.CompletedProcess[str]:
    """Run ``python -m pi_workflows.server run`` until it exits (on a full disk it must)."""

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))

    env = {k: v for k, v in os.environ.items() if k != "PI_WORKFLOWS_FAULTS"}
    return subprocess.run(
        [sys.executable, "-m", "pi_workflows.server", "run", "--home", str(home)],
        env={**env, "PI_WORKFLOWS_IDLE_EXIT_SECONDS": "0"},
        preexec_fn=limit_file_size if disk.kind == "fsize" else None,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_server_started_on_a_full_disk_exits_with_one_clear_line(
    server_process: ServerProcess, disk: Disk
) -> None:
    """Window: the server starts while the state directory is full; it exits at once with
    one line naming the database and status 74, and starts normally once space is freed."""
    server = server_process
    server.write_workflow("quick", QUICK)
    server.start()
    run_id = server.start_run("quick")
    server.wait_status(run_id, "completed")
    server.stop()
    if disk.kind == "tmpfs":
        disk.fill(server)
    started = _start_server(server.home, disk)
    assert started.returncode == EXIT_STORAGE, started.stderr
    lines = [line for line in started.stderr.splitlines() if "error" in line.lower()]
    assert len(lines) == 1, started.stderr
    assert "Traceback" not in started.stderr
    assert str(server.home / "state.sqlite") in lines[0]
    assert "free disk space" in lines[0]
    if disk.kind == "tmpfs":
        disk.free(server)
    server.start()
    assert server.run(run_id)["status"] == "completed"
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_server_stopped_on_a_full_disk_still_stops_in_order(
    server_process: ServerProcess, disk: Disk, tmp_path: Path
) -> None:
    """Window: SIGTERM while the disk is full and a node runs; the park cannot be written,
    yet every shutdown step runs (runner stopped, socket removed, exit 0), and the next
    server, once space is freed, recovers the run and finishes it."""
    server = server_process
    gate = tmp_path / "gate"
    server.write_workflow("gated", GATED.format(gate=str(gate)))
    server.start()
    run_id = server.start_run("gated")
    runner = wait_for(lambda: _runner_pid(server, run_id), 30, "the runner to spawn")
    wait_for(lambda: server.query("SELECT 1 FROM node_attempts WHERE run_id = ?", run_id),
             30, "node a to start")  # fmt: skip
    disk.fill(server)
    server.stop()
    assert server.process is not None
    assert server.process.returncode == 0, server.tail()
    assert _gone(runner)
    assert not (server.home / "server.sock").exists()
    assert server.query("SELECT status FROM runs WHERE run_id = ?", run_id) == [("running",)]
    disk.free(server)
    server.start()
    gate.write_text("open")
    view = server.wait_status(run_id, "completed")
    completed = Counter(a["nodeId"] for a in view["attempts"] if a["status"] == "completed")
    assert completed == {"a": 1, "b": 1}
    assert server.diagnose() == []
