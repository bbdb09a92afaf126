"""Server and child isolation: claims held by the server, process groups, sources, locks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from pi_workflows.client import RejectedError

from support.server import ServerProcess, wait_for, written_pid

BUSY = """
import time
from pi_workflows import Workflow, compute, edge

def spin(ctx):
    end = time.monotonic() + 3.5
    n = 0
    while time.monotonic() < end:
        n += 1
    return {"spins": n > 0}

workflow = Workflow(
    "busy",
    start="spin",
    nodes={"spin": compute(spin), "after": compute(lambda ctx: {"ok": True})},
    edges=[edge("spin", "after")],
)
"""


def test_a_child_blocking_the_cpu_longer_than_three_leases_keeps_its_claim(
    server_process: ServerProcess,
) -> None:
    """With a 1 s lease, a node spinning 3.5 s completes with one generation and no takeover."""
    server_process.write_workflow("busy", BUSY)
    server_process.start(PI_WORKFLOWS_LEASE_SECONDS="1")
    run_id = server_process.start_run("busy")
    view = server_process.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert view["status"] == "completed", view
    assert view["generation"] == 1
    outcomes = wait_for(
        lambda: server_process.query(
            "SELECT outcome FROM run_runners WHERE run_id = ? AND outcome IS NOT NULL", run_id
        ),
        30,
        "the runner's outcome to be recorded",
    )
    assert outcomes == [("exited",)]
    events = [
        e for (e,) in server_process.query("SELECT type FROM events WHERE run_id = ?", run_id)
    ]
    assert "run.recovered" not in events
    assert "run.controlClaimed" not in events


def test_cancellation_kills_the_whole_process_group(server: ServerProcess, tmp_path: Path) -> None:
    """A node's `sleep` grandchild dies with its runner when the run is cancelled."""
    pid_file = tmp_path / "sleep.pid"
    server.write_workflow(
        "sleeper",
        f"""
        import subprocess, time
        from pathlib import Path
        from pi_workflows import Workflow, compute

        def nap(ctx):
            child = subprocess.Popen(["sleep", "300"])
            Path({str(pid_file)!r}).write_text(str(child.pid))
            while True:
                time.sleep(0.05)

        workflow = Workflow(
            "sleeper", start="nap", nodes={{"nap": compute(nap, timeout=600)}}, edges=[]
        )
        """,
    )
    run_id = server.start_run("sleeper")
    sleep_pid = written_pid(pid_file, 30, "the grandchild to start")
    runner_pid = server.run(run_id)["runner"]["pid"]
    with server.client() as client:
        receipt = client.cancel(run_id, reason="test")
    assert receipt["status"] == "cancelled"

    def gone(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_for(lambda: gone(sleep_pid) and gone(runner_pid), 30, "the process group to die")
    view = server.wait_status(run_id, "cancelled")
    assert [a["status"] for a in view["attempts"]] == ["cancelled"]
    wait_for(lambda: server.run(run_id)["runner"] is None, 30, "the runner record to close")
    assert server.diagnose() == []


def test_a_changed_helper_parks_the_run_and_its_new_code_never_runs(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Editing an imported helper while the run waits parks it with workflowSourceChanged
    before any of its code runs; the answer that woke it is refused, the question stays."""
    marker = tmp_path / "new-code-ran"
    server.write_module("greeting", "def greet(name):\n    return 'hello ' + name\n")
    server.write_workflow(
        "greeter",
        """
        from pi_workflows import Workflow, checkpoint, compute, edge
        from greeting import greet

        workflow = Workflow(
            "greeter",
            start="ask",
            nodes={
                "ask": checkpoint(lambda ctx: {"question": "name?"}),
                "greet": compute(lambda ctx: {"text": greet(ctx.outputs["ask"]["name"])}),
            },
            edges=[edge("ask", "greet")],
        )
        """,
    )
    run_id = server.start_run("greeter")
    server.wait_status(run_id, "waiting")
    server.write_module(
        "greeting",
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        "def greet(name):\n    return 'bye ' + name\n",
    )
    with server.client() as client, pytest.raises(RejectedError, match="workflowSourceChanged"):
        client.answer_checkpoint(run_id, {"name": "Ada"})  # its validation can never run
    view = server.wait_status(run_id, {"paused", "completed", "failed"})
    assert view["status"] == "paused"
    assert view["waitingOn"]["status"] == "pending"  # a corrected answer after resume
    assert view["parkReason"] == "workflowSourceChanged"
    assert "greeting.py" in (view["parkDetail"] or "")
    assert not marker.exists()
    assert server.diagnose() == []


def test_a_second_server_on_the_same_state_directory_is_refused(server: ServerProcess) -> None:
    """The lock refuses a second server with a clear one-line message and exit code 2."""
    second = subprocess.run(
        [sys.executable, "-m", "pi_workflows.server", "run", "--home", str(server.home)],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert second.returncode == 4
    assert "already running" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1


def test_runner_without_progress_is_parked_and_resumed_only_when_asked(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A runner that dies before committing anything parks runnerNoProgress; resume retries once."""
    crash = tmp_path / "crash-on-import"
    crash.write_text("yes")
    server.write_workflow(
        "fragile",
        f"""
        import os, sys
        from pathlib import Path
        from pi_workflows import Workflow, compute

        # Crash in the runner child only (the resolver child loads the file too).
        if Path({str(crash)!r}).exists() and sys.argv[0].endswith("__main__.py"):
            os._exit(3)

        workflow = Workflow("fragile", start="a", nodes={{"a": compute(lambda ctx: 1)}}, edges=[])
        """,
    )
    run_id = server.start_run("fragile")
    view = server.wait_status(run_id, {"paused", "completed"})
    assert view["parkReason"] == "runnerNoProgress"
    # Let the scheduler run other work for a while: the parked run is not reclaimed.
    server.write_workflow(
        "other",
        "from pi_workflows import Workflow, compute\n"
        "workflow = Workflow('other', start='a', nodes={'a': compute(lambda ctx: 2)}, edges=[])\n",
    )
    other = server.start_run("other")
    server.wait_status(other, "completed")
    assert len(server.query("SELECT 1 FROM run_runners WHERE run_id = ?", run_id)) == 1
    with server.client() as client:
        client.resume(run_id)
    server.wait_status(run_id, "paused")
    wait_for(
        lambda: (
            len(
                server.query(
                    "SELECT 1 FROM run_runners WHERE run_id = ? AND status = 'exited'", run_id
                )
            )
            == 2
        ),
        30,
        "the second runner to be recorded",
    )
    crash.unlink()
    with server.client() as client:
        client.resume(run_id)
    assert server.wait_status(run_id, {"completed", "paused"})["status"] == "completed"
    with server.client() as client, pytest.raises(RejectedError, match="completed"):
        client.resume(run_id)


def _many_paused_runs(home: Path, count: int) -> None:
    """``count`` paused runs written in one transaction (what a long-lived server holds)."""
    from pi_workflows.store import faults, lifecycle
    from pi_workflows.store.database import open_database

    from support.store import new_run

    faults.declare("test.bulk", "tests: many paused runs written in one transaction")
    db = open_database(home)
    try:
        with db.atomic("test.bulk"):
            for _ in range(count):
                lifecycle.pause(db, lifecycle.reserve(db, new_run()).run_id)
    finally:
        db.close()


@pytest.mark.timeout(240)
def test_diagnose_and_backup_of_a_large_state_never_starve_claim_renewal(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: ``state diagnose`` and ``state backup`` over 30,000 runs take longer than the
    lease; they run off the server's loop, so a working runner keeps its one claim."""
    _many_paused_runs(server_process.home, 30_000)
    server_process.write_workflow("busy", BUSY)
    server_process.start(PI_WORKFLOWS_LEASE_SECONDS="0.8")
    run_id = server_process.start_run("busy")
    server_process.wait_status(run_id, "running")
    backups = 0
    with server_process.client(timeout=120) as client:
        while client.get_run(run_id)["status"] == "running":
            assert client.diagnose() == []
            client.backup(tmp_path / f"backup-{backups}.sqlite")
            backups += 1
    view = server_process.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert view["status"] == "completed", view
    assert view["generation"] == 1
    rows = server_process.query("SELECT type FROM events WHERE run_id = ?", run_id)
    events = [e for (e,) in rows]
    assert "run.controlClaimed" not in events
    assert "run.recovered" not in events
    assert backups >= 1


FDS = """
import os
from pi_workflows import Workflow, compute

def open_files(ctx):
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return {"targets": targets, "ppid": os.getppid()}

workflow = Workflow("fds", start="a", nodes={"a": compute(open_files)}, edges=[])
"""


@pytest.mark.parametrize("template", ["1", "0"])
def test_a_runner_holds_no_descriptor_of_the_database_socket_or_lock(
    server_process: ServerProcess, template: str
) -> None:
    """Forked from the runner template or spawned, a runner has no open descriptor on the
    state database (or its -wal/-shm), the server's socket or the lock file."""
    server_process.write_workflow("fds", FDS)
    server_process.start(PI_WORKFLOWS_RUNNER_TEMPLATE=template)
    run_id = server_process.start_run("fds")
    view = server_process.wait_status(run_id, {"completed", "failed"})
    assert view["status"] == "completed", view
    home = str(server_process.home)
    leaks = [t for t in view["output"]["targets"] if t.startswith(home)]
    assert leaks == []
    listening = {
        f"socket:[{line.split()[6]}]"
        for line in Path("/proc/net/unix").read_text().splitlines()[1:]
        if line.split()[-1] == str(server_process.home / "server.sock")
    }
    assert listening, "the server's listening socket is in /proc/net/unix"
    assert not listening & set(view["output"]["targets"])
    assert server_process.process is not None
    forked = view["output"]["ppid"] != server_process.process.pid
    assert forked == (template == "1")


@pytest.mark.parametrize("template", ["1", "0"])
def test_runners_and_their_commands_run_as_batch_work_and_the_server_does_not(
    server_process: ServerProcess, tmp_path: Path, template: str
) -> None:
    """A node's process and a command it starts are under ``SCHED_BATCH`` (forked from the
    template or spawned), while the server keeps the normal policy."""
    found = tmp_path / "policies.txt"
    server_process.write_workflow(
        "policy",
        f"""
        import os, subprocess, sys
        from pathlib import Path
        from pi_workflows import Workflow, compute

        def look(ctx):
            child = subprocess.run(
                [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                capture_output=True, text=True, check=True,
            )
            mine = os.sched_getscheduler(0)
            Path({str(found)!r}).write_text(f"{{mine}} {{child.stdout.strip()}}")
            return {{"ok": True}}

        workflow = Workflow("policy", start="look", nodes={{"look": compute(look)}}, edges=[])
        """,
    )
    server_process.start(PI_WORKFLOWS_RUNNER_TEMPLATE=template)
    run_id = server_process.start_run("policy")
    view = server_process.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert view["status"] == "completed", view
    assert found.read_text().split() == [str(os.SCHED_BATCH)] * 2
    assert os.sched_getscheduler(server_process.process.pid) == os.SCHED_OTHER
