"""Nothing is killed that is not ours, and nothing of ours survives its runner.

A shell command runs in its own session, so killing its runner (alone, or with the server)
leaves it running with parent pid 1. The server records every such group before the
command runs and stops it — only while its leader still has the recorded pid and start
time — before it settles the run's effects, and a new server does the same at start-up.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import psutil

from pi_workflows.protocol.process_start import process_start

from support.server import ServerProcess, wait_for

COMMAND = """
import os, sys, time
from pathlib import Path
witness = Path(sys.argv[1])
def running(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
for line in (witness.read_text().splitlines() if witness.exists() else []):
    pid = int(line.split()[1])
    if line.startswith("start") and pid != os.getpid() and running(pid):
        with witness.open("a") as out:
            out.write(f"overlap {pid}\\n")
with witness.open("a") as out:
    out.write(f"start {os.getpid()}\\n")
gate = Path(sys.argv[2])
while not gate.exists():
    time.sleep(0.02)
with witness.open("a") as out:
    out.write(f"applied {os.getpid()}\\n")
"""

WORKFLOW = """
import sys
from pi_workflows import Workflow, {kind}, shell

workflow = Workflow(
    "cmd",
    start="cmd",
    nodes={{"cmd": shell([sys.executable, "-c", {command!r}, {witness!r}, {gate!r}],
                         effect={kind}("cmd"))}},
    edges=[],
)
"""


def _workflow(server: ServerProcess, tmp_path: Path, kind: str) -> tuple[Path, Path]:
    witness, gate = tmp_path / "witness.txt", tmp_path / "gate"
    server.write_workflow(
        "cmd",
        WORKFLOW.format(kind=kind, command=COMMAND, witness=str(witness), gate=str(gate)),
    )
    return witness, gate


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _started(witness: Path) -> int:
    wait_for(lambda: any(line.startswith("start") for line in _lines(witness)), 30, "the command")
    return int(_lines(witness)[-1].split()[1])


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _runner_pid(server: ServerProcess, run_id: str) -> int:
    rows = server.query(
        "SELECT pid FROM run_runners WHERE run_id = ? AND status != 'exited'", run_id
    )
    assert rows, "no live runner"
    return int(rows[0][0])


def test_a_runner_killed_alone_has_its_command_stopped_before_the_effect_settles(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Window: the runner dies (SIGKILL of its group) while its manual command runs; the
    orphaned command is stopped before the effect is marked ambiguous, so it can never
    apply after an operator has looked."""
    witness, gate = _workflow(server, tmp_path, "manual_effect")
    run_id = server.start_run("cmd")
    command_pid = _started(witness)
    assert server.query("SELECT pid FROM runner_processes WHERE status = 'live'") == [
        (command_pid,)
    ]
    os.killpg(_runner_pid(server, run_id), signal.SIGKILL)
    view = server.wait_status(run_id, {"ambiguous", "completed", "failed"}, 60)
    assert view["status"] == "ambiguous", view
    assert not _alive(command_pid), "the orphaned command survived its runner"
    gate.write_text("open")  # a survivor would apply now
    [effect] = view["effects"]
    with server.client() as client:
        client.resolve_effect(effect["effectId"], "rejected", reason="the command was stopped")
    assert not any(line.startswith("applied") for line in _lines(witness))
    assert server.query("SELECT status FROM runner_processes") == [("ended",)]
    assert server.diagnose() == []


def test_a_server_and_runner_killed_together_leave_an_orphan_the_next_server_stops(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Window: SIGKILL of the server and of the runner while an idempotent command runs;
    the command is still running when the new server starts, which stops it before the
    effect runs again, so the two bodies never overlap."""
    witness, gate = _workflow(server, tmp_path, "idempotent_effect")
    run_id = server.start_run("cmd")
    command_pid = _started(witness)
    runner_pid = _runner_pid(server, run_id)
    server.kill()
    os.killpg(runner_pid, signal.SIGKILL)
    assert _alive(command_pid), "the orphan must still be running when the new server starts"
    server.start()
    wait_for(lambda: not _alive(command_pid), 30, "the orphan to be stopped")
    gate.write_text("open")
    view = server.wait_status(run_id, {"completed", "failed", "ambiguous", "paused"}, 60)
    assert view["status"] == "completed", view
    lines = _lines(witness)
    assert [line.split()[0] for line in lines] == ["start", "start", "applied"], lines
    assert server.diagnose() == []


def test_a_reused_pid_is_never_signalled(server: ServerProcess, tmp_path: Path) -> None:
    """A recorded runner and command whose pids now belong to an unrelated process group
    (a stand-in started one tick after them, as in a fast pid wrap or after a reboot) are
    left alone by recovery."""
    witness, _ = _workflow(server, tmp_path, "manual_effect")
    run_id = server.start_run("cmd")
    command_pid = _started(witness)
    runner_pid = _runner_pid(server, run_id)
    server.kill()
    os.killpg(runner_pid, signal.SIGKILL)
    os.killpg(command_pid, signal.SIGKILL)
    wait_for(lambda: not _alive(command_pid) and not _alive(runner_pid), 30, "both to die")
    stand_in = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    try:
        # The worst case of a fast pid wrap: the recorded processes started one clock tick
        # before the stand-in that now has their pid.
        stand_in_start = process_start(stand_in.pid)
        assert stand_in_start is not None
        recorded = stand_in_start - 1 / os.sysconf("SC_CLK_TCK")
        with sqlite3.connect(server.home / "state.sqlite") as conn:
            conn.execute(
                "UPDATE run_runners SET pid = ?, process_start = ?", (stand_in.pid, recorded)
            )
            conn.execute(
                "UPDATE runner_processes SET pid = ?, process_start = ?", (stand_in.pid, recorded)
            )
        server.start()
        view = server.wait_status(run_id, {"ambiguous", "completed", "failed"}, 60)
        assert view["status"] == "ambiguous", view
        assert stand_in.poll() is None, "recovery signalled a process that is not ours"
        assert _alive(stand_in.pid)
        outcomes = server.query("SELECT outcome FROM run_runners WHERE run_id = ?", run_id)
        assert outcomes == [("orphaned",)]
    finally:
        stand_in.kill()
        stand_in.wait()
