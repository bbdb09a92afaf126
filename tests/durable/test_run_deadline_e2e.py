"""A run deadline through real processes: it ends the run ``timed_out`` whatever the run is
doing (a working runner, a wait for an event, a checkpoint across a server kill, a tree of
child runs two levels deep), cancels its tree with the deadline as the reason and settles
effects as a cancel does. Witnesses outside the database (pid files) say what ran;
``state diagnose`` must be clean after each."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

from pi_workflows.client import RejectedError

from support.durable import holds_nothing
from support.server import ServerProcess, wait_for, written_pid

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

WORKING = """
import os, time
from pathlib import Path
from pi_workflows import Workflow, action, manual_effect


def hold(ctx):
    Path(ctx.input["pid"]).write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)  # working until the deadline stops its runner


workflow = Workflow("working", start="hold", deadline=3,
                    nodes={"hold": action(hold, effect=manual_effect("hold"))})
"""

WAITING = """
from pi_workflows import Workflow, checkpoint, compute, edge, wait_event

workflow = Workflow(
    "waiting", start="go",
    nodes={"go": wait_event("go"), "ask": checkpoint({"question": "more?"}),
           "done": compute(lambda ctx: {"ok": True})},
    edges=[edge("go", "ask"), edge("ask", "done")],
)
"""

TOP = """
from datetime import timedelta
from pi_workflows import Workflow, subworkflow

workflow = Workflow("top", start="mid", deadline=timedelta(seconds=4),
                    nodes={"mid": subworkflow("mid", input=lambda ctx: {})})
"""

MID = """
from pi_workflows import Workflow, subworkflow

workflow = Workflow("mid", start="leaf", nodes={"leaf": subworkflow("leaf", input=lambda ctx: {})})
"""

LEAF = """
from pi_workflows import Workflow, minutes, sleep

workflow = Workflow("leaf", start="nap", nodes={"nap": sleep(minutes(10))})
"""


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_the_deadline_crosses_a_working_runner_and_settles_its_effect_as_a_cancel(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A node working past ``Workflow(deadline=3)``: the run ends ``timed_out`` naming the
    run deadline, its runner is stopped, the attempt is closed ``timed_out`` and the manual
    effect it was applying is ambiguous, as a cancel leaves it."""
    server.write_workflow("working", WORKING)
    pid_file = tmp_path / "pid"
    run_id = server.start_run("working", {"pid": str(pid_file)})
    pid = written_pid(pid_file)
    done = server.wait_status(run_id, "timed_out", timeout=60)
    assert "run deadline passed" in done["error"]
    assert done["deadline"]["durationMs"] == 3_000
    wait_for(lambda: _gone(pid), 30, "the runner to be stopped")
    holds_nothing(server, run_id)
    assert server.query("SELECT status FROM node_attempts WHERE run_id = ?", run_id) == [
        ("timed_out",)
    ]
    assert server.query("SELECT status FROM effects WHERE run_id = ?", run_id) == [("ambiguous",)]
    assert server.diagnose() == []


def test_the_start_deadline_ends_a_wait_for_an_event(server: ServerProcess) -> None:
    """``deadline=`` on the client's start bounds a run that declares none: its event wait
    is cancelled with the run, and no runner is left."""
    server.write_workflow("waiting", WAITING)
    run_id = server.start_run("waiting", {}, deadline=2)
    done = server.wait_status(run_id, "timed_out", timeout=60)
    assert "run deadline passed (2s after the run started" in done["error"]
    assert server.query("SELECT kind, status FROM run_waits WHERE run_id = ?", run_id) == [
        ("event", "cancelled")
    ]
    holds_nothing(server, run_id)
    assert server.diagnose() == []


def test_a_deadline_that_passed_while_the_server_was_down_ends_the_run_at_its_return(
    server: ServerProcess,
) -> None:
    """``run start --deadline 3s`` on a run waiting at a checkpoint; ``run show`` shows the
    deadline; the server is killed, the deadline passes, and the next server ends the run
    ``timed_out`` (its request cancelled)."""
    server.write_workflow("waiting", WAITING)
    started = server.cli("run", "start", "waiting", "--deadline", "3s", "--json")
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["runId"]
    with server.client() as client:
        client.signal(run_id, "go", {})
    view = server.wait_status(run_id, "waiting")
    wait_for(lambda: server.run(run_id).get("waitingOn") is not None, 30, "the checkpoint")
    shown = server.cli("run", "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "deadline" in shown.stdout
    assert "3.0 s from the start" in shown.stdout
    server.kill()
    at = view["deadline"]["at"]
    wait_for(lambda: time.time() * 1000 > at + 200, 30, "the deadline to pass")
    server.start()
    done = server.wait_status(run_id, "timed_out", timeout=60)
    assert "run deadline passed" in done["error"]
    assert server.query("SELECT status FROM interactive_requests WHERE run_id = ?", run_id) == [
        ("cancelled",)
    ]
    assert server.diagnose() == []


def test_the_deadline_of_a_root_cancels_its_tree_two_levels_down(server: ServerProcess) -> None:
    """A root whose child waits on a grandchild that sleeps: at the root's deadline the
    root is ``timed_out`` and the child and grandchild are ``cancelled``, each with a
    reason naming the run deadline; no runner is left in the tree."""
    for name, source in (("top", TOP), ("mid", MID), ("leaf", LEAF)):
        server.write_workflow(name, source)
    root = server.start_run("top", {})

    def grandchild() -> str | None:
        rows = server.query("SELECT run_id FROM runs WHERE root_run_id = ? AND depth = 2", root)
        return rows[0][0] if rows else None

    leaf = wait_for(grandchild, 60, "the grandchild to start")
    server.wait_status(leaf, "waiting")
    done = server.wait_status(root, "timed_out", timeout=60)
    assert "run deadline passed" in done["error"]
    tree = server.query(
        "SELECT depth, status, error FROM runs WHERE root_run_id = ? ORDER BY depth", root
    )
    assert [(depth, status) for depth, status, _ in tree] == [(1, "cancelled"), (2, "cancelled")]
    for _, _, error in tree:
        assert "run deadline passed" in error
        assert root in error
    for run_id in (root, leaf):
        holds_nothing(server, run_id)
    assert server.diagnose() == []


def test_a_bad_deadline_is_refused_with_one_line_and_starts_nothing(
    server: ServerProcess,
) -> None:
    """``--deadline 0s``, a start deadline of 400 days and a word are each refused with
    one clear line; no run is stored."""
    server.write_workflow("waiting", WAITING)
    for value in ("0s", "400d", "soon"):
        refused = server.cli("run", "start", "waiting", "--deadline", value)
        assert refused.returncode != 0
        assert "deadline" in refused.stderr.lower() or "duration" in refused.stderr.lower()
        assert len(refused.stderr.strip().splitlines()) <= 3, refused.stderr
    with pytest.raises(RejectedError, match="deadlineMs"):
        server.start_run("waiting", {}, deadline=-5)
    assert server.query("SELECT COUNT(*) FROM runs") == [(0,)]
