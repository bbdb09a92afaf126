"""Kill a live server (as SIGKILL would) at the commit points of the main path, end to end.

Each case arms one fault point in the first server process. Whatever dies there, a fresh
server must finish the run with every node completed exactly once, the idempotent effect's
body seen with only one key, the client's receipts intact, and ``state diagnose`` clean.
Every declared commit point (these and all the others) is crashed by an exception and by a
process exit in ``tests/store/test_commit_points.py``; this matrix adds the real processes.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.client import ClientError, RejectedError

from support.server import ServerProcess, wait_for

WORKFLOW = """
from pathlib import Path
from pi_workflows import (Rejected, Workflow, action, checkpoint, compute, edge,
                          idempotent_effect)

LEDGER = Path({ledger!r})

def record(ctx):
    with LEDGER.open("a") as ledger:
        ledger.write(ctx.effect_key + "\\n")
    return {{"recorded": True}}

def must_go(answer, ctx):
    if answer.get("go") is not True:
        raise Rejected("say go")

workflow = Workflow(
    "matrix",
    start="prepare",
    nodes={{
        "prepare": compute(lambda ctx: {{"n": 1}}),
        "ask": checkpoint(lambda ctx: {{"question": "go?"}}, validate=must_go),
        "record": action(record, effect=idempotent_effect("ledger")),
        "finish": compute(lambda ctx: {{"answer": ctx.outputs["ask"], "n": 2}}),
    }},
    edges=[edge("prepare", "ask"), edge("ask", "record"), edge("record", "finish")],
)
"""

POINTS = [
    "command.run.start",
    "runners.launch",
    "runners.ready",
    "runner.node.start",
    "runner.node.finish",
    "runner.node.wait",
    "command.checkpoint.answer",
    "runner.interaction.reject",
    "runner.effect.reserve",
    "runner.effect.settle",
    "runners.exited",
]
CLIENT = "matrix-client"


def _restart_if_dead(server: ServerProcess) -> bool:
    assert server.process is not None
    if server.process.poll() is None:
        return False
    assert server.process.returncode == 137, server.tail()
    server.remember_children()
    server.start()
    return True


def _command(server: ServerProcess, call: Any) -> Any:
    """Send a command; if the armed server died under it, restart and retry the same key."""
    for _ in range(3):
        try:
            with server.client(client_id=CLIENT, timeout=10) as client:
                return call(client)
        except ClientError:
            try:
                server.wait_exit(30)
            except subprocess.TimeoutExpired:
                raise
            _restart_if_dead(server)
    raise AssertionError("the command never went through")


def _rejection(client: Any, run_id: str) -> RejectedError:
    """The refused answer's error (a refusal is the expected outcome, not a failure)."""
    try:
        client.answer_checkpoint(run_id, {"go": False}, idempotency_key="refused")
    except RejectedError as exc:
        if exc.code == "validationRejected":
            return exc
        raise
    raise AssertionError("the refused answer was accepted")


def _settled(server: ServerProcess, run_id: str, wanted: str) -> bool:
    if _restart_if_dead(server):
        return False
    try:
        return str(server.run(run_id)["status"]) == wanted
    except ClientError:
        return False


@pytest.mark.parametrize("phase", ["before_commit", "after_commit"])
@pytest.mark.parametrize("point", POINTS)
def test_a_server_killed_at_a_commit_point_loses_nothing(
    server_process: ServerProcess, tmp_path: Path, point: str, phase: str
) -> None:
    """Window: the server process exits just before / after the commit named ``point``."""
    ledger = tmp_path / "ledger.txt"
    server = server_process
    server.write_workflow("matrix", WORKFLOW.format(ledger=str(ledger)))
    server.start(faults=f"{point}.{phase}=exit")
    first = _command(
        server,
        lambda c: c.start_run("matrix", {}, project_dir=server.project, idempotency_key="start"),
    )
    run_id = str(first["runId"])
    wait_for(lambda: _settled(server, run_id, "waiting"), 60, "the run to wait")
    refused = _command(server, lambda c: _rejection(c, run_id))
    assert refused.message == "say go"
    wait_for(lambda: _settled(server, run_id, "waiting"), 60, "the run to wait again")
    answered = _command(
        server, lambda c: c.answer_checkpoint(run_id, {"go": True}, idempotency_key="answer")
    )
    wait_for(lambda: _settled(server, run_id, "completed"), 60, "the run to complete")
    view = server.run(run_id)
    assert view["output"] == {"answer": {"go": True}, "n": 2}
    completed = Counter(a["nodeId"] for a in view["attempts"] if a["status"] == "completed")
    assert completed == {"prepare": 1, "ask": 1, "record": 1, "finish": 1}
    keys = ledger.read_text().splitlines()
    assert len(set(keys)) == 1, keys
    if point == "runner.effect.settle" and phase == "after_commit":
        assert len(keys) == 1
    assert [e["status"] for e in view["effects"]] == ["applied"]
    # Receipts are intact: repeating both commands adopts the stored receipts.
    with server.client(client_id=CLIENT) as client:
        again = client.start_run("matrix", {}, project_dir=server.project, idempotency_key="start")
        assert again["runId"] == run_id
        assert again.adopted
        repeat = client.answer_checkpoint(run_id, {"go": True}, idempotency_key="answer")
        assert repeat.adopted
        assert repeat["requestId"] == answered["requestId"]
        assert _rejection(client, run_id).message == "say go"  # the refusal is durable too
    assert server.diagnose() == []
    assert len(server.query("SELECT run_id FROM runs")) == 1
    # The fault point was really hit: exactly one server died and one replaced it.
    assert server.query("SELECT epoch FROM server_state") == [(2,)]
