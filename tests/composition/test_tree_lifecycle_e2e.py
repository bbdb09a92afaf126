"""A run's tree moves together, through real processes: pause and resume, restart, cancel
while children validate answers, and server kills between a child's end and its parent.

Witnesses outside the database (the leaves' marks, the validators' pids) say what ran;
``state diagnose`` must be clean after each.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest

from support.composition import GATED_LEAF, LEAF, WRAP, fan, witnessed
from support.server import ServerProcess, wait_for, written_pid

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

GATE = """
import os, time
from pathlib import Path
from pi_workflows import Workflow, checkpoint

STARTED = Path({started!r})
RELEASE = Path({release!r})


def check(answer, ctx):
    with STARTED.open("a") as out:
        out.write(f"{{os.getpid()}}\\n")
    while not RELEASE.exists():
        time.sleep(0.02)  # held until the test releases it, or its runner is stopped


workflow = Workflow("gate", start="ask",
                    nodes={{"ask": checkpoint({{"question": "ok?"}}, validate=check)}})
"""

GATES = """
from pi_workflows import Workflow, fan_out

workflow = Workflow("gates", start="each",
                    nodes={"each": fan_out("gate", items=lambda ctx: [0, 1], concurrency=2)})
"""


def _cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return server.cli(*args)


def _children(server: ServerProcess, parent: str) -> list[tuple[Any, ...]]:
    return server.query(
        "SELECT run_id, status, park_reason FROM runs WHERE parent_run_id = ?"
        " ORDER BY created_at, run_id",
        parent,
    )


def _starts(witness: Path) -> list[int]:
    return sorted(m["item"] for m in witnessed(witness) if m["e"] == "start")


def test_pausing_a_parent_pauses_its_tree_and_resuming_it_finishes_every_item_once(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The children are held inside their node, so only the pause stops them: both are
    parked ``userPaused`` (a finished child can never pass for a paused one), no third child
    starts, and the resume finishes each of the four items exactly once."""
    server.write_workflow("gleaf", GATED_LEAF)
    server.write_workflow("fan", fan(concurrency=2).replace('fan_out("leaf"', 'fan_out("gleaf"'))
    witness, release = tmp_path / "witness.jsonl", tmp_path / "release"
    parent = server.start_run(
        "fan", {"items": [0, 1, 2, 3], "witness": str(witness),
                "options": {str(i): {"release": str(release)} for i in range(4)}},
    )  # fmt: skip
    wait_for(lambda: _starts(witness) == [0, 1], 60, "two children to start")
    paused = _cli(server, "run", "pause", parent, "--reason", "lunch")
    assert paused.returncode == 0, paused.stderr
    assert server.run(parent)["status"] == "paused"
    assert [(status, reason) for _, status, reason in _children(server, parent)] == [
        ("paused", "userPaused"),
        ("paused", "userPaused"),
    ], "both running children are paused, and no new child starts under a paused parent"
    assert [m for m in witnessed(witness) if m["e"] == "end"] == []
    release.write_text("")
    resumed = _cli(server, "run", "resume", parent)
    assert resumed.returncode == 0, resumed.stderr
    done = server.wait_status(parent, "completed", timeout=90)
    assert done["output"] == {"total": 2 * (0 + 1 + 2 + 3)}
    ended = Counter(m["item"] for m in witnessed(witness) if m["e"] == "end")
    assert ended == {0: 1, 1: 1, 2: 1, 3: 1}, "each item completed exactly once"
    assert server.diagnose() == []


def test_restarting_a_failed_parent_starts_new_children_and_cancels_none_twice(
    server: ServerProcess, tmp_path: Path
) -> None:
    server.write_workflow("leaf", LEAF)
    server.write_workflow("wrap", WRAP)
    witness = tmp_path / "witness.jsonl"
    flag = tmp_path / "fail"
    flag.write_text("1")
    server.write_workflow(
        "flaky",
        f"""
        from pathlib import Path
        from pi_workflows import Workflow, compute, edge, subworkflow

        def finish(ctx):
            if Path({str(flag)!r}).exists():
                raise ValueError("not yet")
            return ctx.outputs["one"]

        workflow = Workflow(
            "flaky",
            start="one",
            nodes={{
                "one": subworkflow("leaf", input=lambda ctx: {{"item": 5,
                                                               "witness": ctx.input["witness"]}}),
                "two": compute(finish),
            }},
            edges=[edge("one", "two")],
        )
        """,
    )
    parent = server.start_run("flaky", {"witness": str(witness)})
    server.wait_status(parent, "failed")
    (first,) = _children(server, parent)
    flag.unlink()
    restarted = _cli(server, "run", "restart", parent)
    assert restarted.returncode == 0, restarted.stderr
    done = server.wait_status(parent, "completed")
    assert done["output"] == {"double": 10}
    rows = _children(server, parent)
    assert len(rows) == 2
    assert rows[0] == first
    assert rows[1][1] == "completed"
    assert _starts(witness) == [5, 5], "one execution per round"
    assert server.diagnose() == []


def test_cancelling_a_parent_while_its_children_validate_answers_stops_every_validator(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    server = server_process.start(PI_WORKFLOWS_SUBMIT_WAIT_SECONDS="1")  # replies not held long
    started, release = tmp_path / "started.txt", tmp_path / "release"
    server.write_workflow("gate", GATE.format(started=str(started), release=str(release)))
    server.write_workflow("gates", GATES)
    parent = server.start_run("gates", {})

    def requests() -> list[tuple[Any, ...]]:
        return server.query(
            "SELECT q.request_id FROM interactive_requests q JOIN runs r USING (run_id)"
            " WHERE r.parent_run_id = ? AND q.status = 'pending'",
            parent,
        )

    wait_for(lambda: len(requests()) == 2, 60, "both children to ask")
    with server.client(timeout=30) as client:
        for (request_id,) in requests():
            held = client.submit(request_id, {"ok": True}, wait=0)
            assert held["status"] == "validating"
    wait_for(lambda: started.exists() and len(started.read_text().split()) == 2, 60,
             "both validations to start")  # fmt: skip
    pids = [int(pid) for pid in started.read_text().split()]
    cancelled = _cli(server, "run", "cancel", parent)
    assert cancelled.returncode == 0, cancelled.stderr
    assert {status for _, status, _ in _children(server, parent)} == {"cancelled"}

    def gone(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_for(lambda: all(gone(pid) for pid in pids), 30, "the validators to be stopped")
    assert server.query(
        "SELECT COUNT(*) FROM interactive_requests WHERE status IN ('pending', 'validating')"
    ) == [(0,)]
    assert server.query(
        "SELECT COUNT(*) FROM interactive_submissions WHERE status = 'validating'"
    ) == [(0,)]
    assert server.diagnose() == []


@pytest.mark.parametrize(
    "point", ["runner.node.finish.after_commit", "runner.node.finish.before_commit"]
)
def test_a_server_killed_at_a_childs_end_wakes_its_parent_exactly_once(
    server_process: ServerProcess, tmp_path: Path, point: str
) -> None:
    """Window: the server dies right before or right after the commit that ends the only
    child and queues its parent (one transaction: there is no moment between them)."""
    server = server_process.start(faults=f"{point}=exit")
    server.write_workflow("leaf", LEAF)
    server.write_workflow("wrap", WRAP)
    witness = tmp_path / "witness.jsonl"
    parent = server.start_run("wrap", {"item": 4, "witness": str(witness)})
    assert server.wait_exit(60) == 137
    server.start()
    done = server.wait_status(parent, "completed", timeout=90)
    assert done["output"] == {"child": {"double": 8}}
    assert server.query(
        "SELECT COUNT(*) FROM events WHERE run_id = ? AND type = 'children.joined'", parent
    ) == [(1,)]
    (child,) = _children(server, parent)
    assert child[1] == "completed"
    starts = _starts(witness)
    # Before the commit the child's node ran but its end was lost: it runs again (a compute
    # node is safe to repeat); after it, never.
    assert starts == ([4, 4] if point.endswith("before_commit") else [4])
    assert server.diagnose() == []


def test_a_server_killed_mid_fan_out_finishes_the_tree_after_a_restart(
    server: ServerProcess, tmp_path: Path
) -> None:
    server.write_workflow("leaf", LEAF)
    server.write_workflow("fan", fan(concurrency=3))
    witness = tmp_path / "witness.jsonl"
    parent = server.start_run(
        "fan", {"items": list(range(6)), "witness": str(witness), "sleep": 0.5}
    )
    wait_for(lambda: len(_starts(witness)) >= 3, 60, "the first children to start")
    killed_at = time.time()
    server.kill()
    server.start()
    done = server.wait_status(parent, "completed", timeout=120)
    assert done["output"] == {"total": 2 * sum(range(6))}
    marks = witnessed(witness)
    ended = Counter(m["item"] for m in marks if m["e"] == "end")
    assert set(ended) == set(range(6)), "every item completed"
    # A compute body is at least once: a child's runner orphaned by the kill may finish its
    # body (and write its end) after its server is gone, and the next server runs that node
    # again. Only those in flight at the kill may end twice, and never more.
    in_flight = {m["item"] for m in marks if m["e"] == "start" and m["at"] < killed_at}
    twice = {item for item, count in ended.items() if count > 1}
    assert twice <= in_flight, (twice, in_flight)
    assert max(ended.values()) <= 2
    runs = {item: {m["run"] for m in marks if m["item"] == item} for item in range(6)}
    assert all(len(ids) == 1 for ids in runs.values()), runs  # one child run per item
    assert server.query(
        "SELECT COUNT(*) FROM events WHERE run_id = ? AND type = 'children.joined'", parent
    ) == [(1,)]
    assert json.loads(_cli(server, "state", "diagnose", "--json").stdout)["problems"] == []


CHARGE = """
import os, time
from pathlib import Path
from pi_workflows import Workflow, action, manual_effect

def charge(ctx):
    Path(ctx.input["started"]).write_text(str(os.getpid()))
    time.sleep(60)  # killed here by the test
    return {"charged": True}

workflow = Workflow("charge", start="pay",
                    nodes={"pay": action(charge, effect=manual_effect("charge"))})
"""

PAY = """
from pi_workflows import Workflow, compute, subworkflow, switch

workflow = Workflow("pay", start="one", nodes={
    "one": subworkflow("charge", input=lambda ctx: {"started": ctx.input["started"]}),
    "done": compute(lambda ctx: {"child": ctx.outputs["one"]}),
}, edges=[switch("one", on="$result.outcome", cases={"ok": "done"})])
"""


def test_a_child_left_with_an_ambiguous_effect_is_named_by_its_parents_run_show(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The child's runner dies inside a manual effect's body: the child parks
    ``effectAmbiguous``, its parent keeps waiting, and ``run show`` of the parent names the
    child that needs a person; once resolved and resumed, the parent completes with the
    child's adopted result."""
    started = tmp_path / "started"
    server.write_workflow("charge", CHARGE)
    server.write_workflow("pay", PAY)
    parent = server.start_run("pay", {"started": str(started)})
    os.kill(written_pid(started, 60, "the charge to start"), signal.SIGKILL)  # the runner
    (child,) = [row[0] for row in _children(server, parent)]
    view = server.wait_status(child, "ambiguous")
    assert view["parkReason"] == "effectAmbiguous"
    assert server.run(parent)["status"] == "waiting"
    shown = _cli(server, "run", "show", parent).stdout
    assert "Child runs that need a person" in shown
    assert child in shown
    assert "effectAmbiguous" in shown
    needs = server.run(parent)["needsPerson"]
    assert [(n["runId"], n["parkReason"]) for n in needs] == [(child, "effectAmbiguous")]
    (effect_id,) = [effect["effectId"] for effect in view["effects"]]
    resolved = _cli(server, "effect", "resolve", effect_id, "--applied", "--result",
                    '{"charged": "by hand"}')  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr
    resumed = _cli(server, "run", "resume", child)
    assert resumed.returncode == 0, resumed.stderr
    done = server.wait_status(parent, "completed")
    assert done["output"] == {"child": {"charged": "by hand"}}
    assert server.diagnose() == []
