"""Durable sleep through real processes: no runner while it sleeps, and every crossing.

A workflow writes a witness line before and after its sleep node, so each test can tell
from outside the database how often the work around the sleep ran. Each checks the sleep's
output (``until``, ``lateMs``), the wait row, that nothing holds the run, and ``state
diagnose``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from support.durable import holds_nothing, now_ms
from support.server import ServerProcess, wait_for

NAP = """
from datetime import UTC, datetime, timedelta
from pathlib import Path
from pi_workflows import Workflow, compute, edge, seconds, sleep


def mark(what):
    def run(ctx):
        with open(ctx.input["witness"], "a") as out:
            out.write(what + "\\n")
        return {"marked": what}
    return run


def until(ctx):
    if ctx.input.get("naive"):
        return datetime.now() + timedelta(seconds=1)
    if ctx.input.get("far"):
        return 1e12
    if "duration" in ctx.input:
        return seconds(ctx.input["duration"])
    if "at" in ctx.input:
        return datetime.fromtimestamp(ctx.input["at"], UTC)
    return datetime.now(UTC) + timedelta(seconds=ctx.input["seconds"])


workflow = Workflow(
    "nap",
    start="before",
    nodes={
        "before": compute(mark("before")),
        "nap": SLEEP,
        "after": compute(lambda ctx: {**mark("after")(ctx), "nap": ctx.outputs["nap"]}),
    },
    edges=[edge("before", "nap"), edge("nap", "after")],
)
"""


def _nap(
    server: ServerProcess, sleep: str = "sleep(seconds(SECONDS))", seconds: float = 2.0
) -> None:
    server.write_workflow("nap", NAP.replace("SLEEP", sleep).replace("SECONDS", repr(seconds)))


def _lines(witness: Path) -> list[str]:
    return witness.read_text().splitlines() if witness.exists() else []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_sleep_waits_with_nothing_running_then_continues_with_its_lateness(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A 2 s sleep: the run waits with a pending ``sleep`` wait and no runner or claim, then
    continues once; the output says when it was due and how late it woke."""
    _nap(server, seconds=2.0)
    witness = tmp_path / "w.txt"
    started = now_ms()
    run_id = server.start_run("nap", {"witness": str(witness)})
    view = server.wait_status(run_id, "waiting", 30)
    assert view["wait"]["kind"] == "sleep"
    holds_nothing(server, run_id)
    assert _lines(witness) == ["before"]
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["status"] == "completed"
    nap = done["output"]["nap"]
    due = dt.datetime.fromisoformat(nap["until"].replace("Z", "+00:00")).timestamp() * 1000
    assert due >= started + 2000
    assert 0 <= nap["lateMs"] < 5000
    assert now_ms() >= due
    assert _lines(witness) == ["before", "after"]
    assert server.query("SELECT kind, status FROM run_waits WHERE run_id = ?", run_id) == [
        ("sleep", "fired")
    ]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_sleep_until_an_aware_time_wakes_then(server: ServerProcess, tmp_path: Path) -> None:
    """``sleep(until=...)`` returning an aware datetime 2 s ahead wakes at that time: the wait
    is due exactly then, fires no earlier, and the next node starts no earlier."""
    _nap(server, "sleep(until=until)")
    witness = tmp_path / "w.txt"
    at_ms = now_ms() + 2000
    run_id = server.start_run("nap", {"witness": str(witness), "at": at_ms / 1000})
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["status"] == "completed"
    assert done["output"]["nap"]["lateMs"] >= 0
    [(due_at, fired_at)] = server.query(
        "SELECT due_at, fired_at FROM run_waits WHERE run_id = ? AND kind = 'sleep'", run_id
    )
    assert due_at == at_ms
    assert fired_at >= due_at
    [(after_started,)] = server.query(
        "SELECT started_at FROM node_attempts WHERE run_id = ? AND node_id = 'after'", run_id
    )
    assert after_started >= at_ms


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_sleep_until_a_duration_waits_that_long(server: ServerProcess, tmp_path: Path) -> None:
    """``sleep(until=...)`` returning a duration (1.5 s) sleeps that long from the node's
    start, with nothing held meanwhile."""
    _nap(server, "sleep(until=until)")
    witness = tmp_path / "w.txt"
    started = now_ms()
    run_id = server.start_run("nap", {"witness": str(witness), "duration": 1.5})
    view = server.wait_status(run_id, "waiting", 30)
    assert view["wait"]["kind"] == "sleep"
    holds_nothing(server, run_id)
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["status"] == "completed"
    nap = done["output"]["nap"]
    due = dt.datetime.fromisoformat(nap["until"].replace("Z", "+00:00")).timestamp() * 1000
    assert started + 1500 <= due <= now_ms()
    assert nap["lateMs"] >= 0
    assert _lines(witness) == ["before", "after"]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_naive_until_fails_the_node_with_a_message_that_says_what_to_return(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A naive datetime is refused: the node fails naming the problem, nothing sleeps."""
    _nap(server, "sleep(until=until)")
    run_id = server.start_run("nap", {"witness": str(tmp_path / "w.txt"), "naive": True})
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["status"] == "failed"
    assert "naive datetime" in done["error"]
    assert server.query("SELECT COUNT(*) FROM run_waits WHERE run_id = ?", run_id) == [(0,)]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_sleep_beyond_a_year_and_a_day_fails_the_node_instead_of_waiting(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``until`` returning 1e12 seconds fails the node saying the bound; nothing waits."""
    _nap(server, "sleep(until=until)")
    run_id = server.start_run("nap", {"witness": str(tmp_path / "w.txt"), "far": True})
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["status"] == "failed"
    assert "366 days" in done["error"]
    assert server.query("SELECT COUNT(*) FROM run_waits WHERE run_id = ?", run_id) == [(0,)]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_sleep_that_came_due_while_the_server_was_down_continues_at_the_next_start(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The server is SIGKILLed during a 1 s sleep and started 3 s later: the sleep fires
    once at start-up, its lateness counts the downtime, and ``after`` runs once."""
    _nap(server, seconds=1.0)
    witness = tmp_path / "w.txt"
    run_id = server.start_run("nap", {"witness": str(witness)})
    server.wait_status(run_id, "waiting", 30)
    [(due,)] = server.query("SELECT due_at FROM run_waits WHERE run_id = ?", run_id)
    server.kill()
    wait_for(lambda: now_ms() > due + 2000, 10, "two seconds past the wake time")
    server.start()
    done = server.wait_status(run_id, {"completed", "failed"}, 60)
    assert done["status"] == "completed"
    assert done["output"]["nap"]["lateMs"] >= 2000
    assert _lines(witness) == ["before", "after"]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_sleep_survives_a_server_kill_and_wakes_at_its_own_time(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A server killed and restarted before the wake time neither wakes the run early nor
    resets its time: it wakes at the recorded time, once."""
    _nap(server, seconds=4.0)
    witness = tmp_path / "w.txt"
    run_id = server.start_run("nap", {"witness": str(witness)})
    server.wait_status(run_id, "waiting", 30)
    [(due,)] = server.query("SELECT due_at FROM run_waits WHERE run_id = ?", run_id)
    server.kill()
    server.start()
    assert server.run(run_id)["status"] == "waiting"
    done = server.wait_status(run_id, {"completed", "failed"}, 60)
    assert done["status"] == "completed"
    [(fired,)] = server.query("SELECT fired_at FROM run_waits WHERE run_id = ?", run_id)
    assert fired >= due
    assert _lines(witness) == ["before", "after"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_paused_sleep_that_passes_its_time_continues_only_after_resume(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Paused during a 1 s sleep, the run stays paused past the wake time (the wait is
    recorded fired); ``run resume`` then continues it once."""
    _nap(server, seconds=1.0)
    witness = tmp_path / "w.txt"
    run_id = server.start_run("nap", {"witness": str(witness)})
    server.wait_status(run_id, "waiting", 30)
    with server.client() as client:
        client.pause(run_id, "hold on")
    wait_for(
        lambda: (
            server.query("SELECT status FROM run_waits WHERE run_id = ?", run_id) == [("fired",)]
        ),
        15,
        "the wait to fire while paused",
    )
    view = server.run(run_id)
    assert (view["status"], view["parkReason"]) == ("paused", "userPaused")
    holds_nothing(server, run_id)
    assert _lines(witness) == ["before"]
    with server.client() as client:
        client.resume(run_id)
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["status"] == "completed"
    assert _lines(witness) == ["before", "after"]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_sleep_resumed_before_its_time_waits_again_until_then(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Paused and resumed within a 3 s sleep, the run waits again (no runner) and wakes at
    its original time, not earlier."""
    _nap(server, seconds=3.0)
    witness = tmp_path / "w.txt"
    run_id = server.start_run("nap", {"witness": str(witness)})
    server.wait_status(run_id, "waiting", 30)
    [(due,)] = server.query("SELECT due_at FROM run_waits WHERE run_id = ?", run_id)
    with server.client() as client:
        client.pause(run_id)
        client.resume(run_id)
    view = server.run(run_id)
    assert view["status"] == "waiting"
    assert view["wait"]["dueAt"] == due
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["status"] == "completed"
    [(fired,)] = server.query("SELECT fired_at FROM run_waits WHERE run_id = ?", run_id)
    assert fired >= due
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_cancelled_sleep_ends_the_run_and_its_wait(server: ServerProcess, tmp_path: Path) -> None:
    """Cancelling a sleeping run ends it cancelled, its wait cancelled, ``after`` never runs."""
    _nap(server, seconds=30.0)
    witness = tmp_path / "w.txt"
    run_id = server.start_run("nap", {"witness": str(witness)})
    server.wait_status(run_id, "waiting", 30)
    with server.client() as client:
        client.cancel(run_id, "not needed")
    assert server.run(run_id)["status"] == "cancelled"
    assert server.query("SELECT status FROM run_waits WHERE run_id = ?", run_id) == [("cancelled",)]
    assert _lines(witness) == ["before"]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_restarted_sleeping_run_starts_over_with_a_fresh_sleep(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A paused sleeping run restarted: the old wait is cancelled, the run runs from its
    start and sleeps again in the new round, then completes."""
    _nap(server, seconds=1.5)
    witness = tmp_path / "w.txt"
    run_id = server.start_run("nap", {"witness": str(witness)})
    server.wait_status(run_id, "waiting", 30)
    with server.client() as client:
        client.pause(run_id)
        client.restart(run_id)
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["status"] == "completed"
    assert sorted(server.query("SELECT status FROM run_waits WHERE run_id = ?", run_id)) == [
        ("cancelled",),
        ("fired",),
    ]
    assert _lines(witness) == ["before", "before", "after"]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_many_sleeping_runs_hold_no_process_and_all_wake(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Twenty runs sleep at once: none has a runner while they sleep, and every one wakes
    and completes exactly once."""
    _nap(server, seconds=2.0)
    runs = [server.start_run("nap", {"witness": str(tmp_path / f"w{i}.txt")}) for i in range(20)]
    for run_id in runs:
        server.wait_status(run_id, {"waiting", "completed"}, 30)
    sleeping = server.query("SELECT COUNT(*) FROM run_waits WHERE status = 'pending'")[0][0]
    assert sleeping >= 1
    for run_id in runs:
        done = server.wait_status(run_id, {"completed", "failed"}, 60)
        assert done["status"] == "completed"
    for i in range(20):
        assert _lines(tmp_path / f"w{i}.txt") == ["before", "after"]
    assert server.diagnose() == []
