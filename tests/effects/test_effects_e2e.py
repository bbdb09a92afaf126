"""Managed effects through the real server and runners: dedupe, uncertainty, operator recovery."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pi_workflows.client import RejectedError

from support.server import ServerProcess, wait_for

APPEND = """
import os
from pathlib import Path
from pi_workflows import Workflow, action, compute, edge, {kind}

LEDGER = Path({ledger!r})
KEYS = Path({keys!r})
KILL_ONCE = Path({kill_once!r})

def append(ctx):
    with KEYS.open("a") as keys:
        keys.write(ctx.effect_key + "\\n")
    if {kill_before!r} and not KILL_ONCE.exists():
        KILL_ONCE.write_text("x")
        os.kill(os.getpid(), 9)
    with LEDGER.open("a") as ledger:
        ledger.write("line\\n")
    return {{"lines": len(LEDGER.read_text().splitlines())}}

workflow = Workflow(
    "ledger",
    start="append",
    nodes={{
        "append": action(append, effect={kind}("ledger-append")),
        "after": compute(lambda ctx: {{"seen": ctx.outputs["append"]}}),
    }},
    edges=[edge("append", "after")],
)
"""


def _ledger(server: ServerProcess, tmp_path: Path, kind: str, kill_before: bool = False) -> None:
    server.write_workflow(
        "ledger",
        APPEND.format(
            kind=kind,
            ledger=str(tmp_path / "ledger.txt"),
            keys=str(tmp_path / "keys.txt"),
            kill_once=str(tmp_path / "killed"),
            kill_before=kill_before,
        ),
    )


def _lines(tmp_path: Path, name: str) -> list[str]:
    path = tmp_path / name
    return path.read_text().splitlines() if path.exists() else []


def test_a_settled_effect_is_not_run_again_when_its_node_reruns(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: the runner dies after effect.settle commits; the rerun adopts the receipt."""
    _ledger(server_process, tmp_path, "manual_effect")
    server_process.start(faults="supervisor.kill_runner_after.effect.settle=flag")
    run_id = server_process.start_run("ledger")
    view = server_process.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert view["status"] == "completed", view
    assert _lines(tmp_path, "ledger.txt") == ["line"]
    assert view["output"] == {"seen": {"lines": 1}}
    assert [e["status"] for e in view["effects"]] == ["applied"]
    appends = [a for a in view["attempts"] if a["nodeId"] == "append"]
    assert [a["status"] for a in appends] == ["interrupted", "completed"]
    assert server_process.diagnose() == []


def test_a_receipt_survives_killing_both_the_runner_and_the_server(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """The server dies right after storing the receipt; after a restart the body never reruns."""
    _ledger(server_process, tmp_path, "manual_effect")
    server_process.start(faults="runner.effect.settle.after_commit=exit")
    run_id = server_process.start_run("ledger")
    assert server_process.wait_exit() == 137
    server_process.remember_children()
    server_process.start()
    view = server_process.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert view["status"] == "completed", view
    assert _lines(tmp_path, "ledger.txt") == ["line"]
    assert server_process.diagnose() == []


def test_a_manual_effect_killed_mid_flight_waits_for_an_operator(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A manual body that may have run is ambiguous; nothing reruns it until it is resolved."""
    _ledger(server, tmp_path, "manual_effect", kill_before=True)
    run_id = server.start_run("ledger")
    view = server.wait_status(run_id, {"ambiguous", "completed", "failed"}, 60)
    assert view["status"] == "ambiguous"
    assert view["parkReason"] == "effectAmbiguous"
    [effect] = view["effects"]
    assert effect["status"] == "ambiguous"
    with server.client() as client, pytest.raises(RejectedError, match="ambiguous"):
        client.resume(run_id)
    with server.client() as client, pytest.raises(RejectedError, match="ambiguous"):
        client.restart(run_id)
    server.kill()
    server.start()
    assert server.run(run_id)["status"] == "ambiguous"
    assert len(_lines(tmp_path, "keys.txt")) == 1
    with server.client() as client:
        client.call(
            "effect.resolve",
            {"effectId": effect["effectId"], "resolution": "applied", "result": {"lines": 7}},
            idempotency_key="resolve-1",
        )
        client.resume(run_id)
    done = server.wait_status(run_id, {"completed", "failed", "paused", "ambiguous"}, 60)
    assert done["status"] == "completed", done
    assert done["output"] == {"seen": {"lines": 7}}
    assert len(_lines(tmp_path, "keys.txt")) == 1
    assert _lines(tmp_path, "ledger.txt") == []
    assert server.diagnose() == []


def test_an_idempotent_effect_killed_mid_flight_reruns_with_the_same_key(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The rerun of an idempotent body sees exactly the effect key of the first try."""
    _ledger(server, tmp_path, "idempotent_effect", kill_before=True)
    run_id = server.start_run("ledger")
    view = server.wait_status(run_id, {"completed", "failed", "paused", "ambiguous"}, 60)
    assert view["status"] == "completed", view
    keys = _lines(tmp_path, "keys.txt")
    assert len(keys) == 2
    assert keys[0] == keys[1]
    with server.client() as client:
        assert [e["effectKey"] for e in client.list_effects(run_id)] == [keys[0]]
    assert _lines(tmp_path, "ledger.txt") == ["line"]
    assert server.diagnose() == []


def test_cancelling_during_an_applying_effect_marks_it_ambiguous(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Cancellation cannot know whether the body ran: the effect becomes ambiguous."""
    started = tmp_path / "started"
    server.write_workflow(
        "hang",
        f"""
        import time
        from pathlib import Path
        from pi_workflows import Workflow, action, manual_effect

        def hang(ctx):
            Path({str(started)!r}).write_text("x")
            while True:
                time.sleep(0.05)

        workflow = Workflow(
            "hang",
            start="hang",
            nodes={{"hang": action(hang, effect=manual_effect("hang"), timeout=600)}},
            edges=[],
        )
        """,
    )
    run_id = server.start_run("hang")
    wait_for(started.exists, 30, "the body to start")
    with server.client() as client:
        client.cancel(run_id)
    view = server.wait_status(run_id, "cancelled")
    assert [e["status"] for e in view["effects"]] == ["ambiguous"]


def test_cancelling_before_an_effect_starts_marks_it_cancelled(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """A reset idempotent effect whose run is cancelled while queued is cancelled, never rerun."""
    go, gate, runs = tmp_path / "go", tmp_path / "gate", tmp_path / "body-runs"
    server_process.write_workflow(
        "once",
        f"""
        import os, time
        from pathlib import Path
        from pi_workflows import Workflow, action, idempotent_effect

        def body(ctx):
            with Path({str(runs)!r}).open("a") as f:
                f.write("run\\n")
            while not Path({str(go)!r}).exists():
                time.sleep(0.02)
            os.kill(os.getpid(), 9)

        workflow = Workflow(
            "once",
            start="a",
            nodes={{"a": action(body, effect=idempotent_effect("once"))}},
            edges=[],
        )
        """,
    )
    server_process.write_workflow(
        "blocker",
        f"""
        import time
        from pathlib import Path
        from pi_workflows import Workflow, compute

        def block(ctx):
            while not Path({str(gate)!r}).exists():
                time.sleep(0.02)
            return 1

        workflow = Workflow("blocker", start="b", nodes={{"b": compute(block)}}, edges=[])
        """,
    )
    server_process.start(PI_WORKFLOWS_MAX_RUNNERS="1")
    run_id = server_process.start_run("once")
    wait_for(runs.exists, 30, "the body to start")
    blocker = server_process.start_run("blocker")  # queued behind the only slot
    go.write_text("die now")
    wait_for(lambda: server_process.run(blocker)["status"] == "running", 30, "the blocker to run")
    view = server_process.run(run_id)
    assert view["status"] == "queued"
    assert [e["status"] for e in view["effects"]] == ["pending"]
    with server_process.client() as client:
        client.cancel(run_id)
    gate.write_text("open")
    server_process.wait_status(blocker, "completed")
    view = server_process.run(run_id)
    assert view["status"] == "cancelled"
    assert [e["status"] for e in view["effects"]] == ["cancelled"]
    assert _lines(tmp_path, "body-runs") == ["run"]


def test_a_shell_receipt_records_command_exit_code_signal_and_duration(
    server: ServerProcess,
) -> None:
    """The shell node's effect attempt stores its command, exit code, signal and duration."""
    server.write_workflow(
        "sh",
        """
        import sys
        from pi_workflows import Workflow, idempotent_effect, shell

        workflow = Workflow(
            "sh",
            start="say",
            nodes={"say": shell([sys.executable, "-c", "print('hi')"],
                                effect=idempotent_effect("print-hi"))},
            edges=[],
        )
        """,
    )
    run_id = server.start_run("sh")
    view = server.wait_status(run_id, {"completed", "failed"}, 60)
    assert view["status"] == "completed", view
    [(receipt_json,)] = server.query(
        "SELECT a.receipt_json FROM effect_attempts a JOIN effects e USING (effect_id)"
        " WHERE e.run_id = ?",
        run_id,
    )
    receipt = json.loads(receipt_json)
    assert receipt["exitCode"] == 0
    assert receipt["signal"] is None
    assert isinstance(receipt["durationMs"], int)
    assert receipt["command"][-1] == "print('hi')"
