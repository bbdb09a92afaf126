"""`server status` and `server stop` report a missing server without starting one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from client.scripted_peer import ok, scripted_peer
from pi_workflows.cli.main import cli

STATUS = {
    "pid": 1234,
    "epoch": 3,
    "version": "0.1.0",
    "socket": "/s/server.sock",
    "stateDir": "/s",
    "capacity": 4,
    "runners": [{"runId": "run_a", "pid": 99, "status": "ready", "runnerEpoch": 5}],
    "runsByStatus": {"running": 1, "completed": 2},
    "expiredClaims": 0,
    "pendingInteractions": 1,
    "ambiguousEffects": 0,
}


Invoke = Callable[..., Result]


def test_server_status_exits_3_when_nothing_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `PI_WORKFLOWS_HOME` set to an empty directory, status exits 3 and starts nothing."""
    monkeypatch.setenv("PI_WORKFLOWS_HOME", str(tmp_path))
    result = CliRunner().invoke(cli, ["server", "status"])
    assert result.exit_code == 3
    assert "not running" in result.stdout
    assert str(tmp_path / "server.sock") in result.stdout
    assert not (tmp_path / "logs").exists()
    assert not (tmp_path / "server.sock").exists()


def test_server_status_json_says_not_running(invoke: Invoke, home: Path) -> None:
    """`server status --json` prints `{"running": false, "socket": ...}` and exits 3."""
    result = invoke("server", "status", "--json")
    assert result.exit_code == 3
    assert json.loads(result.stdout) == {"running": False, "socket": str(home / "server.sock")}


def test_server_stop_exits_0_when_nothing_runs(invoke: Invoke, home: Path) -> None:
    """Stopping a server that does not run is not an error, and starts nothing."""
    result = invoke("server", "stop")
    assert result.exit_code == 0
    assert "not running" in result.stdout
    assert not home.exists()


def test_server_status_prints_the_summary(invoke: Invoke, home: Path) -> None:
    """A running server's status shows pid, epoch, socket, runners, runs and pending work."""
    with scripted_peer(home, lambda _i, r: ok(r, STATUS)) as peer:
        human = invoke("server", "status")
        as_json = invoke("server", "status", "--json")
    assert human.exit_code == 0
    for text in ("1234", "epoch", "/s/server.sock", "run_a", "running 1", "pending interactions"):
        assert text in human.stdout
    assert as_json.exit_code == 0
    assert json.loads(as_json.stdout) == {**STATUS, "running": True}
    assert peer.operations == ["server.status", "server.status"]
