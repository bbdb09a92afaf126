"""Durable schedules through real servers, real sockets and the real CLI: commands, fires
with provenance, crashes and downtime, overlap, bad input and idle exit.

Every test polls with deadlines (``wait_for``); downtime is measured on the wall clock the
servers read. After each, ``state diagnose`` is clean and every fire time of a schedule is
accounted for exactly once: by one fire row, or inside one ``missed`` row's range.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from support.server import ServerProcess, wait_for

QUICK = """
from pi_workflows import Workflow, compute
workflow = Workflow("quick", start="one", nodes={"one": compute(lambda ctx: {"n": ctx.input})})
"""
WAITS = """
from pi_workflows import Workflow, checkpoint
workflow = Workflow("waits", start="ask",
                    nodes={"ask": checkpoint(lambda ctx: {"question": "go?"})})
"""


def pw(server: ServerProcess, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `pi-workflows --home HOME ARGS` in a child process, from the project directory."""
    return server.cli(*args, timeout=timeout)


def pw_json(server: ServerProcess, *args: str) -> Any:
    result = pw(server, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pi-workflows: error: ")
    return lines[0]


def _fires(server: ServerProcess, name: str) -> list[dict[str, Any]]:
    """Every fire row of the live schedule ``name``, oldest first, straight from the file."""
    rows = server.query(
        "SELECT f.fire_at, f.outcome, f.run_id, f.detail, f.missed, f.missed_until,"
        " f.recorded_at FROM schedule_fires f JOIN schedules s USING (schedule_id)"
        " WHERE s.name = ? ORDER BY f.fire_at",
        name,
    )
    keys = ("fireAt", "outcome", "runId", "detail", "missed", "missedUntil", "recordedAt")
    return [dict(zip(keys, row, strict=True)) for row in rows]


def _runs_per_fire(server: ServerProcess, name: str) -> dict[int, int]:
    rows = server.query(
        "SELECT r.schedule_fire_at, COUNT(*) FROM runs r JOIN schedules s USING (schedule_id)"
        " WHERE s.name = ? GROUP BY r.schedule_fire_at",
        name,
    )
    return {int(at): int(n) for at, n in rows}


def _accounted(server: ServerProcess, name: str, every_ms: int) -> dict[int, str]:
    """Each fire time from the first recorded to the last, mapped to what it did: one fire
    row's outcome, or ``missed`` inside one missed row's range; no time twice, no gap. Each
    fire time has at most one run, and a started fire's run carries that time."""
    fires = _fires(server, name)
    accounted: dict[int, str] = {}
    for fire in fires:
        times = [fire["fireAt"]]
        if fire["outcome"] == "missed":
            times = list(range(fire["fireAt"], fire["missedUntil"] + 1, every_ms))
            assert len(times) == fire["missed"], fire
        for at in times:
            assert at not in accounted, f"fire time {at} accounted twice: {fires}"
            accounted[at] = fire["outcome"]
    if accounted:
        first, last = min(accounted), max(accounted)
        assert sorted(accounted) == list(range(first, last + 1, every_ms)), fires
    per_fire = _runs_per_fire(server, name)
    assert set(per_fire.values()) <= {1}, per_fire
    started = {at for at, outcome in accounted.items() if outcome == "started"}
    assert set(per_fire) == started, (per_fire, fires)
    return accounted


def _tick_every_second(server: ServerProcess, catchup: str, faults: str | None = None) -> None:
    """Start the server (with ``faults``) and add ``tick``: `quick` every second, overlap
    `allow`, the given catch-up rule."""
    server.write_workflow("quick", QUICK)
    server.start(faults=faults)
    with server.client() as client:
        client.add_schedule(
            "tick", "quick", every="1s", overlap="allow", catchup=catchup, project=server.project
        )


def _started(server: ServerProcess, name: str) -> list[dict[str, Any]]:
    return [f for f in _fires(server, name) if f["outcome"] == "started"]


@pytest.fixture
def project_server(server_process: ServerProcess) -> ServerProcess:
    """A started server whose project has the ``quick`` and ``waits`` workflows."""
    server_process.write_workflow("quick", QUICK)
    server_process.write_workflow("waits", WAITS)
    return server_process.start()


@pytest.mark.timeout(180)
def test_schedule_commands_add_list_show_pause_resume_and_delete_through_the_cli(
    project_server: ServerProcess,
) -> None:
    """Each schedule command works as a person types it: add tells that schedules fire only
    while the server runs, list and show print it, pause and resume switch it, delete frees
    its name and keeps it for `--all`."""
    server = project_server
    added = pw(server, "schedule", "add", "hourly", "quick", "--every", "1h", "--input", "7")
    assert added.returncode == 0, added.stderr
    assert "schedule hourly added: quick every 1h, overlap skip, catchup latest" in added.stdout
    assert "fire only while the pi-workflows server runs; it is running now" in added.stdout
    assert "No operating-system service is installed" in added.stdout
    listed = pw(server, "schedule", "list")
    assert "hourly" in listed.stdout
    assert "every 1h" in listed.stdout
    [shown] = pw_json(server, "schedule", "list")["schedules"]
    assert (shown["name"], shown["status"], shown["everyMs"]) == ("hourly", "active", 3_600_000)
    assert shown["timezone"]  # stored explicitly, the machine's zone by default
    details = pw_json(server, "schedule", "show", "hourly")
    assert details["schedule"]["input"] == 7
    assert details["fires"] == []
    assert "no fires yet" in pw(server, "schedule", "show", "hourly").stdout
    cron = pw_json(
        server, "schedule", "add", "weekdays", "quick", "--cron", "0 9 * * 1-5",
        "--timezone", "Europe/Berlin", "--overlap", "queue", "--catchup", "none",
    )  # fmt: skip
    assert cron["schedule"]["cadence"] == "cron '0 9 * * 1-5' (Europe/Berlin)"
    assert cron["note"].startswith("schedules fire only while the pi-workflows server runs")
    paused = pw_json(server, "schedule", "pause", "hourly")
    assert (paused["schedule"]["status"], paused["schedule"]["nextFireAt"]) == ("paused", None)
    assert "hourly: active, next fire" in pw(server, "schedule", "resume", "hourly").stdout
    assert pw(server, "schedule", "delete", "hourly").returncode == 0
    assert pw(server, "schedule", "delete", "weekdays").returncode == 0
    assert pw_json(server, "schedule", "list")["schedules"] == []
    gone = pw_json(server, "schedule", "list", "--all")["schedules"]
    assert sorted(s["status"] for s in gone) == ["deleted", "deleted"]
    again = pw_json(server, "schedule", "show", "hourly")  # the deleted one, by its name
    assert (again["schedule"]["name"], again["schedule"]["status"]) == ("hourly", "deleted")
    never = pw(server, "schedule", "show", "never-added")
    assert never.returncode == 1
    assert "no schedule named never-added" in _one_error_line(never)
    assert pw(server, "schedule", "add", "hourly", "quick", "--every", "2h").returncode == 0
    assert server.diagnose() == []


@pytest.mark.timeout(180)
def test_an_every_second_schedule_starts_runs_on_time_that_carry_it(
    project_server: ServerProcess,
) -> None:
    """Each fire starts a run within well under a second of its fire time; the run shows its
    schedule (`run show`, `run.get`, `run.list`) and `run list --schedule` finds exactly the
    schedule's runs."""
    server = project_server
    other = server.start_run("quick")
    assert pw(server, "schedule", "add", "tick", "quick", "--every", "1s").returncode == 0
    wait_for(lambda: len(_started(server, "tick")) >= 3, 30, "three fires")
    started = _started(server, "tick")
    for fire in started:
        assert 0 <= fire["recordedAt"] - fire["fireAt"] < 500, fire
    listed = pw_json(server, "run", "list", "--schedule", "tick", "--all")["runs"]
    assert {r["runId"] for r in listed} >= {f["runId"] for f in started}
    assert other not in {r["runId"] for r in listed}
    assert all(r["schedule"]["name"] == "tick" for r in listed)
    run_id = started[0]["runId"]
    view = server.wait_status(run_id, "completed")
    assert view["schedule"]["fireAt"] == started[0]["fireAt"]
    assert view["origin"] == f"schedule:{view['schedule']['scheduleId']}"
    assert view["output"] == {"n": {}}
    shown = pw(server, "run", "show", run_id)
    assert "schedule" in shown.stdout
    assert "tick (fire time" in shown.stdout
    assert pw(server, "schedule", "delete", "tick").returncode == 0
    deleted = pw_json(server, "run", "show", run_id)
    assert deleted["schedule"]["name"] == "tick"  # the deleted schedule's name stays
    assert pw_json(server, "run", "list", "--schedule", "tick")["runs"]
    _accounted(server, "tick", 1000)
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("phase", ["before_commit", "after_commit"])
def test_a_server_killed_in_a_fire_commit_starts_each_fire_time_at_most_once(
    server_process: ServerProcess, phase: str
) -> None:
    """Window: the server dies (like SIGKILL) just before / just after the commit of a fire
    (its fire row, its run, the next fire time). After a restart each fire time has at most
    one run, the crashed fire is either wholly there or fires again with the same key, and
    the schedule goes on."""
    server = server_process
    server.write_workflow("quick", QUICK)
    server.start(faults=f"schedules.fire.{phase}=exit")
    with server.client() as client:
        client.add_schedule("tick", "quick", every="1s", project=server.project)
    assert server.wait_exit(30) == 137
    crashed = _fires(server, "tick")
    assert len(crashed) == (1 if phase == "after_commit" else 0)
    server.start()
    wait_for(lambda: len(_started(server, "tick")) >= 3, 60, "fires after the restart")
    accounted = _accounted(server, "tick", 1000)
    if crashed:
        assert accounted[crashed[0]["fireAt"]] == "started"
        assert _runs_per_fire(server, "tick")[crashed[0]["fireAt"]] == 1
    for fire in _started(server, "tick"):
        server.wait_status(fire["runId"], "completed")
    assert server.diagnose() == []


def _downtime(server: ServerProcess, name: str, seconds: float) -> tuple[int, int, int]:
    """SIGKILL the server, let ``seconds`` pass (measured on the wall clock the server reads)
    and start it again: the kill time, the newest fire time recorded by then and the
    restart time, in epoch ms."""
    server.kill()
    killed = int(time.time() * 1000)
    last_before = max(f["fireAt"] for f in _fires(server, name))
    wait_for(lambda: time.time() * 1000 >= killed + seconds * 1000, seconds + 10, "downtime")
    restarted = int(time.time() * 1000)
    server.start()
    return killed, last_before, restarted


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("catchup", ["latest", "all", "none"])
def test_fire_times_missed_while_the_server_was_down_follow_catchup(
    server_process: ServerProcess, catchup: str
) -> None:
    """A SIGKILLed server is down for five intervals: after the restart ``latest`` starts one
    run for the newest missed time, ``all`` one per missed time, ``none`` none (the next fire
    is after the restart); every other missed time is one ``missed`` row, no time starts two
    runs and the schedule goes on."""
    server = server_process
    _tick_every_second(server, catchup)
    wait_for(lambda: _started(server, "tick"), 30, "a first fire")
    killed, last_before, restarted = _downtime(server, "tick", 5)
    assert last_before <= killed
    wait_for(
        lambda: any(f["fireAt"] > restarted + 2000 for f in _started(server, "tick")),
        60,
        "fires after the restart",
    )
    accounted = _accounted(server, "tick", 1000)
    down = {at: o for at, o in accounted.items() if last_before < at <= restarted}
    assert len(down) >= 4, accounted  # at least four fire times passed with no server
    outcomes = sorted(set(down.values()))
    if catchup == "all":
        assert outcomes == ["started"], down
    elif catchup == "latest":
        assert outcomes in (["missed"], ["missed", "started"]), down
        caught = [at for at, o in accounted.items() if at > last_before and o == "started"]
        assert caught[0] >= restarted - 1000  # the newest missed time, not an old one
        assert all(accounted[at] == "missed" for at in range(last_before + 1000, caught[0], 1000))
    else:
        assert outcomes == ["missed"], down
        caught = [at for at, o in accounted.items() if at > last_before and o == "started"]
        assert caught[0] > restarted  # the first run after downtime is for a future time
    for fire in _started(server, "tick"):
        server.wait_status(fire["runId"], "completed")
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("action", ["pause", "delete"])
def test_a_pause_or_delete_of_a_schedule_whose_fires_fell_behind_fires_them_first(
    server_process: ServerProcess, action: str
) -> None:
    """A busy server's fires fall behind a `catchup all` schedule (each fire is held 1.5 s,
    the schedule fires every second), so when a `schedule pause` or `delete` is handled
    fire times that came before it are still unfired: they are fired first, each with its
    run, and none is dropped as `missed`; nothing fires after the change."""
    server = server_process
    _tick_every_second(server, "all", faults="schedules.slow_fire=flag")
    wait_for(lambda: len(_started(server, "tick")) >= 3, 60, "three fires")  # >= 1.5 s behind
    handled = int(time.time() * 1000)
    result = server.cli("schedule", action, "tick")
    assert result.returncode == 0, result.stderr
    accounted = _accounted(server, "tick", 1000)
    assert "missed" not in accounted.values(), accounted
    assert max(accounted) >= handled - 1000, accounted  # it fired what was behind
    assert len(accounted) >= 5, accounted
    time.sleep(2.5)  # two more intervals: nothing fires after the change
    assert _accounted(server, "tick", 1000) == accounted
    for fire in _started(server, "tick"):
        server.wait_status(fire["runId"], "completed")
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_delete_sent_to_a_frozen_server_fires_what_was_due_before_it(
    server_process: ServerProcess,
) -> None:
    """Window: the server is frozen (SIGSTOP) for four intervals of a `catchup all` schedule
    and a `schedule delete` is sent while it is frozen (found by campaign seed 88). On
    SIGCONT the fire times that came during the freeze were the schedule's, not the
    person's choice: each starts its run (catch-up `all`), none is dropped as `missed`, and
    nothing fires after the change."""
    server = server_process
    _tick_every_second(server, "all")
    wait_for(lambda: _started(server, "tick"), 30, "a first fire")
    assert server.process is not None
    pid = server.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        command = subprocess.Popen(  # connects and sends; answered once the server runs
            [sys.executable, "-m", "pi_workflows.cli.main", "--home", str(server.home),
             "schedule", "delete", "tick"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=server.env,
            cwd=server.project,
        )  # fmt: skip
        time.sleep(4.5)  # the frozen server is the fault under test, not synchronisation
        frozen_until = int(time.time() * 1000)
    finally:
        os.kill(pid, signal.SIGCONT)
    _, err = command.communicate(timeout=60)
    assert command.returncode == 0, err
    accounted = _accounted(server, "tick", 1000)
    assert "missed" not in accounted.values(), accounted
    during = [at for at in accounted if frozen_until - 4000 <= at <= frozen_until - 1000]
    assert len(during) >= 3, accounted  # fire times that came while it was frozen
    time.sleep(2.5)  # two more intervals: nothing fires after the change
    assert _accounted(server, "tick", 1000) == accounted
    for fire in _started(server, "tick"):
        server.wait_status(fire["runId"], "completed")
    assert server.diagnose() == []


def _answer(server: ServerProcess, run_id: str) -> None:
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.answer_checkpoint(run_id, {"go": True})
    server.wait_status(run_id, "completed")


@pytest.mark.timeout(180)
def test_overlap_skip_records_skips_while_the_previous_run_waits(
    project_server: ServerProcess,
) -> None:
    """While the schedule's run waits at a checkpoint every fire is recorded skipped, naming
    that run; once it completed the next fire starts a run again."""
    server = project_server
    with server.client() as client:
        client.add_schedule("asks", "waits", every="1s", project=server.project)
    wait_for(lambda: len(_fires(server, "asks")) >= 3, 30, "three fires")
    first, *later = _fires(server, "asks")
    assert first["outcome"] == "started"
    assert {f["outcome"] for f in later} == {"skipped"}
    assert all(f"the run {first['runId']} is still" in f["detail"] for f in later)
    shown = pw(server, "schedule", "show", "asks")
    assert "skipped" in shown.stdout
    _answer(server, first["runId"])
    wait_for(lambda: len(_started(server, "asks")) >= 2, 30, "a run after the wait")
    with server.client() as client:
        client.pause_schedule("asks")
        for fire in _started(server, "asks")[1:]:
            client.cancel(fire["runId"])
    _accounted(server, "asks", 1000)
    assert server.diagnose() == []


@pytest.mark.timeout(180)
def test_overlap_queue_starts_the_queued_fire_when_the_previous_run_ends(
    project_server: ServerProcess,
) -> None:
    """A fire while the previous run waits is queued; when that run completes the queued
    fire starts its run, which carries the queued fire time. Deleting the schedule skips what
    is still queued."""
    server = project_server
    with server.client() as client:
        client.add_schedule("line", "waits", every="1s", overlap="queue", project=server.project)
    wait_for(
        lambda: sum(f["outcome"] == "queued" for f in _fires(server, "line")) >= 2, 30, "queued"
    )
    first = _fires(server, "line")[0]
    assert first["outcome"] == "started"
    queued_at = next(f["fireAt"] for f in _fires(server, "line") if f["outcome"] == "queued")
    _answer(server, first["runId"])

    def second_run() -> str | None:
        fire = next(f for f in _fires(server, "line") if f["fireAt"] == queued_at)
        return fire["runId"] if fire["outcome"] == "started" else None

    run_id = wait_for(second_run, 30, "the queued fire to start")
    view = server.wait_status(run_id, "waiting")
    assert view["schedule"]["fireAt"] == queued_at
    with server.client() as client:
        client.delete_schedule("line")
    assert not [f for f in _fires(server, "line") if f["outcome"] == "queued"]
    assert server.query(
        "SELECT COUNT(*) FROM schedule_fires WHERE detail = 'the schedule was deleted'"
    ) != [(0,)]
    with server.client() as client:
        client.cancel(run_id)
    assert server.diagnose() == []


@pytest.mark.timeout(180)
def test_a_fire_whose_workflow_no_longer_loads_is_recorded_failed_and_the_schedule_goes_on(
    project_server: ServerProcess,
) -> None:
    """A workflow file made broken after `schedule add` makes each fire `failed` with the
    resolver's one line; fixed again, the next fire starts a run."""
    server = project_server
    path = server.project / ".pi" / "workflows" / "quick.workflow.py"
    with server.client() as client:
        client.add_schedule("tick", "quick", every="1s", project=server.project)
    path.write_text("this is not python\n")
    wait_for(
        lambda: any(f["outcome"] == "failed" for f in _fires(server, "tick")), 30, "a failed fire"
    )
    failed = next(f for f in _fires(server, "tick") if f["outcome"] == "failed")
    assert "\n" not in failed["detail"]
    assert failed["detail"]
    path.write_text(QUICK)
    count = len(_started(server, "tick"))
    wait_for(lambda: len(_started(server, "tick")) > count, 30, "a fire after the fix")
    with server.client() as client:
        client.pause_schedule("tick")
    _accounted(server, "tick", 1000)
    assert server.diagnose() == []


BAD_INPUT = [
    (["--every", "5x"], "not a duration", 1),
    (["--every", "0s"], "out of range", 1),
    (["--every", "500ms"], "not a duration", 1),
    (["--cron", "61 * * * *"], "not a cron expression", 1),
    (["--cron", "* * *"], "five fields", 1),
    (["--cron", "0 0 30 2 *"], "not a cron expression", 1),
    (["--every", "1m", "--timezone", "Mars/Olympus"], "not a time zone", 1),
    (["--cron", "0 9 * * *", "--timezone", "../../etc/passwd"], "not a time zone", 1),
    (["--every", "1m", "--overlap", "sometimes"], "'sometimes' is not one of", 2),
    (["--every", "1m", "--catchup", "most"], "'most' is not one of", 2),
    (["--every", "1m", "--cron", "* * * * *"], "exactly one of --every", 2),
    ([], "exactly one of --every", 2),
    (["--every", "1m", "--input", "{nope"], "not valid JSON", 2),
]


@pytest.mark.timeout(240)
def test_every_bad_input_is_one_line_a_non_zero_exit_and_nothing_stored(
    project_server: ServerProcess,
) -> None:
    """Bad durations, cron expressions, time zones, names, policies, an oversized input and
    an unknown workflow are each refused with one line naming the value; nothing is stored."""
    server = project_server
    for extra, message, code in BAD_INPUT:
        result = pw(server, "schedule", "add", "nightly", "quick", *extra)
        assert result.returncode == code, (extra, result.stderr)
        assert message in _one_error_line(result), (extra, result.stderr)
    for name in ("9lives", "has space", "x" * 65, "semi;colon"):
        result = pw(server, "schedule", "add", name, "quick", "--every", "1m")
        assert result.returncode == 1
        assert "is not valid: use a letter" in _one_error_line(result)
    big = json.dumps({"blob": "x" * 70_000})
    result = pw(server, "schedule", "add", "big", "quick", "--every", "1m", "--input", big)
    assert result.returncode == 1
    assert "a schedule keeps at most 65536" in _one_error_line(result)
    result = pw(server, "schedule", "add", "ghost", "no-such-flow", "--every", "1m")
    assert result.returncode == 1
    assert "no-such-flow" in _one_error_line(result)
    assert pw(server, "schedule", "add", "twice", "quick", "--every", "1h").returncode == 0
    result = pw(server, "schedule", "add", "twice", "quick", "--every", "1h")
    assert result.returncode == 1
    assert "already exists" in _one_error_line(result)
    for command in ("pause", "resume", "delete", "show"):
        result = pw(server, "schedule", command, "nobody")
        assert result.returncode == 1
        assert "no schedule named nobody" in _one_error_line(result)
    assert [s["name"] for s in pw_json(server, "schedule", "list", "--all")["schedules"]] == [
        "twice"
    ]
    assert server.query("SELECT COUNT(*) FROM schedule_fires") == [(0,)]
    assert server.diagnose() == []


@pytest.mark.timeout(120)
def test_a_server_with_an_active_schedule_never_exits_idle(
    server_process: ServerProcess,
) -> None:
    """With a one-second idle exit, a server whose only work is an active (hourly) schedule
    stays up; once the schedule is paused it exits idle."""
    server = server_process
    server.write_workflow("quick", QUICK)
    server.start(PI_WORKFLOWS_IDLE_EXIT_SECONDS="1")
    with server.client() as client:
        client.add_schedule("hourly", "quick", every="1h", project=server.project)
    assert server.process is not None
    until = time.monotonic() + 4
    wait_for(
        lambda: server.process.poll() is None and time.monotonic() >= until,  # type: ignore[union-attr]
        10,
        "four idle seconds with the server still up",
    )
    with server.client() as client:
        client.pause_schedule("hourly")
    assert server.wait_exit(30) == 0
    assert "idle for" in server.tail()


@pytest.mark.timeout(60)
def test_the_python_client_reads_schedules_like_the_cli(project_server: ServerProcess) -> None:
    """`Client.add_schedule` takes a `timedelta`; `get_schedule` returns the schedule with
    its input and fires; `list_schedules` and the `schedule` filter of `list_runs_page`
    agree with the CLI."""
    import datetime as dt

    server = project_server
    with server.client() as client:
        receipt = client.add_schedule(
            "py", "quick", every=dt.timedelta(minutes=90), input={"a": 1}, project=server.project,
            idempotency_key="add-py",
        )  # fmt: skip
        again = client.add_schedule(
            "py", "quick", every=dt.timedelta(minutes=90), input={"a": 1}, project=server.project,
            idempotency_key="add-py",
        )  # fmt: skip
        assert again.adopted
        assert receipt["schedule"]["every"] == "1h30m"
        got = client.get_schedule("py")
        assert got["schedule"]["input"] == {"a": 1}
        assert [s["name"] for s in client.list_schedules()] == ["py"]
        assert client.list_runs_page(schedule="py") == ([], None)
    assert server.diagnose() == []


def test_the_cli_module_is_importable_alone(tmp_path: Path) -> None:
    """`schedule --help` needs no server and lists every subcommand."""
    result = subprocess.run(
        [sys.executable, "-m", "pi_workflows.cli.main", "--home", str(tmp_path), "schedule",
         "--help"], capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0
    for command in ("add", "list", "show", "pause", "resume", "delete"):
        assert command in result.stdout
