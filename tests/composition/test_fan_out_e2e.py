"""Child runs through real processes: a real server, runners, CLI and the Python client.

The leaves record every execution in a witness file outside the database; the tests check
what ran (each item exactly once, never more than ``concurrency`` at once), what the
parent's node returned and routed, what ``run list`` and ``run show`` say, and
``state diagnose``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support.composition import LEAF, WRAP, fan, most_at_once, witnessed
from support.durable import holds_nothing
from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def _cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return server.cli(*args, timeout=60)


def _children(server: ServerProcess, parent: str) -> list[tuple[Any, ...]]:
    return server.query(
        "SELECT run_id, status, depth, root_run_id FROM runs WHERE parent_run_id = ?"
        " ORDER BY created_at, run_id",
        parent,
    )


def _setup(server: ServerProcess, **fan_options: Any) -> None:
    server.write_workflow("leaf", LEAF)
    server.write_workflow("fan", fan(**fan_options))
    server.write_workflow("wrap", WRAP)


def test_a_fan_out_runs_every_item_once_at_most_concurrency_at_once_in_item_order(
    server: ServerProcess, tmp_path: Path
) -> None:
    _setup(server, concurrency=2)
    witness = tmp_path / "witness.jsonl"
    items = [3, 1, 4, 1, 5, 9]
    parent = server.start_run("fan", {"items": items, "witness": str(witness), "sleep": 0.4})
    view = server.wait_status(parent, "waiting")
    assert view["joins"][0]["total"] == 6
    holds_nothing(server, parent)
    listed = json.loads(_cli(server, "run", "list", "--json").stdout)["runs"]
    assert [run["runId"] for run in listed] == [parent], "children are hidden by default"
    done = server.wait_status(parent, "completed")
    assert done["output"] == {"total": 2 * sum(items)}
    marks = witnessed(witness)
    starts = [m["item"] for m in marks if m["e"] == "start"]
    assert sorted(starts) == sorted(items), "each item ran exactly once"
    assert most_at_once(marks) <= 2
    rows = _children(server, parent)
    assert len(rows) == 6
    assert {(status, depth, root) for _, status, depth, root in rows} == {("completed", 1, parent)}
    with server.client() as client:
        output = client.node_output(parent, "each")["output"]
    assert [child["output"]["double"] for child in output] == [2 * item for item in items]
    assert [child["runId"] for child in output] == [
        row[0]
        for row in server.query(
            "SELECT c.child_run_id FROM run_children c JOIN run_joins j USING (wait_id)"
            " WHERE j.parent_run_id = ? ORDER BY c.item",
            parent,
        )
    ]
    assert {child["outcome"] for child in output} == {"ok"}
    listed = json.loads(_cli(server, "run", "list", "--children", "--json").stdout)["runs"]
    assert len(listed) == 7
    assert {run["parentRunId"] for run in listed if run["runId"] != parent} == {parent}
    shown = _cli(server, "run", "show", parent)
    assert "6 completed of 6; joined" in " ".join(shown.stdout.split()), shown.stdout
    assert server.query(
        "SELECT COUNT(*) FROM events WHERE run_id = ? AND type = 'children.joined'", parent
    ) == [(1,)]
    assert server.diagnose() == []


def test_a_waiting_parent_shows_its_progress_in_run_list(
    server: ServerProcess, tmp_path: Path
) -> None:
    _setup(server, concurrency=1)
    witness = tmp_path / "witness.jsonl"
    parent = server.start_run(
        "fan", {"items": [0, 1, 2], "witness": str(witness), "options": {"1": {"sleep": 30}}}
    )
    wait_for(lambda: len(witnessed(witness)) >= 3, 60, "the second child to start")
    out = _cli(server, "run", "list").stdout
    assert "waiting 1/3 completed" in out, out
    child = " ".join(_cli(server, "run", "show", parent).stdout.split())
    assert "1 completed, 1 running, 1 not started of 3" in child, child
    _cli(server, "run", "cancel", parent)
    server.wait_status(parent, "cancelled")
    wait_for(
        lambda: {row[1] for row in _children(server, parent)} <= {"completed", "cancelled"},
        30,
        "the tree to be cancelled",
    )
    assert server.diagnose() == []


def test_a_subworkflow_routes_on_its_child_outcome_and_names_the_child(
    server: ServerProcess, tmp_path: Path
) -> None:
    _setup(server)
    witness = tmp_path / "witness.jsonl"
    good = server.start_run("wrap", {"item": 21, "witness": str(witness)})
    bad = server.start_run("wrap", {"item": 1, "witness": str(witness), "fail": True})
    assert server.wait_status(good, "completed")["output"] == {"child": {"double": 42}}
    failed = server.wait_status(bad, "completed")["output"]
    (child,) = _children(server, bad)
    assert child[1] == "failed"
    assert failed["error"].startswith(f"child run {child[0]} failed:")
    assert "item 1 fails" in failed["error"]
    assert server.diagnose() == []


def test_cancelling_a_child_alone_fails_its_parents_node_which_routes(
    server: ServerProcess, tmp_path: Path
) -> None:
    _setup(server)
    witness = tmp_path / "witness.jsonl"
    parent = server.start_run("wrap", {"item": 2, "witness": str(witness), "sleep": 60})
    wait_for(lambda: witnessed(witness), 60, "the child to start")
    (child,) = _children(server, parent)
    out = _cli(server, "run", "cancel", child[0])
    assert out.returncode == 0, out.stderr
    done = server.wait_status(parent, "completed")
    assert done["output"]["error"].startswith(f"child run {child[0]} was cancelled")
    restart = _cli(server, "run", "restart", child[0])
    assert restart.returncode != 0
    assert f"restart the parent ('pi-workflows run restart {parent}')" in restart.stderr
    assert len(restart.stderr.strip().splitlines()) == 1
    assert [m["e"] for m in witnessed(witness)] == ["start"]  # cancelled mid-node, never twice
    assert server.diagnose() == []


def test_fail_fast_cancels_the_running_children_and_skips_the_rest(
    server: ServerProcess, tmp_path: Path
) -> None:
    _setup(server, concurrency=3, fail_fast=True)
    witness = tmp_path / "witness.jsonl"
    options = {"0": {"fail": True, "sleep": 0.5}, "1": {"sleep": 60}, "2": {"sleep": 60}}
    parent = server.start_run(
        "fan", {"items": list(range(6)), "witness": str(witness), "options": options}
    )
    done = server.wait_status(parent, "completed", timeout=90)
    report = done["output"]
    outcomes = [child["outcome"] for child in report["children"]]
    assert outcomes == ["failed", "cancelled", "cancelled", "skipped", "skipped", "skipped"]
    assert report["error"].startswith("6 of 6 children did not complete")
    started = sorted(m["item"] for m in witnessed(witness) if m["e"] == "start")
    assert started == [0, 1, 2]
    assert not [m for m in witnessed(witness) if m["e"] == "end"]
    assert len(_children(server, parent)) == 3
    assert server.diagnose() == []


def test_bad_items_and_a_deep_recursion_fail_the_node_with_one_line(
    server: ServerProcess, tmp_path: Path
) -> None:
    server.write_workflow("leaf", LEAF)
    server.write_workflow(
        "notalist",
        """
        from pi_workflows import Workflow, compute, fan_out, switch

        workflow = Workflow(
            "notalist",
            start="each",
            nodes={
                "each": fan_out("leaf", items=lambda ctx: {"a": 1}),
                "why": compute(lambda ctx: {"error": ctx.results["each"]["error"]}),
            },
            edges=[switch("each", on="$result.outcome", cases={"failed": "why"})],
        )
        """,
    )
    server.write_workflow(
        "deep",
        """
        from pi_workflows import Workflow, compute, subworkflow, switch

        workflow = Workflow(
            "deep",
            start="down",
            nodes={
                "down": subworkflow("deep"),
                "why": compute(lambda ctx: {"error": ctx.results["down"]["error"]}),
                "up": compute(lambda ctx: ctx.outputs["down"]),
            },
            edges=[switch("down", on="$result.outcome", cases={"failed": "why", "ok": "up"})],
        )
        """,
    )
    run = server.start_run("notalist", {})
    error = server.wait_status(run, "completed")["output"]["error"]
    assert error == "node 'each' items must return a JSON list, got dict"
    deep = server.start_run("deep", {})
    out = server.wait_status(deep, "completed", timeout=120)["output"]
    assert "runs nest at most 8 levels" in json.dumps(out)
    depths = server.query("SELECT MAX(depth), COUNT(*) FROM runs WHERE root_run_id = ?", deep)
    assert depths == [(8, 8)]
    assert server.diagnose() == []


def test_an_unknown_child_workflow_is_refused_when_the_parent_loads(
    server: ServerProcess,
) -> None:
    server.write_workflow(
        "orphan",
        """
        from pi_workflows import Workflow, subworkflow

        workflow = Workflow("orphan", start="one", nodes={"one": subworkflow("no-such-flow")})
        """,
    )
    out = _cli(server, "run", "start", "orphan")
    assert out.returncode != 0
    message = out.stderr.strip()
    assert len(message.splitlines()) == 1, message
    assert "no-such-flow" in message
    assert server.query("SELECT COUNT(*) FROM runs") == [(0,)]


def test_a_child_that_times_out_gives_its_subworkflow_node_the_timed_out_outcome(
    server: ServerProcess,
) -> None:
    server.write_workflow(
        "late",
        """
        import time
        from pi_workflows import Workflow, compute, seconds

        def work(ctx):
            while not ctx.cancellation.is_set():
                time.sleep(0.02)
            return {}

        workflow = Workflow("late", start="work",
                            nodes={"work": compute(work, timeout=seconds(0.5))})
        """,
    )
    server.write_workflow(
        "waitlate",
        """
        from pi_workflows import Workflow, compute, subworkflow, switch

        workflow = Workflow("waitlate", start="one", nodes={
            "one": subworkflow("late"),
            "why": compute(lambda ctx: dict(ctx.results["one"])),
        }, edges=[switch("one", on="$result.outcome", cases={"timed_out": "why"})])
        """,
    )
    parent = server.start_run("waitlate", {})
    done = server.wait_status(parent, "completed", timeout=90)
    (child,) = _children(server, parent)
    assert child[1] == "timed_out"
    assert done["output"]["outcome"] == "timed_out"
    assert done["output"]["error"].startswith(f"child run {child[0]} timed out")
    assert server.diagnose() == []
