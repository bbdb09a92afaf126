"""Auto-start spawns one detached server, waits for its hello, and reports failures clearly."""

from __future__ import annotations

import os
import signal
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from client.scripted_peer import ok, scripted_peer
from pi_workflows.client import (
    Client,
    ServerStartError,
    ensure_server,
    server_command,
)

# A stand-in server: `serve` binds the socket and greets every connection with a hello;
# `fail` writes to stderr and exits 3; `mute` runs without ever listening; `lock-refused`
# leaves a serving grandchild behind (the "other" server) and exits 1 like a lock refusal.
FAKE_SERVER = r"""
import json, os, socket, sys, time
sock_path, mode = sys.argv[1], sys.argv[2]

def serve():
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(8)
    return listener

def greet_forever(listener):
    hello = {"type": "hello", "schema": "pi-workflows.client.v1", "serverVersion": "fake",
             "protocolVersion": 1, "serverEpoch": 1, "serverPid": os.getpid()}
    while True:
        conn, _ = listener.accept()
        conn.sendall(json.dumps(hello).encode() + b"\n")
        conn.close()

if mode == "serve":
    print("fake server listening", flush=True)
    greet_forever(serve())
elif mode == "fail":
    print("boom: cannot open the state database", file=sys.stderr, flush=True)
    sys.exit(3)
elif mode == "mute":
    time.sleep(60)
elif mode == "lock-refused":
    listener = serve()
    if os.fork() == 0:
        greet_forever(listener)
    print("another server holds server.lock", file=sys.stderr, flush=True)
    sys.exit(1)
"""


def fake(home: Path, mode: str) -> list[str]:
    return [sys.executable, "-c", FAKE_SERVER, str(home / "server.sock"), mode]


@pytest.fixture
def reap() -> Iterator[list[int]]:
    """Pids appended here are terminated at the end of the test and waited for."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            process = psutil.Process(pid)
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            continue
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if process.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.01)
        else:
            pytest.fail(f"process {pid} did not exit")


def test_the_default_command_runs_the_server_module_in_the_foreground(tmp_path: Path) -> None:
    """The spawned command is exactly `python -m pi_workflows.server run --home HOME`."""
    assert server_command(tmp_path) == [
        sys.executable,
        "-m",
        "pi_workflows.server",
        "run",
        "--home",
        str(tmp_path),
    ]


def test_autostart_spawns_a_detached_server_and_waits_for_its_hello(
    tmp_path: Path, reap: list[int]
) -> None:
    """With nobody listening, the server is spawned in its own session with a private log."""
    home = tmp_path / "home"
    info = ensure_server(home, timeout=15, command=fake(home, "serve"))
    reap.append(info.pid)
    assert info.started
    assert info.version == "fake"
    assert os.getsid(info.pid) == info.pid, "the server leads its own session"
    assert stat.S_IMODE((home / "logs").stat().st_mode) == 0o700
    assert stat.S_IMODE(info.log_path.stat().st_mode) == 0o600
    deadline = time.monotonic() + 10
    while "fake server listening" not in info.log_path.read_text():
        assert time.monotonic() < deadline, "the server's stdout never reached the log"
        time.sleep(0.01)


def test_autostart_connects_to_a_running_server_without_spawning(tmp_path: Path) -> None:
    """When a server already answers, `ensure_server` only connects and says it did not start it."""
    with scripted_peer(tmp_path, lambda _i, r: ok(r)):
        info = ensure_server(tmp_path, command=fake(tmp_path, "fail"))
    assert not info.started
    assert info.pid == os.getpid()
    assert not (tmp_path / "logs").exists()


def test_a_server_that_exits_first_is_reported_with_its_log_tail(tmp_path: Path) -> None:
    """If the child exits before answering, `ServerStartError` carries its exit status and log."""
    with pytest.raises(ServerStartError) as caught:
        ensure_server(tmp_path, timeout=15, command=fake(tmp_path, "fail"))
    error = caught.value
    assert error.exit_code == 3
    assert "boom: cannot open the state database" in error.log_tail
    assert "boom: cannot open the state database" in error.message
    assert "\n" not in error.message
    assert error.code == "serverStartFailed"


def test_only_this_attempts_log_lines_are_reported(tmp_path: Path) -> None:
    """Lines an earlier server wrote to the same log are not blamed on this start."""
    (tmp_path / "logs").mkdir(mode=0o700)
    (tmp_path / "logs" / "server.log").write_text("old failure from yesterday\n")
    with pytest.raises(ServerStartError) as caught:
        ensure_server(tmp_path, timeout=15, command=fake(tmp_path, "fail"))
    assert "yesterday" not in caught.value.log_tail


def test_a_lock_refusal_counts_as_success_when_the_socket_answers(
    tmp_path: Path, reap: list[int]
) -> None:
    """The child exits (another server holds the lock) but a server answers: that is success."""
    info = ensure_server(tmp_path, timeout=15, command=fake(tmp_path, "lock-refused"))
    reap.append(info.pid)
    assert not info.started


def test_a_server_that_never_answers_fails_at_the_deadline(tmp_path: Path, reap: list[int]) -> None:
    """A child that neither listens nor exits fails `ensure_server` once its deadline passes."""
    started = time.monotonic()
    with pytest.raises(ServerStartError, match="did not answer") as caught:
        ensure_server(tmp_path, timeout=0.5, command=fake(tmp_path, "mute"))
    reap.append(caught.value.pid)
    assert caught.value.exit_code is None
    assert time.monotonic() - started < 5


def test_a_client_with_autostart_starts_the_server_on_its_first_call(
    tmp_path: Path, reap: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Client(autostart=True)` spawns the server when its first call finds nobody listening."""
    from pi_workflows.client import sync_client

    real = sync_client.connect_or_start
    monkeypatch.setattr(
        sync_client,
        "connect_or_start",
        lambda home, *, timeout: real(home, timeout=timeout, command=fake(home, "serve")),
    )
    client = Client(tmp_path, autostart=True)
    hello = client.connect()
    reap.append(hello.server_pid)
    client.close()
    assert client.started_server
