"""`schedule show` at 80 columns, piped: the fire detail stays readable, and a deleted
schedule is still shown by its name. The real CLI in a child process against a real server
whose schedule fires every second."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(120)

QUICK = """
from pi_workflows import Workflow, compute
workflow = Workflow("quick", start="one", nodes={"one": compute(lambda ctx: {"n": ctx.input})})
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server whose project holds `quick`; output 80 columns wide."""
    process = ServerProcess(tmp_path, env={"COLUMNS": "80"})
    process.write_workflow("quick", QUICK)
    process.start()
    yield process
    process.cleanup()


def pw(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """The real `pi-workflows --home HOME ARGS`, piped, at 80 columns."""
    return server.cli(*args, timeout=60)


def _failed_fire(server: ServerProcess) -> str:
    """Add `tick` (every second), break its workflow until a fire fails, pause it; the
    failed fire's detail."""
    added = pw(server, "schedule", "add", "tick", "quick", "--every", "1s")
    assert added.returncode == 0, added.stderr

    def started() -> bool:
        shown = json.loads(pw(server, "schedule", "show", "tick", "--json").stdout)
        return any(f["runId"] and f["runStatus"] == "completed" for f in shown["fires"])

    wait_for(started, 30, "a fire whose run completed")  # its run id and status are shown
    (server.project / ".pi" / "workflows" / "quick.workflow.py").write_text("not python (\n")

    def failed() -> str | None:
        shown = json.loads(pw(server, "schedule", "show", "tick", "--json").stdout)
        found = [f["detail"] for f in shown["fires"] if f["outcome"] == "failed"]
        return found[0] if found else None

    detail = str(wait_for(failed, 30, "a failed fire"))
    assert pw(server, "schedule", "pause", "tick").returncode == 0
    return detail


def test_schedule_show_keeps_the_fire_detail_readable_at_80_columns(
    server: ServerProcess,
) -> None:
    """Piped at 80 columns beside a fire with a run id and status, no line is wider, and
    a failed fire's detail is listed under the table, whole, on a few lines of its own
    (not folded into a column two characters wide)."""
    detail = _failed_fire(server)
    shown = pw(server, "schedule", "show", "tick", "--fires", "3")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, shown.stdout
    under = [line for line in lines if line.endswith(" failed: workflowLoadFailed:")
             or " failed: workflowLoadFailed: " in line]  # fmt: skip
    assert under, shown.stdout
    start = lines.index(under[0])
    assert "".join(lines[start:]).replace(" ", "").endswith(detail.replace(" ", ""))
    assert len(lines) < 40, shown.stdout
    assert server.diagnose() == []


def test_schedule_show_of_a_deleted_name_shows_it_and_says_it_was_deleted(
    server: ServerProcess,
) -> None:
    """After `schedule delete tick`, `schedule show tick` shows that schedule with its
    fires, says it was deleted and where its runs are; a name never used is one line."""
    _failed_fire(server)
    listed = json.loads(pw(server, "schedule", "show", "tick", "--json").stdout)
    assert pw(server, "schedule", "delete", "tick").returncode == 0
    shown = pw(server, "schedule", "show", "tick")
    assert shown.returncode == 0, shown.stderr
    flat = " ".join(shown.stdout.split())
    assert listed["schedule"]["scheduleId"] in flat
    assert "status deleted" in flat
    assert "this schedule was deleted; the runs it started: pi-workflows run list" in flat
    assert "--schedule tick" in flat
    assert "Fires (newest first)" in shown.stdout
    missing = pw(server, "schedule", "show", "never")
    assert missing.returncode == 1
    assert len(missing.stderr.splitlines()) == 1, missing.stderr
    assert server.diagnose() == []
