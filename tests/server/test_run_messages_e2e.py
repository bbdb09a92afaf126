"""Runs that message runs (``ctx.signal``, ``ctx.children``) through a real server and
real runners: a sent event wakes its target's ``wait_event`` once, also when the sending
runner is killed right after the send committed; a send to an unknown run is refused to
the callback with one line; a later node lists the child runs of a fan_out."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

LISTENER = """
from pi_workflows import Workflow, compute, edge, wait_event, minutes
workflow = Workflow("listener", start="go", nodes={
    "go": wait_event("go", timeout=minutes(5)),
    "done": compute(lambda ctx: {"got": ctx.outputs["go"]}),
}, edges=[edge("go", "done")])
"""
SENDER = """
from pi_workflows import Workflow, compute

def send(ctx):
    sent = ctx.signal(ctx.input["target"], "go", {"from": ctx.run_id})
    try:
        ctx.signal("run_does_not_exist", "go")
        refused = None
    except ValueError as exc:
        refused = str(exc)
    return {"sent": sent, "refused": refused}

workflow = Workflow("sender", start="send", nodes={"send": compute(send)})
"""
LEAF = """
from pi_workflows import Workflow, compute
workflow = Workflow("leaf", start="one", nodes={"one": compute(lambda ctx: ctx.input)})
"""
PARENT = """
from pi_workflows import Workflow, compute, edge, fan_out

def listed(ctx):
    children = ctx.children("each")
    try:
        children[0].signal("late")
        refused = None
    except ValueError as exc:
        refused = str(exc)
    return {
        "ids": [c.run_id for c in children],
        "items": [c.item for c in children],
        "statuses": [c.status for c in children],
        "none": ctx.children("list"),
        "refused": refused,
    }

workflow = Workflow("parent", start="each", nodes={
    "each": fan_out("leaf", items=lambda ctx: [1, 2, 3], input=lambda ctx, n: {"n": n}),
    "list": compute(listed),
}, edges=[edge("each", "list")])
"""


def _project(server: ServerProcess) -> ServerProcess:
    for name, source in (("listener", LISTENER), ("sender", SENDER), ("leaf", LEAF),
                         ("parent", PARENT)):  # fmt: skip
        server.write_workflow(name, source)
    return server


def _signals(server: ServerProcess, run_id: str) -> list[tuple[str, str]]:
    return [
        (str(r[0]), str(r[1]))
        for r in server.query("SELECT name, sent_by FROM run_signals WHERE run_id = ?", run_id)
    ]


def test_a_sent_event_wakes_its_target_once(tmp_path: Path) -> None:
    """The listener waits for ``go``; the sender's event wakes it with the sender's data;
    the sender's effect is applied; a send to an unknown run was one line to the code."""
    server = _project(ServerProcess(tmp_path)).start()
    try:
        target = server.start_run("listener")
        server.wait_status(target, "waiting")
        sender = server.start_run("sender", {"target": target})
        sent = server.wait_status(sender, "completed")["output"]
        assert sent["sent"]["runId"] == target
        assert sent["sent"]["adopted"] is False
        assert "run_does_not_exist" in sent["refused"]
        assert "\n" not in sent["refused"]
        done = server.wait_status(target, "completed")
        assert done["output"] == {"got": {"from": sender}}
        assert _signals(server, target) == [("go", f"run:{sender}")]
        effects = server.run(sender)["effects"]
        assert sorted(e["status"] for e in effects) == ["applied", "rejected"]
        assert server.diagnose() == []
    finally:
        server.cleanup()


def test_a_runner_killed_after_its_send_committed_does_not_send_twice(tmp_path: Path) -> None:
    """Window: the sending runner dies after ``signal.send`` commits, before it hears the
    reply; the node runs again in a new runner, whose ``ctx.signal`` adopts the sent event
    (``adopted``) instead of sending another: the target has exactly one."""
    server = _project(ServerProcess(tmp_path))
    server.start(faults="supervisor.kill_runner_after.signal.send=flag:1")
    try:
        target = server.start_run("listener")
        server.wait_status(target, "waiting")
        sender = server.start_run("sender", {"target": target})
        view = server.wait_status(sender, "completed")
        assert view["output"]["sent"]["adopted"] is True
        assert [a["status"] for a in view["attempts"]] == ["interrupted", "completed"]
        assert server.wait_status(target, "completed")["output"] == {"got": {"from": sender}}
        assert _signals(server, target) == [("go", f"run:{sender}")]
        assert server.diagnose() == []
    finally:
        server.cleanup()


def test_a_later_node_lists_the_child_runs_of_a_fan_out(tmp_path: Path) -> None:
    """``ctx.children("each")`` gives the three child runs in item order, with the run ids
    the fan_out's output names and their end status; a node that started no children
    lists none; signalling a child that has ended is refused with one line."""
    server = _project(ServerProcess(tmp_path)).start()
    try:
        parent = server.start_run("parent")
        view = server.wait_status(parent, "completed")
        listed = view["output"]
        with server.client() as client:
            each = client.node_output(parent, "each")["output"]
        assert listed["ids"] == [child["runId"] for child in each]
        assert listed["items"] == [0, 1, 2]
        assert listed["statuses"] == ["completed"] * 3
        assert listed["none"] == []
        assert "a run that has ended takes no events" in listed["refused"]
    finally:
        server.cleanup()
