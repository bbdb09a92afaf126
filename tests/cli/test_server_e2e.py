"""End to end against the real server: the CLI's server commands and the client's receipts."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pi_workflows.client import Client, ConflictError, ServerUnavailableError

pytestmark = pytest.mark.slow


def pw(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real `pi-workflows` command in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "pi_workflows.cli.main", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A state directory whose server, if any is left, is stopped after the test."""
    path = tmp_path / "home"
    yield path
    with contextlib.suppress(ServerUnavailableError):
        Client(path, autostart=False).stop(wait=True, timeout=30)


def test_server_start_status_stop_round_trip(home: Path) -> None:
    """start (twice), status and stop behave as docs/cli.md says, with the documented exits."""
    first = pw(home, "server", "start", "--json")
    assert first.returncode == 0, first.stderr
    started = json.loads(first.stdout)
    assert started["started"] is True
    again = json.loads(pw(home, "server", "start", "--json").stdout)
    assert (again["started"], again["pid"]) == (False, started["pid"])

    status = pw(home, "server", "status", "--json")
    assert status.returncode == 0, status.stderr
    summary = json.loads(status.stdout)
    assert summary["running"] is True
    assert (summary["pid"], summary["epoch"]) == (started["pid"], started["epoch"])

    stopped = pw(home, "server", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert pw(home, "server", "status").returncode == 3
    assert pw(home, "server", "stop").returncode == 0


def test_a_repeated_command_is_adopted_and_a_changed_one_conflicts(home: Path) -> None:
    """With the real server, the same client id and key return the stored receipt (adopted);
    the same key with another payload is a conflict."""
    with Client(home, client_id="e2e") as first:
        receipt = first.start_run("builtin:demo", {"items": [1]}, idempotency_key="k-1")
    with Client(home, client_id="e2e") as second:
        repeated = second.start_run("builtin:demo", {"items": [1]}, idempotency_key="k-1")
        with pytest.raises(ConflictError):
            second.start_run("builtin:demo", {"items": [2]}, idempotency_key="k-1")
    assert not receipt.adopted
    assert repeated.adopted
    assert repeated["runId"] == receipt["runId"]


def test_the_cli_reports_a_missing_run_with_exit_1(home: Path) -> None:
    """`run show` of an unknown run is one error line and exit 1 (the server auto-started)."""
    result = pw(home, "run", "show", "run_missing")
    assert result.returncode == 1
    assert result.stderr.startswith("pi-workflows: error: ")
    assert len(result.stderr.splitlines()) == 1
