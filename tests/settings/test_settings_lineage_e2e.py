"""How settings travel with a run's lineage, through real processes: child runs, restart,
fork and upgrade (the rules are docs/authoring.md, "Settings").

A child run has settings of its own (its workflow's defaults when it starts); a restart and
a fork keep (carry) the run's settings when the code they run accepts them, else start
from that code's defaults as a recorded change; an upgrade carries them, and is refused
when changed settings no longer match the new code's schema.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pi_workflows.client import RejectedError

from support.server import ServerProcess, wait_for

PARENT = """
from pi_workflows import Workflow, checkpoint, compute, edge, subworkflow

workflow = Workflow(
    "parent",
    start="first",
    nodes={
        "first": compute(lambda ctx: {"level": ctx.settings["level"]}),
        "kid": subworkflow("kid"),
        "ask": checkpoint(PROMPT),
        "last": compute(lambda ctx: {"level": ctx.settings["level"],
                                     "change": ctx.settings_change}),
    },
    edges=[edge("first", "kid"), edge("kid", "ask"), edge("ask", "last")],
    settings={"type": "object", "properties": {"level": {"type": "integer", "maximum": MAX,
              "default": 1}}, "required": ["level"]},
)
"""

KID = """
from pi_workflows import Workflow, checkpoint, compute, edge

workflow = Workflow(
    "kid",
    start="wait",
    nodes={
        "wait": checkpoint("child question"),
        "done": compute(lambda ctx: {"depth": ctx.settings["depth"]}),
    },
    edges=[edge("wait", "done")],
    settings={"type": "object", "properties": {"depth": {"type": "integer", "default": 7}}},
)
"""


def _write(server: ServerProcess, *, maximum: int = 5, prompt: str = "'Go on?'") -> None:
    server.write_workflow("parent", PARENT.replace("MAX", str(maximum)).replace("PROMPT", prompt))
    server.write_workflow("kid", KID)


def _level(patch_value: int) -> list[dict[str, Any]]:
    return [{"op": "replace", "path": "/level", "value": patch_value}]


def _answer(server: ServerProcess, run_id: str, value: Any = "ok") -> None:
    """Answer the checkpoint ``run_id`` waits on (once it waits on one)."""

    def asked() -> dict[str, Any] | None:
        view = server.run(run_id)
        return view if view["status"] == "waiting" and view["waitingOn"] else None

    view = wait_for(asked, 60, f"run {run_id} to wait on a checkpoint")
    with server.client() as client:
        client.answer_checkpoint(run_id, value, view["waitingOn"]["requestId"])


def _child(server: ServerProcess, parent: str) -> str:
    rows = wait_for(
        lambda: server.query("SELECT run_id FROM runs WHERE parent_run_id = ?", parent),
        60,
        f"the child of run {parent}",
    )
    assert len(rows) == 1
    return str(rows[0][0])


def _output(server: ServerProcess, run_id: str) -> Any:
    return server.wait_status(run_id, "completed")["output"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_child_run_has_settings_of_its_own(server: ServerProcess) -> None:
    """A subworkflow's child starts with its own workflow's defaults; changing the parent's
    settings does not reach it, changing its own does, and the parent's later nodes see the
    parent's."""
    _write(server)
    parent = server.start_run("parent")
    server.wait_status(parent, "waiting")
    child = _child(server, parent)
    server.wait_status(child, "waiting")
    with server.client() as client:
        assert client.settings(child)["settings"] == {"depth": 7}
        client.change_settings(parent, _level(4))
        assert client.settings(child)["settings"] == {"depth": 7}
        client.change_settings(child, [{"op": "replace", "path": "/depth", "value": 2}])
    _answer(server, child)
    assert _output(server, child) == {"depth": 2}
    _answer(server, parent)
    assert _output(server, parent) == {"level": 4, "change": 1}
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_restart_keeps_settings_the_code_accepts_and_else_starts_from_its_defaults(
    server: ServerProcess,
) -> None:
    """A completed run restarted on the same code keeps its changed settings; restarted
    after the schema changed so that they no longer match, it starts from the new defaults
    as a change recorded by the restart (and its event says why)."""
    _write(server)
    run_id = server.start_run("parent")
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.change_settings(run_id, _level(4))
    _answer(server, _child(server, run_id))
    _answer(server, run_id)
    assert _output(server, run_id) == {"level": 4, "change": 1}
    with server.client() as client:
        client.restart(run_id)
    newest = wait_for(
        lambda: server.query(
            "SELECT run_id FROM runs WHERE parent_run_id = ? AND status != 'completed'", run_id
        ),
        60,
        "the new round's child",
    )
    _answer(server, str(newest[0][0]))
    _answer(server, run_id)
    assert _output(server, run_id) == {"level": 4, "change": 1}
    _write(server, maximum=3)
    with server.client() as client:
        client.restart(run_id)
        settings = client.settings(run_id)
    assert (settings["change"], settings["settings"]) == (2, {"level": 1})
    assert settings["history"][-1]["changedBy"] == "restart"
    restarted = server.query(
        "SELECT data_json FROM events WHERE run_id = ? AND type = 'run.restarted'"
        " ORDER BY revision DESC LIMIT 1",
        run_id,
    )
    assert "do not match the workflow's settings schema" in json.loads(restarted[0][0])["settings"]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_fork_carries_its_sources_settings(server: ServerProcess) -> None:
    """A fork of an ended run starts with the source's current settings as its change 0,
    recorded as carried by the fork, and its attempts see them."""
    _write(server)
    run_id = server.start_run("parent")
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.change_settings(run_id, _level(3))
    _answer(server, _child(server, run_id))
    _answer(server, run_id)
    _output(server, run_id)
    with server.client() as client:
        fork = str(client.fork(run_id, "ask")["runId"])
        settings = client.settings(fork)
    assert (settings["change"], settings["settings"]) == (0, {"level": 3})
    assert settings["history"][0]["changedBy"] == "fork"
    _answer(server, fork)
    assert _output(server, fork) == {"level": 3, "change": 0}
    assert server.query(
        "SELECT COUNT(*) FROM node_attempts WHERE run_id = ? AND settings_change IS NULL", fork
    ) == [(2,)]  # first and kid, carried: they ran in the source
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_upgrade_carries_settings_and_is_refused_when_the_new_schema_does_not_take_them(
    server: ServerProcess,
) -> None:
    """A waiting run with changed settings is not upgraded to code whose settings schema
    refuses them (the reason is listed and nothing changes); to code that accepts them it
    is, and the settings stay as they were."""
    _write(server)
    run_id = server.start_run("parent")
    child = None
    server.wait_status(run_id, "waiting")
    child = _child(server, run_id)
    _answer(server, child)
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.change_settings(run_id, _level(4))
    _write(server, maximum=3, prompt="'Go on now?'")
    with server.client() as client, pytest.raises(RejectedError) as refused:
        client.upgrade(run_id)
    assert "do not match the new settings schema" in str(refused.value)
    assert server.query("SELECT settings_change FROM runs WHERE run_id = ?", run_id) == [(1,)]
    _write(server, maximum=5, prompt="'Go on now?'")
    with server.client() as client:
        client.upgrade(run_id)
        settings = client.settings(run_id)
    assert (settings["change"], settings["settings"]) == (1, {"level": 4})
    _answer(server, run_id)
    assert _output(server, run_id) == {"level": 4, "change": 1}
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_settings_nobody_chose_follow_the_code_defaults(server: ServerProcess) -> None:
    """A run whose settings were never changed takes the new code's defaults when it is
    upgraded (as a change made by the upgrade), and its next attempts see them."""
    _write(server)
    run_id = server.start_run("parent")
    _answer(server, _child(server, run_id))
    server.wait_status(run_id, "waiting")
    server.write_workflow(
        "parent",
        PARENT.replace("MAX", "9")
        .replace("PROMPT", "'Go on now?'")
        .replace('"default": 1', '"default": 6'),
    )
    with server.client() as client:
        client.upgrade(run_id)
        upgraded = client.settings(run_id)
    assert (upgraded["change"], upgraded["settings"]) == (1, {"level": 6})
    assert upgraded["history"][-1]["changedBy"] == "upgrade"
    _answer(server, run_id)
    assert _output(server, run_id) == {"level": 6, "change": 1}
    assert server.diagnose() == []
