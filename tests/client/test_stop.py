"""`Client.stop` never starts a server and returns only once the server process is gone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from client.scripted_peer import DROP, Reply, hello, ok, scripted_peer
from pi_workflows.client import Client, ServerUnavailableError, StopTimeoutError
from pi_workflows.protocol import Request


def test_stop_waits_until_the_server_process_has_exited(tmp_path: Path) -> None:
    """The receipt comes back after the process named in the hello is gone."""
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:

        def answer(_index: int, request: Request) -> Reply:
            if request.operation == "server.stop":
                stand_in.terminate()
            return ok(request, {"stopping": True})

        greeting = hello(server_pid=stand_in.pid)
        with scripted_peer(tmp_path, answer, greeting=greeting) as peer:
            receipt = Client(tmp_path, autostart=True).stop(wait=True, timeout=10)
        assert stand_in.poll() is not None or stand_in.wait(timeout=1) is not None
    finally:
        stand_in.kill()
        stand_in.wait()
    assert receipt["stopping"] is True
    assert peer.operations == ["server.stop"]
    assert peer.requests[0][1].idempotency_key


def test_stop_never_starts_a_server(tmp_path: Path) -> None:
    """With nobody listening, `stop` raises `ServerUnavailableError` even with auto-start on."""
    with pytest.raises(ServerUnavailableError):
        Client(tmp_path, autostart=True).stop()
    assert not (tmp_path / "logs").exists()


def test_a_connection_dropped_by_a_stopping_server_counts_as_stopped(tmp_path: Path) -> None:
    """If the server closes without replying and then nobody answers, the stop took effect."""
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:

        def answer(_index: int, _request: Request) -> Reply:
            stand_in.terminate()
            (tmp_path / "server.sock").unlink()  # nobody will answer a reconnect
            return DROP

        with scripted_peer(tmp_path, answer, greeting=hello(server_pid=stand_in.pid)) as peer:
            receipt = Client(tmp_path, autostart=True).stop(wait=True, timeout=10)
    finally:
        stand_in.kill()
        stand_in.wait()
    assert receipt.adopted
    assert receipt.body == {"stopping": True}
    assert peer.operations == ["server.stop"]
    assert not (tmp_path / "logs").exists(), "the retry never auto-starts a server"


def test_stop_reports_a_server_that_does_not_exit(tmp_path: Path) -> None:
    """A server still running after the wait makes `stop` raise `StopTimeoutError`."""
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        greeting = hello(server_pid=stand_in.pid)
        with (
            scripted_peer(tmp_path, lambda _i, r: ok(r, {"stopping": True}), greeting=greeting),
            pytest.raises(StopTimeoutError) as caught,
        ):
            Client(tmp_path).stop(wait=True, timeout=0.2)
    finally:
        stand_in.kill()
        stand_in.wait()
    assert caught.value.pid == stand_in.pid
