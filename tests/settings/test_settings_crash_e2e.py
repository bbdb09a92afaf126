"""A server killed (as SIGKILL would) at the commit points of a settings change, end to end.

The server dies just before or just after it commits ``run.changeSettings`` (its receipt
with the change), or a ``settings_route``'s evaluation again (inside the runner's
``node.finish``). A fresh server must then apply the change exactly once when the client
sends the same command again (adopting the receipt when it had committed), finish the run
with the settings the change made, and leave ``state diagnose`` clean.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.client import ClientError

from support.server import ServerProcess, wait_for

WORKFLOW = """
import json, time
from pathlib import Path
from pi_workflows import Workflow, checkpoint, compute, edge, settings_route, switch

def route(ctx):
    with open(ctx.input["witness"], "a") as out:
        out.write(json.dumps({"change": ctx.settings_change, "mode": ctx.settings["mode"]}) + "\\n")
    gate = Path(ctx.input["gate"])
    deadline = time.monotonic() + 60
    while ctx.settings_change == 0 and not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return {"route": ctx.settings["mode"]}

workflow = Workflow(
    "crashy",
    start=START,
    nodes={
        "ask": checkpoint("go?"),
        "pick": settings_route(route),
        "fast": compute(lambda ctx: {"took": "fast", "change": ctx.settings_change}),
        "slow": compute(lambda ctx: {"took": "slow", "change": ctx.settings_change}),
    },
    edges=[edge("ask", "pick"),
           switch("pick", on="$.route", cases={"fast": "fast", "slow": "slow"})],
    settings={"type": "object", "properties": {"mode": {"enum": ["slow", "fast"],
              "default": "slow"}}, "required": ["mode"]},
)
"""

FAST = [{"op": "replace", "path": "/mode", "value": "fast"}]
CLIENT = "settings-crash-client"


def _answer(server: ServerProcess, run_id: str) -> None:
    view = server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.answer_checkpoint(run_id, "go", view["waitingOn"]["requestId"], wait=None)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("when", ["before_commit", "after_commit"])
def test_a_change_survives_a_server_killed_at_its_commit(
    server_process: ServerProcess, tmp_path: Path, when: str
) -> None:
    """Killed at ``command.run.changeSettings``: the same command sent again to a fresh
    server is applied once (change 1, one row, one event), and the run goes on with it."""
    server = server_process.start(faults=f"command.run.changeSettings.{when}=exit")
    server.write_workflow("crashy", WORKFLOW.replace("START", "'ask'"))
    run_input = {"witness": str(tmp_path / "w"), "gate": str(tmp_path / "gate")}
    run_id = server.start_run("crashy", run_input)
    server.wait_status(run_id, "waiting")
    key = "settings-1"
    with server.client(client_id=CLIENT) as client, pytest.raises(ClientError):
        client.change_settings(run_id, FAST, idempotency_key=key)
    assert server.wait_exit(30) != 0
    server.start()
    with server.client(client_id=CLIENT) as client:
        receipt = client.change_settings(run_id, FAST, idempotency_key=key)
        assert receipt["change"] == 1
        assert receipt.adopted is (when == "after_commit")
        again = client.change_settings(run_id, FAST, idempotency_key=key)
        assert again.adopted
        assert again["change"] == 1
    assert server.query("SELECT COUNT(*) FROM run_settings WHERE run_id = ?", run_id) == [(2,)]
    assert server.query(
        "SELECT COUNT(*) FROM events WHERE run_id = ? AND type = 'settings.changed'", run_id
    ) == [(1,)]
    _answer(server, run_id)
    assert server.wait_status(run_id, "completed")["output"] == {"took": "fast", "change": 1}
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("when", ["before_commit", "after_commit"])
def test_a_reevaluation_survives_a_server_killed_at_its_commit(
    server_process: ServerProcess, tmp_path: Path, when: str
) -> None:
    """Killed while committing a ``settings_route``'s evaluation again (the runner's
    ``node.finish``): the next server recovers the run, a new attempt evaluates the route
    with the changed settings, and the run takes the route they name, once."""
    server = server_process.start(faults=f"runner.node.finish.{when}=exit")
    source = WORKFLOW.replace("START", "'pick'").replace('"ask": checkpoint("go?"),', "")
    server.write_workflow("crashy", source.replace('edge("ask", "pick"),', ""))
    witness, gate = tmp_path / "w", tmp_path / "gate"
    run_id = server.start_run("crashy", {"witness": str(witness), "gate": str(gate)})
    wait_for(witness.exists, 60, "the route to evaluate")
    with server.client() as client:
        client.change_settings(run_id, FAST)
    gate.touch()
    assert server.wait_exit(30) != 0
    server.start()
    view = server.wait_status(run_id, "completed", timeout=90)
    assert view["output"] == {"took": "fast", "change": 1}
    seen: list[dict[str, Any]] = [json.loads(line) for line in witness.read_text().splitlines()]
    assert seen[0] == {"change": 0, "mode": "slow"}
    assert seen[-1] == {"change": 1, "mode": "fast"}
    assert server.query(
        "SELECT COUNT(*) FROM node_attempts WHERE run_id = ? AND node_id = 'pick'"
        " AND status = 'completed'",
        run_id,
    ) == [(1,)]
    assert server.diagnose() == []
