"""Session bookkeeping crossing a working runner, through a real server and real runners.

The review's crossing: a run started from a Pi session notifies, then runs a slow action;
the session reports the notification as present while the action runs. That report must
not make the runner's next proposal conflict (the revision rule, ``store/runs.py``), and
if the server ever refuses a proposal that carries an effect's receipt, the receipt is kept
and the runner's exit is not a crash (``refused``). Witness files written by the workflow
prove each body ran exactly once.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from support.server import ServerProcess, wait_for

SESSION = "session-r"

FLOW = """
import time
from pathlib import Path
from pi_workflows import (Workflow, action, agent, compute, edge, idempotent_effect,
                          manual_effect, notify, shell, switch, Rejected)


def _wait_gate(gate, name):
    (gate / f"{name}.started").write_text("1")
    while not (gate / f"{name}.go").exists():
        time.sleep(0.01)


def body(ctx):
    gate = Path(ctx.input["gate"])
    _wait_gate(gate, "act")
    with open(gate / "applied", "a") as out:
        out.write(ctx.effect_key + "\\n")
    return {"applied": True}


def command(ctx):
    gate = ctx.input["gate"]
    return ["sh", "-c", f"touch {gate}/act.started; while [ ! -e {gate}/act.go ]; do sleep 0.01;"
            f" done; echo {ctx.effect_key} >> {gate}/applied; echo done"]


def check(output, ctx):
    gate = Path(ctx.input["gate"])
    _wait_gate(gate, "validate")
    if output.get("title") != "ok":
        raise Rejected("the title must be ok")


workflow = Workflow(
    "flow",
    start="hello",
    nodes={
        "hello": notify(lambda ctx: "Starting"),
        "route": compute(lambda ctx: {"body": ctx.input["body"]}),
        "act": action(body, effect=manual_effect("charge")),
        "act_idem": action(body, effect=idempotent_effect("charge")),
        "act_shell": shell(command, effect=manual_effect("charge")),
        "step": agent(prompt="Write a title", expected_output='{"title": "ok"}', validate=check),
        "done": compute(lambda ctx: {"ok": True}),
    },
    edges=[
        edge("hello", "route"),
        switch("route", on="$.body", cases={"manual": "act", "idempotent": "act_idem",
                                            "shell": "act_shell", "step": "step"}),
        edge("act", "done"), edge("act_idem", "done"), edge("act_shell", "done"),
        edge("step", "done"),
    ],
)
"""


def _start(server: ServerProcess, gate: Path, body: str) -> str:
    server.write_workflow("flow", FLOW)
    return server.start_run("flow", {"gate": str(gate), "body": body}, origin_session=SESSION)


def _report_notification(server: ServerProcess) -> list[str]:
    """Attach as the session's coordinator and report every listed message present."""
    with server.client() as client:
        epoch = client.attach_session(SESSION)
        view = client.get_session(SESSION)
        present = {m["workflowMessageId"]: f"entry-{i}" for i, m in enumerate(view["messages"])}
        assert present, "the notification was not in the session's view"
        return list(client.report_messages(SESSION, epoch, present)["sent"])


def _runner_outcomes(server: ServerProcess, run_id: str) -> list[str]:
    """Every runner's outcome, once each exit is recorded (a run can end a moment before)."""

    def outcomes() -> list[str] | None:
        rows = server.query(
            "SELECT outcome FROM run_runners WHERE run_id = ? ORDER BY runner_epoch", run_id
        )
        found = [row[0] for row in rows]
        return found if found and None not in found else None

    return list(wait_for(outcomes, 30, f"the runners of {run_id} to be recorded exited"))


def _applied(gate: Path) -> list[str]:
    path = gate / "applied"
    return path.read_text().split() if path.exists() else []


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("body", ["manual", "idempotent", "shell"])
def test_a_session_report_mid_action_never_breaks_the_working_runner(
    server: ServerProcess, tmp_path: Path, body: str
) -> None:
    """The notification is reported present while the action body runs: the runner settles
    its effect and completes the run with its first runner; the body ran once."""
    gate = tmp_path / "gate"
    gate.mkdir()
    run_id = _start(server, gate, body)
    wait_for((gate / "act.started").exists, 30, "the action to start")
    assert len(_report_notification(server)) == 1
    (gate / "act.go").write_text("1")
    view = server.wait_status(run_id, {"completed", "failed", "paused", "ambiguous"})
    assert view["status"] == "completed", view
    assert len(_applied(gate)) == 1
    assert _runner_outcomes(server, run_id) == ["exited"]
    assert [e["status"] for e in view["effects"]] == ["applied"]
    assert server.query("SELECT COUNT(*) FROM events WHERE type = 'effect.kept'") == [(0,)]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_an_update_during_validation_does_not_reject_a_valid_submission(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A progress update on the step arrives while the runner validates a valid submission:
    the submission is accepted by that runner and the run completes."""
    gate = tmp_path / "gate"
    gate.mkdir()
    run_id = _start(server, gate, "step")
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        request_id = client.get_run(run_id)["waitingOn"]["requestId"]
    answer: dict[str, Any] = {}

    def submit() -> None:
        with server.client(timeout=60) as client:
            answer["receipt"] = client.submit(request_id, {"title": "ok"})

    submitter = threading.Thread(target=submit)
    submitter.start()
    wait_for((gate / "validate.started").exists, 30, "validation to start")
    with server.client() as client:
        client.call(
            "interaction.update", {"requestId": request_id, "body": {"pct": 50}}, run_id=run_id
        )
    (gate / "validate.go").write_text("1")
    submitter.join(60)
    assert answer["receipt"]["status"] == "accepted"
    view = server.wait_status(run_id, {"completed", "failed", "paused", "waiting"})
    assert view["status"] == "completed", view
    assert _runner_outcomes(server, run_id)[-1] == "exited"
    assert server.query(
        "SELECT COUNT(*) FROM events WHERE run_id = ? AND type = 'interaction.update'", run_id
    ) == [(1,)]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("body", ["manual", "idempotent"])
def test_without_the_rule_a_refused_settle_keeps_its_receipt_and_is_no_crash(
    server_process: ServerProcess, tmp_path: Path, body: str
) -> None:
    """With the rule turned off (a fault flag), the report makes the runner's ``effect.settle``
    conflict. The server keeps the receipt it carried, records the runner as ``refused`` (not
    crashed), and the next runner adopts the stored outcome: nothing becomes ambiguous and
    the body never runs twice."""
    server = server_process.start(faults="runs.presentation_moves_execution=flag")
    gate = tmp_path / "gate"
    gate.mkdir()
    run_id = _start(server, gate, body)
    wait_for((gate / "act.started").exists, 30, "the action to start")
    _report_notification(server)
    (gate / "act.go").write_text("1")
    view = server.wait_status(run_id, {"completed", "failed", "paused", "ambiguous"})
    assert view["status"] == "completed", view
    assert len(_applied(gate)) == 1
    assert _runner_outcomes(server, run_id) == ["refused", "exited"]
    assert [e["status"] for e in view["effects"]] == ["applied"]
    kept = server.query(
        "SELECT COUNT(*) FROM events WHERE run_id = ? AND type = 'effect.kept'", run_id
    )
    assert kept == [(1,)]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_without_the_rule_a_refused_validation_is_validated_again_not_rejected(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """With the rule turned off, an update during validation makes the validating runner's
    acceptance conflict: its exit is ``refused``, the valid submission is not rejected, and
    the next runner validates the same submission again and accepts it."""
    server = server_process.start(faults="runs.presentation_moves_execution=flag")
    gate = tmp_path / "gate"
    gate.mkdir()
    run_id = _start(server, gate, "step")
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        request_id = client.get_run(run_id)["waitingOn"]["requestId"]
    answer: dict[str, Any] = {}

    def submit() -> None:
        with server.client(timeout=60) as client:
            answer["receipt"] = client.submit(request_id, {"title": "ok"})

    submitter = threading.Thread(target=submit)
    submitter.start()
    wait_for((gate / "validate.started").exists, 30, "validation to start")
    with server.client() as client:
        client.call(
            "interaction.update", {"requestId": request_id, "body": {"pct": 50}}, run_id=run_id
        )
    (gate / "validate.go").write_text("1")
    submitter.join(60)
    assert answer["receipt"]["status"] == "accepted"
    view = server.wait_status(run_id, {"completed", "failed", "paused", "waiting"})
    assert view["status"] == "completed", view
    outcomes = _runner_outcomes(server, run_id)
    assert "refused" in outcomes
    assert outcomes[-1] == "exited"
    assert server.query(
        "SELECT status FROM interactive_submissions WHERE request_id = ?", request_id
    ) == [("accepted",)]
    assert server.diagnose() == []
