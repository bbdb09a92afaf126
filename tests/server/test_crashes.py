"""Kill runners and the server at named points; a restarted server finishes every run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import psutil
import pytest

from support.server import ServerProcess, wait_for, written_pid

CHAIN3 = """
import os
from pathlib import Path
from pi_workflows import Workflow, compute, edge

KILL_MARKER = Path({marker!r})

def step(name):
    def run(ctx):
        if name == {kill_in!r} and not KILL_MARKER.exists():
            KILL_MARKER.write_text("killed once")
            os.kill(os.getpid(), 9)
        previous = ctx.outputs.get({{"b": "a", "c": "b"}}.get(name, ""), {{"n": 0}})
        return {{"n": previous["n"] + 1, "node": name}}
    return run

workflow = Workflow(
    "chain3",
    start="a",
    nodes={{"a": compute(step("a")), "b": compute(step("b")), "c": compute(step("c"))}},
    edges=[edge("a", "b"), edge("b", "c")],
)
"""


def _write_chain(server: ServerProcess, tmp_path: Path, kill_in: str = "") -> None:
    server.write_workflow("chain3", CHAIN3.format(marker=str(tmp_path / "killed"), kill_in=kill_in))


def _assert_finished_once_each(server: ServerProcess, run_id: str) -> dict[str, object]:
    view = server.wait_status(run_id, {"completed", "failed", "paused", "cancelled"}, 90)
    assert view["status"] == "completed", view
    assert view["output"] == {"n": 3, "node": "c"}
    completed = Counter(a["nodeId"] for a in view["attempts"] if a["status"] == "completed")
    assert completed == {"a": 1, "b": 1, "c": 1}
    assert server.diagnose() == []
    return view


def test_runner_killed_inside_a_node_before_its_transition(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Window: the runner dies (SIGKILL) after node.start, before node.finish is proposed."""
    _write_chain(server, tmp_path, kill_in="b")
    run_id = server.start_run("chain3")
    view = _assert_finished_once_each(server, run_id)
    statuses = [(a["nodeId"], a["status"]) for a in view["attempts"]]
    assert ("b", "interrupted") in statuses
    # The last runner's exit is recorded after the run's completing commit: wait for it.
    sql = "SELECT outcome FROM run_runners WHERE run_id = ? ORDER BY runner_epoch"
    wait_for(
        lambda: all(o is not None for (o,) in server.query(sql, run_id)),
        30,
        "every runner's outcome to be recorded",
    )
    outcomes = server.query(sql, run_id)
    assert [o[0] for o in outcomes] == ["crashed", "exited"]


def test_runner_killed_right_after_each_transition_commits(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: every node.finish commits, then the runner dies before hearing the reply."""
    _write_chain(server_process, tmp_path)
    server_process.start(faults="supervisor.kill_runner_after.node.finish=flag")
    run_id = server_process.start_run("chain3")
    _assert_finished_once_each(server_process, run_id)
    runners = server_process.query("SELECT outcome FROM run_runners WHERE run_id = ?", run_id)
    assert len(runners) >= 2


@pytest.mark.parametrize("phase", ["before_commit", "after_commit"])
def test_server_killed_at_a_transition_commit(
    server_process: ServerProcess, tmp_path: Path, phase: str
) -> None:
    """Window: the server dies just before / just after committing a node transition."""
    _write_chain(server_process, tmp_path)
    server_process.start(faults=f"runner.node.finish.{phase}=exit")
    run_id = server_process.start_run("chain3")
    assert server_process.wait_exit() == 137
    events = server_process.query("SELECT type FROM events WHERE run_id = ?", run_id)
    finished = [e for (e,) in events if e == "node.finished"]
    assert len(finished) == (1 if phase == "after_commit" else 0)
    server_process.remember_children()
    server_process.start()
    _assert_finished_once_each(server_process, run_id)


def test_server_killed_while_a_runner_works_recovers_the_run(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A SIGKILLed server leaves an orphan runner, still blocked in its node when the next
    server starts; that server kills it (before it can finish) and resumes the run."""
    gate = tmp_path / "gate"
    server.write_workflow(
        "slow",
        f"""
        import os, time
        from pathlib import Path
        from pi_workflows import Workflow, compute, edge

        def wait_gate(ctx):
            Path({str(tmp_path / "started")!r}).write_text(str(os.getpid()))
            while not Path({str(gate)!r}).exists():
                time.sleep(0.02)
            return {{"ok": True}}

        workflow = Workflow(
            "slow",
            start="first",
            nodes={{"first": compute(wait_gate), "second": compute(lambda ctx: {{"done": 1}})}},
            edges=[edge("first", "second")],
        )
        """,
    )
    run_id = server.start_run("slow")
    orphan = psutil.Process(written_pid(tmp_path / "started", 30, "the node to start"))
    server.kill()
    assert orphan.is_running(), "the orphan must still be blocked when the new server starts"
    server.start()
    psutil.wait_procs([orphan], timeout=30)
    assert not orphan.is_running() or orphan.status() == psutil.STATUS_ZOMBIE
    gate.write_text("open")
    view = server.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert view["status"] == "completed", view
    assert view["output"] == {"done": 1}
    outcomes = [o for (o,) in server.query("SELECT outcome FROM run_runners")]
    assert outcomes[0] == "orphaned"
    assert server.diagnose() == []


def test_command_receipts_survive_a_server_restart(server: ServerProcess, tmp_path: Path) -> None:
    """The same run.start key after a restart returns the same run id."""
    _write_chain(server, tmp_path)
    with server.client(client_id="cli-fixed") as client:
        first = client.start_run(
            "chain3", {}, project_dir=server.project, idempotency_key="start-1"
        )
    server.kill()
    server.start()
    with server.client(client_id="cli-fixed") as client:
        again = client.start_run(
            "chain3", {}, project_dir=server.project, idempotency_key="start-1"
        )
    assert again["runId"] == first["runId"]
    assert again.adopted
    assert len(server.query("SELECT run_id FROM runs")) == 1
