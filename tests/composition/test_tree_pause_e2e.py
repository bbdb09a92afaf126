"""A pause reaches a whole tree at any depth, through real processes.

The runs are three deep: ``top`` runs ``mid`` as a subworkflow, and ``mid`` fans out over
``gleaf``. Leaves and gates write witness marks outside the database, so what ran while the
tree was paused is seen whatever the rows say; ``state diagnose`` must be clean after each.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from support.composition import GATED_LEAF, witnessed
from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

MID = """
import json, time
from pathlib import Path
from pi_workflows import Workflow, compute, edge, fan_out


def items(ctx):
    with open(ctx.input["witness"], "a") as out:
        out.write(json.dumps({"run": ctx.run_id, "item": -1, "e": "items",
                              "at": time.time()}) + "\\n")
    while not Path(ctx.input["go"]).exists():
        time.sleep(0.02)  # the fan_out's items are held until the test lets them go
    return [0, 1, 2]


def leaf_input(ctx, item):
    return {"item": item, "witness": ctx.input["witness"], "release": ctx.input["release"]}


workflow = Workflow(
    "mid",
    start="each",
    nodes={
        "each": fan_out("gleaf", items=items, input=leaf_input, concurrency=3),
        "sum": compute(lambda ctx: {"total": sum(c["output"]["double"]
                                                 for c in ctx.outputs["each"])}),
    },
    edges=[edge("each", "sum")],
)
"""

TOP = """
from pi_workflows import Workflow, compute, edge, subworkflow

workflow = Workflow(
    "top",
    start="one",
    nodes={
        "one": subworkflow("mid", input=lambda ctx: ctx.input),
        "done": compute(lambda ctx: ctx.outputs["one"]),
    },
    edges=[edge("one", "done")],
)
"""


def _below(server: ServerProcess, run_id: str) -> list[tuple[Any, ...]]:
    """Every run under ``run_id`` (depth first is not needed: the tests read by parent)."""
    return server.query(
        "WITH RECURSIVE t(run_id) AS (SELECT run_id FROM runs WHERE parent_run_id = ?"
        " UNION ALL SELECT r.run_id FROM runs r JOIN t ON r.parent_run_id = t.run_id)"
        " SELECT r.run_id, r.workflow_name, r.status, r.park_reason FROM runs r"
        " JOIN t USING (run_id) ORDER BY r.created_at, r.run_id",
        run_id,
    )


def _marks(witness: Path, event: str) -> list[int]:
    return sorted(m["item"] for m in witnessed(witness) if m["e"] == event)


def _write(server: ServerProcess) -> None:
    server.write_workflow("gleaf", GATED_LEAF)
    server.write_workflow("mid", MID)
    server.write_workflow("top", TOP)


def test_a_pause_reaches_grandchildren_a_draining_child_spawns(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: the root is paused while its child computes its fan_out's items; the child's
    drain ends with ``node.spawn`` (not a node boundary), so its children are recorded after
    the pause read the tree. None of them may start until the root is resumed."""
    server = server_process.start(PI_WORKFLOWS_DRAIN_SECONDS="60")
    _write(server)
    witness, go, release = tmp_path / "witness.jsonl", tmp_path / "go", tmp_path / "release"
    release.write_text("")  # leaves finish at once when they run: only *whether* they run counts
    top = server.start_run("top", {"witness": str(witness), "go": str(go), "release": str(release)})
    wait_for(lambda: _marks(witness, "items") == [-1], 60, "mid to compute its items")
    (mid,) = [row[0] for row in _below(server, top)]
    pause = subprocess.Popen(
        [sys.executable, "-m", "pi_workflows.cli.main", "--home", str(server.home),
         "run", "pause", top, "--reason", "hold the tree"],
        cwd=server.project, env=server.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        # The root is paused (the tree below it was read in the same step), and the pause
        # now drains mid, which still computes its items.
        server.wait_status(top, "paused")
        go.write_text("")
        out, err = pause.communicate(timeout=120)
    finally:
        if pause.poll() is None:
            pause.kill()
    assert pause.returncode == 0, (out, err)
    server.wait_status(mid, "paused")
    assert _marks(witness, "start") == [], "no grandchild ran under a paused root"
    # Durable proof that none will start before the resume: the join holds every item back.
    assert [row for row in _below(server, top) if row[0] != mid] == []
    assert server.query(
        "SELECT c.status, COUNT(*) FROM run_children c JOIN run_joins j USING (wait_id)"
        " WHERE j.parent_run_id = ? GROUP BY c.status",
        mid,
    ) == [("waiting", 3)]
    assert server.diagnose() == []
    resumed = server.cli("run", "resume", top)
    assert resumed.returncode == 0, resumed.stderr
    done = server.wait_status(top, "completed", timeout=120)
    assert done["output"] == {"total": 2 * (0 + 1 + 2)}
    assert Counter(_marks(witness, "end")) == {0: 1, 1: 1, 2: 1}
    assert server.diagnose() == []


def test_pausing_a_root_parks_every_running_run_three_deep_and_resume_finishes_each_once(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The leaves are held inside their node, so only the pause can stop them: each is
    parked ``userPaused`` (never counted as paused because it finished), the middle run
    and the root are paused, and the resume finishes every leaf exactly once."""
    _write(server)
    witness, go, release = tmp_path / "witness.jsonl", tmp_path / "go", tmp_path / "release"
    go.write_text("")
    top = server.start_run("top", {"witness": str(witness), "go": str(go), "release": str(release)})
    wait_for(lambda: _marks(witness, "start") == [0, 1, 2], 60, "the three leaves to start")
    paused = server.cli("run", "pause", top)
    assert paused.returncode == 0, paused.stderr
    assert server.run(top)["status"] == "paused"
    rows = _below(server, top)
    assert [(name, status, reason) for _, name, status, reason in rows] == [
        ("mid", "paused", "userPaused"),
        *[("gleaf", "paused", "userPaused")] * 3,
    ], rows
    assert _marks(witness, "end") == [], "a leaf held in its node cannot have finished"
    assert server.query("SELECT COUNT(*) FROM run_queue WHERE status IN ('ready', 'claimed')") == [
        (0,)
    ]
    assert server.diagnose() == []
    release.write_text("")
    resumed = server.cli("run", "resume", top)
    assert resumed.returncode == 0, resumed.stderr
    done = server.wait_status(top, "completed", timeout=120)
    assert done["output"] == {"total": 2 * (0 + 1 + 2)}
    assert Counter(_marks(witness, "end")) == {0: 1, 1: 1, 2: 1}
    assert server.diagnose() == []
