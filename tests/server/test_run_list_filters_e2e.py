"""`run.list`'s `parent`, `needsPerson` and `counts` against a real server and real runs.

The web page's run list reads these (docs/ui.md): a run's children, the runs a person must
act on first, and how many runs each status has under the page's filters.
"""

from __future__ import annotations

import pytest

from pi_workflows.client import RejectedError

from support.composition import FAN, LEAF
from support.server import ServerProcess

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

ASK = """
from pi_workflows import Workflow, checkpoint, compute, human_decision, choice, switch

workflow = Workflow(
    "ask",
    start="route",
    nodes={
        "route": compute(lambda ctx: {"kind": ctx.input.get("kind", "quick")}),
        "question": checkpoint(lambda ctx: {"question": "Go on?"}),
        "decide": human_decision(title="Ship it?", choices=[choice("yes", "Ship"),
                                                            choice("no", "Hold")]),
        "quick": compute(lambda ctx: {"done": True}),
    },
    edges=[
        switch("route", on="$.kind",
               cases={"checkpoint": "question", "decision": "decide", "quick": "quick"}),
    ],
)
"""


def _fan(concurrency: int = 3) -> str:
    return FAN.replace("CONCURRENCY", str(concurrency)).replace("FAIL_FAST", "False")


def test_parent_lists_a_fan_outs_children_and_counts_count_them(server: ServerProcess) -> None:
    """`parent` pages exactly the parent's children; `counts` counts them per status."""
    server.write_workflow("leaf", LEAF)
    server.write_workflow("fan", _fan())
    parent = server.start_run("fan", {"items": [1, 2, 3, 4, 5], "witness": "/dev/null"})
    server.wait_status(parent, "completed")
    with server.client() as client:
        first, cursor = client.list_runs_page(parent=parent, limit=3)
        rest, last = client.list_runs_page(parent=parent, limit=3, after=cursor)
        counts = client.count_runs(parent=parent)
        roots = client.count_runs()
    children = {
        row[0] for row in server.query("SELECT run_id FROM runs WHERE parent_run_id = ?", parent)
    }
    assert (len(first), len(rest), last) == (3, 2, None)
    assert {run["runId"] for run in first + rest} == children
    assert {run["parentRunId"] for run in first + rest} == {parent}
    assert counts == {"completed": 5}
    assert roots == {"completed": 1}, "without children or parent only root runs count"


def test_needs_person_lists_checkpoints_decisions_and_parked_runs_but_not_a_pause(
    server: ServerProcess,
) -> None:
    """A checkpoint, a decision and a parked run need a person; a run a person paused, a
    completed one and a queued one do not."""
    server.write_workflow("ask", ASK)
    asking = server.start_run("ask", {"kind": "checkpoint"})
    deciding = server.start_run("ask", {"kind": "decision"})
    paused = server.start_run("ask", {"kind": "checkpoint"})
    quick = server.start_run("ask", {"kind": "quick"})
    for run_id in (asking, deciding, paused):
        server.wait_status(run_id, "waiting")
    server.wait_status(quick, "completed")
    with server.client() as client:
        client.pause(paused)
        needing, cursor = client.list_runs_page(needs_person=True)
        counts = client.count_runs(needs_person=True)
        everything = client.count_runs()
        waiting, _ = client.list_runs_page("waiting", needs_person=True, limit=1)
    assert {run["runId"] for run in needing} == {asking, deciding}
    assert cursor is None
    assert counts == {"waiting": 2}
    assert everything == {"waiting": 2, "paused": 1, "completed": 1}
    assert len(waiting) == 1


def test_a_bad_flag_is_refused_with_one_line(server: ServerProcess) -> None:
    """`counts` and `needsPerson` take true or false only; nothing else is answered."""
    with server.client() as client, pytest.raises(RejectedError, match="'counts' must be true"):
        client.call("run.list", {"counts": "yes"})
