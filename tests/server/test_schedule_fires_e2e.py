"""A person's fires of a schedule through a real server, real runners and the real CLI:
``schedule trigger`` fires once now (a key adopts), ``schedule backfill`` fires each past
fire time of a window once (a second run starts nothing), both by the overlap rule, and
``ctx.fire_at`` reaches workflow code as the fire time."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

STAMP = """
from pi_workflows import Workflow, compute
workflow = Workflow("stamp", start="one", nodes={"one": compute(
    lambda ctx: {"fireAt": None if ctx.fire_at is None else ctx.fire_at.isoformat()})})
"""
WAITS = """
from pi_workflows import Workflow, checkpoint
workflow = Workflow("waits", start="ask",
                    nodes={"ask": checkpoint(lambda ctx: {"question": "go?"})})
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path)
    process.write_workflow("stamp", STAMP)
    process.write_workflow("waits", WAITS)
    process.start()
    yield process
    process.cleanup()


def pw_json(server: ServerProcess, *args: str) -> Any:
    done = server.cli(*args, "--json", timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat()


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_trigger_starts_one_run_whose_fire_at_is_the_trigger(server: ServerProcess) -> None:
    """A trigger starts a run at once, whose ``ctx.fire_at`` is the fire time the receipt
    names; the same key again starts nothing and names that run; a run started by hand
    sees ``ctx.fire_at`` None; the cadence's next fire time did not move."""
    added = pw_json(server, "schedule", "add", "hourly", "stamp", "--every", "1h",
                    "--overlap", "allow")  # fmt: skip
    next_fire = added["schedule"]["nextFireAt"]
    fired = pw_json(server, "schedule", "trigger", "hourly", "--key", "rerun-1")
    fire = fired["fire"]
    assert (fire["outcome"], fired["adopted"]) == ("started", False)
    view = server.wait_status(fire["runId"], "completed")
    assert view["output"] == {"fireAt": _iso(fire["fireAt"])}
    again = server.cli("schedule", "trigger", "hourly", "--key", "rerun-1")
    assert again.returncode == 0, again.stderr
    assert fire["runId"] in again.stdout
    assert "triggered before with this key; nothing new" in again.stdout
    by_hand = server.start_run("stamp")
    assert server.wait_status(by_hand, "completed")["output"] == {"fireAt": None}
    shown = pw_json(server, "schedule", "show", "hourly")
    assert shown["schedule"]["nextFireAt"] == next_fire
    assert [f["source"] for f in shown["fires"]] == ["trigger"]
    assert server.diagnose() == []


def test_a_trigger_while_a_run_is_active_follows_skip(server: ServerProcess) -> None:
    """``overlap skip``: the first trigger's run waits on its checkpoint; a second trigger
    is recorded skipped, naming that run, and starts nothing."""
    pw_json(server, "schedule", "add", "asks", "waits", "--every", "1h")
    first = pw_json(server, "schedule", "trigger", "asks")["fire"]
    server.wait_status(first["runId"], "waiting")
    second = pw_json(server, "schedule", "trigger", "asks")["fire"]
    assert (second["outcome"], second["runId"]) == ("skipped", None)
    assert first["runId"] in second["detail"]
    assert len(server.query("SELECT run_id FROM runs WHERE workflow_name = 'waits'")) == 1


def test_a_backfill_fires_each_past_time_once_and_again_starts_nothing(
    server: ServerProcess,
) -> None:
    """An hourly ``allow`` schedule backfilled over the last 150 minutes starts one run for
    each of its two grid times there, each seeing its own fire time; the same backfill
    again fires nothing and says both were fired before; a window of 200 fire times is
    refused with one line, and an unknown schedule too."""
    pw_json(server, "schedule", "add", "hourly", "stamp", "--every", "1h", "--overlap", "allow")
    done = pw_json(server, "schedule", "backfill", "hourly", "--from", "150m", "--to", "1m")
    assert done["total"] == 2
    fires = done["fires"]
    assert [f["outcome"] for f in fires] == ["started", "started"]
    assert fires[1]["fireAt"] - fires[0]["fireAt"] == 3_600_000
    for fire in fires:
        view = server.wait_status(fire["runId"], "completed")
        assert view["output"] == {"fireAt": _iso(fire["fireAt"])}
    again = server.cli("schedule", "backfill", "hourly", "--from", "150m", "--to", "1m")
    assert again.returncode == 0, again.stderr
    assert "2 fire time(s) in the window, 0 fired now, 2 fired before" in again.stdout
    too_many = server.cli("schedule", "backfill", "hourly", "--from", "200h", "--to", "1m")
    assert too_many.returncode == 1
    assert "more than 100 fire times" in _one_error_line(too_many)
    unknown = server.cli("schedule", "backfill", "nope", "--from", "2h", "--to", "1m")
    assert unknown.returncode == 1
    assert "no schedule named nope" in _one_error_line(unknown)
    assert len(server.query("SELECT run_id FROM runs WHERE schedule_id IS NOT NULL")) == 2
    assert server.diagnose() == []
