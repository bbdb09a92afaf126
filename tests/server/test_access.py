"""Access: only the owning user reaches the server, and its files are private at every start.

The socket is 0600 in a 0700 directory, but the server does not rely on that alone: it
checks each peer's uid (`SO_PEERCRED`) and closes connections from any other user, so even a
socket loosened to 0666 in a traversable directory refuses them. Every start makes the state
directory 0700 and the database, lock and socket 0600 again.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pi_workflows.client import Client

from support.server import ServerProcess, wait_for


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _unused_uid() -> int:
    taken = {entry.pw_uid for entry in pwd.getpwall()}
    return next(uid for uid in range(61000, 65000) if uid not in taken)


def _connect_as(uid: int, path: Path) -> bytes:
    """Connect to `path` from a forked child running as `uid`; return what it saw."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the other uid, connect, report, exit at once
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(20)
            sock.connect(str(path))
            data = sock.recv(65536)
            os.write(write_end, b"eof" if not data else b"data:" + data[:200])
        except BaseException as exc:
            os.write(write_end, f"error:{type(exc).__name__}: {exc}".encode()[:300])
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as reader:
        chunks.append(reader.read())
    os.waitpid(pid, 0)
    return b"".join(chunks)


@pytest.fixture
def reachable_server() -> Iterator[ServerProcess]:
    """A server whose state directory's ancestors another user can traverse (pytest's own
    temp root is 0700, which would refuse the other uid before the server could)."""
    root = Path(tempfile.mkdtemp(prefix="pw-access-"))
    root.chmod(0o711)
    server = ServerProcess(root)
    try:
        yield server.start()
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(
    os.geteuid() != 0, reason="acting as a second uid needs root (setuid in a forked child)"
)
def test_another_user_is_refused_even_through_a_world_writable_socket(
    reachable_server: ServerProcess,
) -> None:
    """With the directory traversable and the socket 0666, a process of another uid can
    connect but is closed at once without a hello; the owner is still served."""
    server = reachable_server
    sock_path = server.home / "server.sock"
    os.chmod(server.home, 0o711)
    os.chmod(sock_path, 0o666)
    try:
        seen = _connect_as(_unused_uid(), sock_path)
    finally:
        os.chmod(server.home, 0o700)
        os.chmod(sock_path, 0o600)
    assert seen == b"eof", f"the other uid saw {seen!r}"
    wait_for(
        lambda: "refused a connection from another user" in server.log.read_text(),
        30,
        "the refusal in the server log",
    )
    with server.client() as client:
        assert client.status()["pid"]


def test_every_start_makes_the_state_directory_private_again(
    server_process: ServerProcess,
) -> None:
    """Loosened modes are tightened at each of three starts: directory 0700; database,
    lock and socket 0600."""
    server = server_process
    for _ in range(3):
        server.start()
        home = server.home
        assert _mode(home) == 0o700
        assert _mode(home / "server.sock") == 0o600
        for name in ("state.sqlite", "server.lock"):
            assert _mode(home / name) == 0o600, name
        server.stop()
        os.chmod(home, 0o755)
        for name in ("state.sqlite", "server.lock"):
            os.chmod(home / name, 0o644)


def _as_user(uid: int, action: Callable[[], str]) -> str:
    """Run ``action`` in a forked child running as ``uid``; what it returned (or raised)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            outcome = action()
        except BaseException as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        finally:
            os.write(write_end, outcome.encode()[:2000])
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        seen = reader.read().decode()
    os.waitpid(pid, 0)
    return seen


@pytest.mark.skipif(
    os.geteuid() != 0, reason="acting as a second uid needs root (setuid in a forked child)"
)
@pytest.mark.parametrize("traversable", [True, False])
def test_a_client_of_another_user_is_told_so_at_once_and_never_retries(
    reachable_server: ServerProcess, traversable: bool
) -> None:
    """A client (auto-start on) run by another uid than the server's gets one line naming
    whose server it is and what to do, without connecting (the server logs no refusal) and
    without trying to start a server of its own; the owner is still served."""
    server = reachable_server
    sock_path = server.home / "server.sock"
    uid = _unused_uid()
    if traversable:
        os.chmod(server.home, 0o711)
        os.chmod(sock_path, 0o666)

    def status() -> str:
        with Client(server.home, autostart=True, timeout=10) as client:
            client.status()
        return "served"

    try:
        seen = _as_user(uid, status)
    finally:
        os.chmod(server.home, 0o700)
        os.chmod(sock_path, 0o600)
    assert seen.startswith("OtherUserServerError: "), seen
    assert "\n" not in seen
    assert f"you are uid {uid}" in seen
    if traversable:
        assert f"the server at {sock_path} serves root (uid 0)" in seen
        assert "run the command as root (without sudo)" in seen
    else:
        assert "belongs to another user" in seen
    assert "refused a connection" not in server.log.read_text()
    assert not (server.home / "logs" / "autostart.log").exists()
    with server.client() as client:
        assert client.status()["pid"]
