"""`run.watch`, `runs.watch`, `run.history`, `run.logs` and `run.output` on a real server."""

from __future__ import annotations

import pytest

from pi_workflows.client import NotFoundError

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

TICKS = """
from pi_workflows import Workflow, compute, switch

def tick(ctx):
    left = ctx.outputs.get("tick", {"left": ctx.input["n"]})["left"] - 1
    print("tick", left)
    return {"left": left, "pad": "p" * 60000}

workflow = Workflow("ticks", start="tick", max_steps=200, nodes={
    "tick": compute(tick),
    "done": compute(lambda ctx: {"finished": True}),
}, edges=[switch("tick", on="$.left", cases={0: "done"}, default="tick")])
"""


def test_a_slow_watcher_gets_the_latest_view_not_every_one(server: ServerProcess) -> None:
    """Window: a watcher that reads nothing while a run makes ~150 changes, then reads.

    It receives far fewer views than changes (the server kept only the newest unsent one),
    and the last one is the run's final state, with its graph.
    """
    server.write_workflow("ticks", TICKS)
    with server.client() as client:
        run_id = client.start("ticks", {"n": 40}, project=server.project)
        with client.watch_run(run_id) as watch:
            final = server.wait_status(run_id, "completed", 60)
            views = []
            while not views or views[-1]["run"]["revision"] < final["revision"]:
                view = watch.next_view(30)
                assert view is not None, "no view of the final state came"
                views.append(view)
    assert len(views) < final["revision"] / 2
    last = views[-1]
    assert last["run"]["status"] == "completed"
    nodes = {node["id"]: node for node in last["graph"]["nodes"]}
    assert nodes["tick"]["state"] == "completed"
    assert nodes["tick"]["visits"] == 40
    assert nodes["done"]["current"] is True
    assert {"from": "tick", "to": "done", "label": "$.left = 0"} in last["graph"]["edges"]


def test_runs_watch_pushes_the_list_and_counts(server: ServerProcess) -> None:
    """A list watcher sees a new run appear and its status change."""
    with server.client() as client, client.watch_runs(limit=10) as watch:
        first = watch.wait_for(lambda view: True, 30)
        assert first["runs"] == []
        run_id = client.start("builtin:demo")
        seen = watch.wait_for(
            lambda view: any(
                run["runId"] == run_id and run["status"] == "waiting" for run in view["runs"]
            ),
            30,
        )
    assert seen["counts"] == {"waiting": 1}


def test_watching_an_unknown_run_is_not_found(server: ServerProcess) -> None:
    """`run.watch` of a run that does not exist is refused with notFound."""
    with server.client() as client, pytest.raises(NotFoundError):
        client.watch_run("run_nope")


def test_history_logs_and_output_are_paged_reads(server: ServerProcess) -> None:
    """History pages by revision; logs list every attempt; output returns a node's value."""
    server.write_workflow("ticks", TICKS)
    with server.client() as client:
        run_id = client.start("ticks", {"n": 3}, project=server.project)
        final = client.wait(run_id, timeout=60)
        page = client.call("run.history", {"limit": 5}, run_id=run_id).body
        assert [event["revision"] for event in page["events"]] == [1, 2, 3, 4, 5]
        assert page["next"] == 5
        everything = client.history(run_id)
        assert len(everything) == final["revision"]
        logs = client.logs(run_id, node="tick")
        assert [log["text"] for log in logs] == ["tick 2\n", "tick 1\n", "tick 0\n"]
        output = client.node_output(run_id, "tick")
        assert output["output"]["left"] == 0
        assert output["visit"] == 3
        assert len(output["output"]["pad"]) == 60000
        assert client.call("run.logs", {"limit": 2}, run_id=run_id).body["next"] is not None
