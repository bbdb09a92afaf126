"""Cleanup on cancel through real processes: a workflow's ``on_cancel`` node runs once in a
runner after ``run cancel`` or a run deadline, with the reason, its effect managed as usual
(kept across a ``kill -9`` of its runner and applied once), bounded by its timeout, and the
run's status ends as the cancel or deadline said, with the cleanup's outcome recorded.
A witness file outside the database says what each cleanup body did; ``state diagnose``
must be clean after each."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

HOLDER = """
import json, os, time
from pathlib import Path
from pi_workflows import Workflow, action, idempotent_effect, wait_event


def release(ctx):
    witness = Path(ctx.input["witness"])
    mark = {{"run": ctx.run_id, "pid": os.getpid(), "reason": ctx.cancel_reason,
             "key": ctx.effect_key}}
    with witness.open("a") as out:
        out.write(json.dumps({{"e": "start", **mark}}) + "\\n")
    gate = ctx.input.get("gate")
    while gate and not Path(gate).exists():
        time.sleep(0.02)  # held until the test opens the gate (or its runner is killed)
    with witness.open("a") as out:
        out.write(json.dumps({{"e": "done", **mark}}) + "\\n")
    return {{"released": True}}


workflow = Workflow("holder", start="hold", on_cancel="release", {extra}
                    nodes={{"hold": wait_event("go"),
                            "release": action(release, effect=idempotent_effect("lock"))}})
"""

STUCK = """
import time
from pi_workflows import Workflow, compute, seconds, wait_event


def forever(ctx):
    while True:
        time.sleep(0.05)


workflow = Workflow("stuck", start="hold", on_cancel="tidy",
                    nodes={"hold": wait_event("go"), "tidy": compute(forever, timeout=seconds(1))})
"""

FAILING = """
from pi_workflows import Workflow, compute, wait_event


def tidy(ctx):
    raise RuntimeError(f"could not tidy up after: {ctx.cancel_reason}")


workflow = Workflow("failing", start="hold", on_cancel="tidy", deadline=2,
                    nodes={"hold": wait_event("go"), "tidy": compute(tidy)})
"""

PARENT = """
from pi_workflows import Workflow, action, idempotent_effect, subworkflow
import json
from pathlib import Path


def note(ctx):
    with Path(ctx.input["witness"]).open("a") as out:
        out.write(json.dumps({"e": "parent", "run": ctx.run_id, "reason": ctx.cancel_reason})
                  + "\\n")
    return {}


workflow = Workflow("parent", start="child", on_cancel="note",
                    nodes={"child": subworkflow("holder", input=lambda ctx: ctx.input),
                           "note": action(note, effect=idempotent_effect("note"))})
"""


def _witnessed(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _events(server: ServerProcess, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    rows = server.query(
        "SELECT type, data_json FROM events WHERE run_id = ? ORDER BY revision", run_id
    )
    return [(kind, json.loads(data)) for kind, data in rows]


def test_the_cleanup_node_runs_once_with_the_reason_and_the_run_stays_cancelled(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``run cancel --reason``: the cleanup node runs once with that reason, its effect is
    applied once, the run ends ``cancelled`` and ``run show`` and the history record the
    cleanup's outcome."""
    server.write_workflow("holder", HOLDER.format(extra=""))
    witness = tmp_path / "witness.jsonl"
    run_id = server.start_run("holder", {"witness": str(witness)})
    server.wait_status(run_id, "waiting")
    cancelled = server.cli("run", "cancel", run_id, "--reason", "the operator said stop")
    assert cancelled.returncode == 0, cancelled.stderr
    done = server.wait_status(run_id, "cancelled", timeout=60)
    assert done["error"] == "the operator said stop"
    assert done["cleanup"]["status"] == "completed"
    assert done["cleanup"]["nodeId"] == "release"
    assert [(m["e"], m["reason"]) for m in _witnessed(witness)] == [
        ("start", "the operator said stop"),
        ("done", "the operator said stop"),
    ]
    assert server.query("SELECT node_id, status FROM effects WHERE run_id = ?", run_id) == [
        ("release", "applied")
    ]
    kinds = [kind for kind, _ in _events(server, run_id)]
    assert "run.cleanup_started" in kinds
    assert kinds[-1] == "run.cancelled"
    shown = server.cli("run", "show", run_id)
    assert "cleanup" in shown.stdout
    assert "release completed" in shown.stdout
    history = server.cli("run", "history", run_id, env={**server.env, "COLUMNS": "200"})
    assert "cleanup release completed" in history.stdout, history.stdout
    assert server.diagnose() == []


def test_a_cleanup_killed_mid_way_is_resumed_and_applies_its_effect_once(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``kill -9`` of the runner inside the cleanup body: the next runner runs the cleanup
    again with the same effect key (an idempotent effect), it finishes once, there is one
    applied effect, and the run ends ``cancelled`` with the cleanup completed."""
    server.write_workflow("holder", HOLDER.format(extra=""))
    witness, gate = tmp_path / "witness.jsonl", tmp_path / "gate"
    run_id = server.start_run("holder", {"witness": str(witness), "gate": str(gate)})
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.cancel(run_id, reason="shutting down")
    first = wait_for(lambda: _witnessed(witness)[:1], 60, "the cleanup to start")[0]
    os.kill(first["pid"], signal.SIGKILL)
    wait_for(lambda: len(_witnessed(witness)) >= 2, 60, "the cleanup to run again")
    gate.write_text("")
    done = server.wait_status(run_id, "cancelled", timeout=60)
    marks = _witnessed(witness)
    assert [m["e"] for m in marks] == ["start", "start", "done"]
    assert marks[1]["pid"] != first["pid"]
    assert {m["key"] for m in marks} == {first["key"]}, "every try used the same effect key"
    assert done["cleanup"]["status"] == "completed"
    assert server.query("SELECT status FROM effects WHERE run_id = ?", run_id) == [("applied",)]
    assert server.query(
        "SELECT status FROM node_attempts WHERE run_id = ? AND node_id = 'release'"
        " ORDER BY started_at, rowid",
        run_id,
    ) == [("interrupted",), ("completed",)]
    assert server.diagnose() == []


def test_a_cleanup_that_times_out_or_fails_is_recorded_and_never_changes_the_end(
    server: ServerProcess,
) -> None:
    """A cleanup past its 1 s timeout is stopped and recorded ``timed_out`` (the run stays
    ``cancelled``); one that raises after a run deadline is recorded ``failed`` with its
    error (the run stays ``timed_out``); neither runs again."""
    server.write_workflow("stuck", STUCK)
    server.write_workflow("failing", FAILING)
    stuck = server.start_run("stuck", {})
    failing = server.start_run("failing", {})
    server.wait_status(stuck, "waiting")
    with server.client() as client:
        client.cancel(stuck)
    done = server.wait_status(stuck, "cancelled", timeout=90)
    assert done["cleanup"]["status"] == "timed_out"
    ended = server.wait_status(failing, "timed_out", timeout=90)
    assert "run deadline passed" in ended["error"]
    assert ended["cleanup"]["status"] == "failed"
    assert "could not tidy up after: the run deadline passed" in ended["cleanup"]["error"]
    for run_id, node in ((stuck, "tidy"), (failing, "tidy")):
        assert server.query(
            "SELECT COUNT(*) FROM node_attempts WHERE run_id = ? AND node_id = ?",
            run_id,
            node,
        ) == [(1,)]
    assert server.diagnose() == []


def test_a_tree_cancel_runs_the_cleanup_of_the_parent_and_of_its_child(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Cancelling a parent whose child waits: the parent's and the child's cleanup nodes
    each run once, the child's with the tree cancel's reason; both runs end ``cancelled``."""
    server.write_workflow("holder", HOLDER.format(extra=""))
    server.write_workflow("parent", PARENT)
    witness = tmp_path / "witness.jsonl"
    parent = server.start_run("parent", {"witness": str(witness)})

    def child() -> str | None:
        rows = server.query("SELECT run_id FROM runs WHERE parent_run_id = ?", parent)
        return rows[0][0] if rows else None

    child_id = wait_for(child, 60, "the child to start")
    server.wait_status(child_id, "waiting")
    with server.client() as client:
        client.cancel(parent, reason="no longer needed")
    server.wait_status(parent, "cancelled", timeout=60)
    server.wait_status(child_id, "cancelled", timeout=60)
    marks = _witnessed(witness)
    assert sorted((m["e"], m["run"]) for m in marks) == sorted(
        [("parent", parent), ("start", child_id), ("done", child_id)]
    )
    by_run = {m["run"]: m["reason"] for m in marks}
    assert by_run[parent] == "no longer needed"
    assert f"its parent run {parent} was cancelled" in by_run[child_id]
    assert server.diagnose() == []


def test_a_server_killed_mid_cleanup_resumes_it_and_the_effect_applies_once(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``kill -9`` of the server (its runner orphaned, then stopped by the next server's
    recovery) while the cleanup body is held: the next server runs the cleanup again with
    the same effect key, it finishes once, and the run ends ``cancelled``."""
    server.write_workflow("holder", HOLDER.format(extra=""))
    witness, gate = tmp_path / "witness.jsonl", tmp_path / "gate"
    run_id = server.start_run("holder", {"witness": str(witness), "gate": str(gate)})
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.cancel(run_id, reason="server going away")
    first = wait_for(lambda: _witnessed(witness)[:1], 60, "the cleanup to start")[0]
    server.kill()
    server.start()
    wait_for(lambda: len(_witnessed(witness)) >= 2, 60, "the cleanup to run again")
    gate.write_text("")
    done = server.wait_status(run_id, "cancelled", timeout=60)
    marks = _witnessed(witness)
    assert [m["e"] for m in marks] == ["start", "start", "done"]
    assert {m["key"] for m in marks} == {first["key"]}
    assert {m["reason"] for m in marks} == {"server going away"}
    assert done["cleanup"]["status"] == "completed"
    assert server.query("SELECT status FROM effects WHERE run_id = ?", run_id) == [("applied",)]
    assert server.diagnose() == []
