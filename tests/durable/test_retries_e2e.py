"""Retry policies through real processes: tries of one visit, durable delays, exhaustion.

A flaky node counts its tries in a witness file outside the database. Each test checks the
attempts the server recorded (same visit, tries numbered, ``retried``/``exhausted``), what
the witness saw (how many times the body ran, under which effect key), that a delay holds
no runner and no claim, and that ``state diagnose`` is clean.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from support.durable import attempts, holds_nothing
from support.server import ServerProcess, wait_for, written_pid

FLAKY = """
import json
from pathlib import Path
from pi_workflows import (Workflow, action, compute, edge, idempotent_effect, retry, seconds,
                          shell, switch)


def flaky(ctx):
    witness = Path(ctx.input["witness"])
    seen = witness.read_text().splitlines() if witness.exists() else []
    with open(witness, "a") as out:
        out.write(json.dumps({"key": getattr(ctx, "effect_key", None), "visit": ctx.visit}) + "\\n")
    if len(seen) < ctx.input["fail"]:
        raise RuntimeError(f"flaky try {len(seen) + 1}")
    return {"tries": len(seen) + 1}


POLICY = retry(attempts=ATTEMPTS, delay=DELAY, backoff=2.0, jitter=0,
               on=ON, on_exhausted="EXHAUSTED")

workflow = Workflow(
    "flaky",
    start="call",
    nodes={
        "call": action(flaky, effect=idempotent_effect("call"), retry=POLICY),
        "done": compute(lambda ctx: {"result": ctx.outputs["call"]}),
        "gave_up": compute(lambda ctx: {"error": ctx.results["call"]["error"]}),
    },
    edges=[switch("call", on="$result.outcome",
                  cases={"ok": "done", "failed": "gave_up", "timed_out": "gave_up"})],
)
"""


def _flaky(
    server: ServerProcess,
    *,
    attempts: int = 3,
    delay: float = 0.2,
    on: tuple[str, ...] = ("failed", "timed_out"),
    exhausted: str = "fail",
) -> None:
    source = (
        FLAKY.replace("ATTEMPTS", str(attempts))
        .replace("DELAY", repr(delay))
        .replace("ON", repr(on))
        .replace("EXHAUSTED", exhausted)
    )
    server.write_workflow("flaky", source)


def _tries(witness: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in witness.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_flaky_action_is_tried_again_under_the_same_effect_key(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Two failures then a success: three attempts of visit 1 (tries 1-3), the first two
    ``retried``, the body ran three times with one effect key, the run completed."""
    _flaky(server, attempts=4, delay=0.3)
    witness = tmp_path / "tries.jsonl"
    run_id = server.start_run("flaky", {"witness": str(witness), "fail": 2})
    done = server.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert done["status"] == "completed", done
    assert done["output"] == {"result": {"tries": 3}}
    assert attempts(server, run_id, "call") == [
        (1, 1, 1, "retried", "failed"),
        (1, 2, 2, "retried", "failed"),
        (1, 3, 3, "completed", None),
    ]
    tries = _tries(witness)
    assert len(tries) == 3
    assert len({t["key"] for t in tries}) == 1
    assert {t["visit"] for t in tries} == {1}
    assert server.query("SELECT status, attempt_count FROM effects WHERE run_id = ?", run_id) == [
        ("applied", 3)
    ]
    [(steps,)] = server.query("SELECT step_count FROM runs WHERE run_id = ?", run_id)
    assert steps == 2  # call and done: a retry is not a step
    with server.client() as client:
        history = [e["type"] for e in client.history(run_id)]
    assert history.count("node.retried") == 2
    # The backoff: 0.3 s, then 0.3 s x 2 (no jitter), asked by the runner and kept durably.
    delays = server.query(
        "SELECT json_extract(data_json, '$.delayMs') FROM events WHERE run_id = ?"
        " AND type = 'node.retried' ORDER BY event_id",
        run_id,
    )
    assert delays == [(300,), (600,)]
    waited = server.query(
        "SELECT due_at - created_at, fired_at >= due_at FROM run_waits WHERE run_id = ?"
        " AND kind = 'retry' ORDER BY created_at",
        run_id,
    )
    assert waited == [(300, 1), (600, 1)]
    traces = server.query(
        "SELECT l.traceback FROM attempt_logs l JOIN node_attempts a USING (attempt_id)"
        " WHERE a.run_id = ? AND a.status = 'retried' ORDER BY a.attempt_no",
        run_id,
    )
    assert [("flaky try 1" in t, "flaky try 2" in t) for (t,) in traces] == [
        (True, False),
        (False, True),
    ]  # each retried try keeps its own traceback
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_retry_delay_holds_no_runner_and_no_claim(server: ServerProcess, tmp_path: Path) -> None:
    """During a 3 s delay the run waits with a pending ``retry`` wait, no live runner and
    no held claim; ``run show`` says when the node is tried again."""
    _flaky(server, attempts=2, delay=3.0)
    witness = tmp_path / "tries.jsonl"
    run_id = server.start_run("flaky", {"witness": str(witness), "fail": 1})
    view = server.wait_status(run_id, "waiting", 30)
    assert view["wait"]["kind"] == "retry"
    assert "tried again at" in view["wait"]["text"]
    holds_nothing(server, run_id)
    shown = server.cli("run", "show", run_id, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "tried again at" in shown.stdout
    assert "failed, retried" in shown.stdout
    done = server.wait_status(run_id, {"completed", "failed"}, 60)
    assert done["status"] == "completed"
    assert len(_tries(witness)) == 2
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_exhausted_tries_route_the_last_failure_through_result_outcome(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``on_exhausted="fail"``: after three failed tries the third failure routes as any
    failure would (to ``gave_up``) and the body ran exactly three times."""
    _flaky(server, attempts=3, delay=0.0)
    witness = tmp_path / "tries.jsonl"
    run_id = server.start_run("flaky", {"witness": str(witness), "fail": 99})
    done = server.wait_status(run_id, {"completed", "failed"}, 60)
    assert done["status"] == "completed"
    assert done["output"] == {"error": "RuntimeError: flaky try 3"}
    assert [row[3] for row in attempts(server, run_id, "call")] == [
        "retried",
        "retried",
        "failed",
    ]
    assert len(_tries(witness)) == 3
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_exhausted_tries_that_pause_wait_for_a_person_and_resume_a_fresh_round(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``on_exhausted="pause"``: two failed tries park the run ``retriesExhausted`` with a
    detail naming the node and the last error; nothing retries by itself; ``run resume``
    starts try 1 of a fresh round, which succeeds."""
    _flaky(server, attempts=2, delay=0.0, exhausted="pause")
    witness = tmp_path / "tries.jsonl"
    run_id = server.start_run("flaky", {"witness": str(witness), "fail": 2})
    parked = server.wait_status(run_id, "paused", 60)
    assert parked["parkReason"] == "retriesExhausted"
    assert "'call'" in parked["parkDetail"]
    assert "flaky try 2" in parked["parkDetail"]
    holds_nothing(server, run_id)
    assert len(_tries(witness)) == 2
    with server.client() as client:
        client.resume(run_id)
    done = server.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert done["status"] == "completed"
    assert attempts(server, run_id, "call") == [
        (1, 1, 1, "retried", "failed"),
        (1, 2, 2, "exhausted", "failed"),
        (1, 3, 1, "completed", None),
    ]
    assert len(_tries(witness)) == 3
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_only_outcomes_the_policy_names_are_retried(server: ServerProcess, tmp_path: Path) -> None:
    """A policy ``on=("timed_out",)`` does not retry a failure: one try, then the route."""
    _flaky(server, attempts=5, delay=0.0, on=("timed_out",))
    witness = tmp_path / "tries.jsonl"
    run_id = server.start_run("flaky", {"witness": str(witness), "fail": 1})
    done = server.wait_status(run_id, {"completed", "failed"}, 60)
    assert done["output"] == {"error": "RuntimeError: flaky try 1"}
    assert [row[3] for row in attempts(server, run_id, "call")] == ["failed"]
    assert len(_tries(witness)) == 1


SLOW_SHELL = """
from pi_workflows import Workflow, compute, idempotent_effect, retry, seconds, shell, switch

workflow = Workflow(
    "slowshell",
    start="probe",
    nodes={
        "probe": shell(lambda ctx: ctx.input["command"], effect=idempotent_effect("probe"),
                       timeout=seconds(0.5), retry=retry(attempts=2, delay=0, on=("timed_out",))),
        "late": compute(lambda ctx: {"outcome": ctx.results["probe"]["outcome"]}),
    },
    edges=[switch("probe", on="$result.outcome",
                  cases={"ok": "late", "failed": "late", "timed_out": "late"})],
)
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_timed_out_shell_command_is_retried_then_routed(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A command that outlives its 0.5 s deadline is tried twice (each killed), then its
    ``timed_out`` outcome routes onward; both tries ran the command (witness lines)."""
    witness = tmp_path / "ran.txt"
    server.write_workflow("slowshell", SLOW_SHELL)
    command = ["sh", "-c", f"echo x >> {witness}; sleep 30"]
    run_id = server.start_run("slowshell", {"command": command})
    done = server.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert done["status"] == "completed", done
    assert done["output"] == {"outcome": "timed_out"}
    assert [row[2:] for row in attempts(server, run_id, "probe")] == [
        (1, "retried", "timed_out"),
        (2, "timed_out", None),
    ]
    wait_for(lambda: len(witness.read_text().splitlines()) == 2, 10, "both tries to have run")
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_retry_delay_survives_a_server_kill_and_fires_once_after_restart(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The server is SIGKILLed during a 2 s retry delay and started again after it passed:
    the next try runs once (not twice, not never), at or after its due time."""
    _flaky(server, attempts=3, delay=2.0)
    witness = tmp_path / "tries.jsonl"
    run_id = server.start_run("flaky", {"witness": str(witness), "fail": 1})
    server.wait_status(run_id, "waiting", 30)
    [(due,)] = server.query("SELECT due_at FROM run_waits WHERE run_id = ?", run_id)
    server.kill()
    wait_for(lambda: __import__("time").time() * 1000 > due + 500, 10, "the due time to pass")
    server.start()
    done = server.wait_status(run_id, {"completed", "failed"}, 60)
    assert done["status"] == "completed"
    assert len(_tries(witness)) == 2
    [(fired,)] = server.query("SELECT fired_at FROM run_waits WHERE run_id = ?", run_id)
    assert fired >= due
    assert server.query(
        "SELECT COUNT(*) FROM node_attempts WHERE run_id = ? AND node_id = 'call'", run_id
    ) == [(2,)]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_retry_delay_paused_past_its_time_tries_again_only_after_resume(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Paused during a 1 s retry delay, the run stays paused past the due time (the wait
    is recorded fired, no try runs); ``run resume`` runs the next try once. Cancelling a
    run in its delay ends it with the wait cancelled and no further try."""
    _flaky(server, attempts=3, delay=1.0)
    witness = tmp_path / "tries.jsonl"
    run_id = server.start_run("flaky", {"witness": str(witness), "fail": 1})
    server.wait_status(run_id, "waiting", 30)
    with server.client() as client:
        client.pause(run_id)
    wait_for(
        lambda: (
            server.query("SELECT status FROM run_waits WHERE run_id = ?", run_id) == [("fired",)]
        ),
        15,
        "the delay to pass while paused",
    )
    assert server.run(run_id)["status"] == "paused"
    assert len(_tries(witness)) == 1
    with server.client() as client:
        client.resume(run_id)
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["status"] == "completed"
    assert len(_tries(witness)) == 2
    other_witness = tmp_path / "other.jsonl"
    other = server.start_run("flaky", {"witness": str(other_witness), "fail": 5})
    server.wait_status(other, "waiting", 30)
    with server.client() as client:
        client.cancel(other)
    assert server.query("SELECT status FROM run_waits WHERE run_id = ?", other) == [("cancelled",)]
    assert len(_tries(other_witness)) == 1
    assert server.diagnose() == []


FAILING_SHELL = """
from pi_workflows import Workflow, compute, idempotent_effect, retry, shell, switch

workflow = Workflow(
    "failing",
    start="probe",
    nodes={
        "probe": shell(lambda ctx: ["sh", "-c", f"echo run >> {ctx.input['witness']}; exit 1"],
                       effect=idempotent_effect("probe"),
                       retry=retry(attempts=2, delay=30, on_exhausted="EXHAUSTED")),
        "done": compute(lambda ctx: {"ok": True}),
    },
    edges=[switch("probe", on="$result.outcome",
                  cases={"ok": "done", "failed": "done", "timed_out": "done"})],
)
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_run_cancelled_in_its_retry_delay_keeps_its_effects_outcome(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The first try's command ran (exit 1, its effect settled); the run is cancelled in the
    30 s delay: the effect still says what that try did, and diagnose is clean."""
    server.write_workflow("failing", FAILING_SHELL.replace("EXHAUSTED", "fail"))
    witness = tmp_path / "ran.txt"
    run_id = server.start_run("failing", {"witness": str(witness)})
    server.wait_status(run_id, "waiting", 30)
    [(before, count)] = server.query(
        "SELECT status, attempt_count FROM effects WHERE run_id = ?", run_id
    )
    with server.client() as client:
        client.cancel(run_id)
    assert server.query("SELECT status, attempt_count FROM effects WHERE run_id = ?", run_id) == [
        (before, count)
    ]
    assert before in ("applied", "rejected")
    assert witness.read_text().splitlines() == ["run"]
    assert server.diagnose() == []


CRASHY = """
import json, os, time
from pathlib import Path
from pi_workflows import Workflow, action, compute, edge, idempotent_effect, retry, seconds


def call(ctx):
    witness = Path(ctx.input["witness"])
    with open(witness, "a") as out:
        out.write(json.dumps({"key": ctx.effect_key, "pid": os.getpid()}) + "\\n")
    if len(witness.read_text().splitlines()) == 1:
        Path(ctx.input["started"]).write_text(str(os.getpid()))
        time.sleep(600)  # killed here, its effect applying
    return {"ok": True}


workflow = Workflow(
    "crashy",
    start="call",
    nodes={
        "call": action(call, effect=idempotent_effect("call"),
                       retry=retry(attempts=2, delay=seconds(0.2))),
        "done": compute(lambda ctx: ctx.outputs["call"]),
    },
    edges=[edge("call", "done")],
)
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_try_killed_with_its_effect_applying_follows_the_effect_rules_not_the_policy(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A runner SIGKILLed inside an idempotent body: the crash is no try of the policy (no
    ``retried`` attempt, no delay); the effect goes back to pending and the same visit runs
    its body again under the same key, as try 1 still."""
    server.write_workflow("crashy", CRASHY)
    witness, started = tmp_path / "tries.jsonl", tmp_path / "started"
    run_id = server.start_run("crashy", {"witness": str(witness), "started": str(started)})
    pid = written_pid(started, 60, "the body to start")
    assert server.query("SELECT status FROM effects WHERE run_id = ?", run_id) == [("applying",)]
    os.kill(pid, signal.SIGKILL)
    done = server.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert done["status"] == "completed", done
    statuses = attempts(server, run_id, "call")
    assert [row[3] for row in statuses] == ["interrupted", "completed"]
    assert {row[2] for row in statuses} == {1}, "the crash consumed no try of the policy"
    assert {row[4] for row in statuses} == {None}
    tries = _tries(witness)
    assert len(tries) == 2
    assert len({t["key"] for t in tries}) == 1
    assert server.query("SELECT status, attempt_count FROM effects WHERE run_id = ?", run_id) == [
        ("applied", 2)
    ]
    assert server.query(
        "SELECT COUNT(*) FROM run_waits WHERE run_id = ? AND kind = 'retry'", run_id
    ) == [(0,)]
    assert server.diagnose() == []
