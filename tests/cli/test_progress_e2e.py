"""A node that publishes 1,000 progress updates: `run show` shows its latest value, and
`run history` keeps only a bounded sample, through the CLI in a real process against a real
server."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.store import progress

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

COUNT = """
import time
from pi_workflows import Workflow, action, idempotent_effect

def count(ctx):
    for done in range(1, 1001):
        ctx.publish_update({"done": done, "total": 1000})
        time.sleep(0.002)  # about two seconds: the runner delivers several of them
    return {"counted": 1000}

workflow = Workflow("count", start="count", nodes={
    "count": action(count, effect=idempotent_effect("count")),
})
"""
LATEST = '{"done":1000,"total":1000}'


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server with the `count` workflow."""
    process = ServerProcess(tmp_path)
    process.write_workflow("count", COUNT)
    process.start()
    yield process
    process.cleanup()


def pw(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`pi-workflows --home HOME ARGS` as a child process."""
    done = server.cli(*args, timeout=60, env={**server.env, "COLUMNS": "120"})
    assert done.returncode == 0, done.stderr
    return done


def test_a_thousand_updates_leave_the_latest_in_run_show_and_a_sample_in_history(
    server: ServerProcess,
) -> None:
    """After the node published 1,000 values: `run show` has a progress line with the last
    value and the count; `--json` has the value, the count and each delivery; `run history`
    has the first value delivered and at most one more per sample interval the node ran,
    fewer events than values delivered."""
    run_id = server.start_run("count")
    assert server.wait_status(run_id, "completed", 60)["output"] == {"counted": 1000}

    shown = pw(server, "run", "show", run_id).stdout
    (line,) = [row for row in shown.splitlines() if row.startswith("progress")]
    assert f"count: {LATEST} (1000 published, at " in line, shown

    view: dict[str, Any] = json.loads(pw(server, "run", "show", run_id, "--json").stdout)
    latest = view["progress"]
    assert (latest["nodeId"], latest["value"], latest["text"]) == (
        "count",
        {"done": 1000, "total": 1000},
        LATEST,
    )
    assert (latest["published"], latest["running"]) == (1000, False)
    (attempt,) = view["attempts"]
    assert attempt["progress"]["text"] == LATEST

    events = json.loads(pw(server, "run", "history", run_id, "--json").stdout)["events"]
    updates = [event for event in events if event["type"] == "node.update"]
    took = attempt["finishedAt"] - attempt["startedAt"]
    assert 1 <= len(updates) <= 1 + took // progress.SAMPLE_INTERVAL_MS  # the documented sample
    assert updates[0]["data"]["update"] == 1  # the first value delivered is always kept
    assert updates[0]["data"]["body"]["total"] == 1000
    assert latest["updates"] > len(updates)  # the runner delivered more than history keeps
    assert len(events) < 20, [event["type"] for event in events]
