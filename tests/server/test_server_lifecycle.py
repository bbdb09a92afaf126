"""Server lifecycle: orderly stop parks work that the next start resumes; idle exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.server import ServerProcess, wait_for


def test_stop_parks_running_work_and_the_next_start_resumes_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    """`server stop` parks a running run with serverStopped; a new server finishes it."""
    started, gate = tmp_path / "started", tmp_path / "gate"
    server.write_workflow(
        "gated",
        f"""
        import time
        from pathlib import Path
        from pi_workflows import Workflow, compute, edge

        def wait_gate(ctx):
            Path({str(started)!r}).write_text("x")
            while not Path({str(gate)!r}).exists():
                time.sleep(0.02)
            return {{"through": True}}

        workflow = Workflow(
            "gated",
            start="g",
            nodes={{"g": compute(wait_gate), "h": compute(lambda ctx: ctx.outputs["g"])}},
            edges=[edge("g", "h")],
        )
        """,
    )
    run_id = server.start_run("gated")
    wait_for(started.exists, 30, "the node to start")
    with server.client() as client:
        client.stop()
    assert server.wait_exit() == 0
    assert not (server.home / "server.sock").exists()
    rows = server.query("SELECT status, park_reason FROM runs WHERE run_id = ?", run_id)
    assert rows == [("paused", "serverStopped")]
    assert server.query("SELECT COUNT(*) FROM leases WHERE status = 'held'") == [(0,)]
    gate.write_text("open")
    server.start()
    done = server.wait_status(run_id, {"completed", "failed", "paused"})
    assert done["status"] == "completed", done
    assert done["output"] == {"through": True}
    assert server.diagnose() == []


def test_an_idle_server_exits_by_itself(server_process: ServerProcess) -> None:
    """With nothing to do and no clients, the server exits after the idle period."""
    server_process.start(PI_WORKFLOWS_IDLE_EXIT_SECONDS="1")
    assert server_process.wait_exit(60) == 0
    assert not (server_process.home / "server.sock").exists()


def test_a_malformed_setting_stops_the_server_with_one_line(server_process: ServerProcess) -> None:
    """A bad environment value is named in one line and the server does not start."""
    result = subprocess.run(
        [sys.executable, "-m", "pi_workflows.server", "run", "--home", str(server_process.home)],
        env={**server_process.env, "PI_WORKFLOWS_MAX_RUNNERS": "lots"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "PI_WORKFLOWS_MAX_RUNNERS" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


CHAIN = """
from pi_workflows import Workflow, compute, edge

workflow = Workflow(
    "chain",
    start="a",
    nodes={"a": compute(lambda ctx: {"a": 1}), "b": compute(lambda ctx: {"b": 2})},
    edges=[edge("a", "b")],
)
"""


def test_failing_scheduler_ticks_back_off_and_the_server_keeps_working(
    server_process: ServerProcess,
) -> None:
    """Window: three scheduler ticks fail (an injected store fault, as a full disk would);
    each is logged, the scheduler backs off and continues, and queued work still runs."""
    server_process.write_workflow("chain", CHAIN)
    server_process.start(faults="scheduler.tick=raise:3")
    run_id = server_process.start_run("chain")
    view = server_process.wait_status(run_id, {"completed", "failed"}, 90)
    assert view["status"] == "completed", view
    assert server_process.tail(400).count("scheduler tick failed; retrying in") == 3
    assert server_process.process is not None
    assert server_process.process.poll() is None


SLOW = """
import time
from pi_workflows import Workflow, compute

def slow(ctx):
    time.sleep(5)  # two and a half leases of 2 s without a message: only the timer renews
    return {"slept": True}

workflow = Workflow("slow", start="slow", nodes={"slow": compute(slow)})
"""


def test_a_failing_renewal_is_logged_and_the_next_one_keeps_the_claim(
    server_process: ServerProcess,
) -> None:
    """Window: one backup renewal fails (an injected store fault, as a full disk would) while
    a node runs longer than the lease without a message; the failure is logged, the timer
    goes on, the claim is renewed in time, and the node runs once."""
    server_process.write_workflow("slow", SLOW)
    server_process.start(
        faults="claims.renew.before_commit=raise:1", PI_WORKFLOWS_LEASE_SECONDS="2"
    )
    run_id = server_process.start_run("slow")
    view = server_process.wait_status(run_id, {"completed", "failed"}, 90)
    assert view["status"] == "completed", view
    assert [a["status"] for a in view["attempts"]] == ["completed"]
    assert server_process.tail(400).count("claim renewal failed") == 1
    assert server_process.diagnose() == []


def test_a_background_task_that_dies_stops_the_server_loudly(
    server_process: ServerProcess,
) -> None:
    """If the scheduler task itself ends, the server says so, exits non-zero and removes its
    socket, so the next client auto-starts a healthy server instead of talking to one that
    acknowledges commands it would never run."""
    result = subprocess.run(
        [sys.executable, "-m", "pi_workflows.server", "run", "--home", str(server_process.home)],
        env={**server_process.env, "PI_WORKFLOWS_FAULTS": "scheduler.loop=raise"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 70
    assert "the scheduler task died (InjectedFault" in result.stderr
    assert not (server_process.home / "server.sock").exists()
