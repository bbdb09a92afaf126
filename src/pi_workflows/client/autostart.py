"""Start the server on demand: connect if one answers, else spawn it detached and wait.

Owns the one way a client starts a server: `python -m pi_workflows.server run --home HOME`
in a new session, stdin from /dev/null, stdout and stderr appended to `<home>/logs/server.log`,
then poll-connecting until its `hello` arrives. Runs in the client process. It never kills or
signals a server (stopping is the `server.stop` operation), never removes the socket or the
lock, and never waits on the child in a way that keeps the caller alive: a background thread
only reaps the child when it exits, so no zombie is left in a long-lived client.

Races are settled by the server: it holds an exclusive lock on its state directory, so of two
clients that spawn at once one child wins and the other exits; both clients then connect to
the winner.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from pi_workflows.client.connection import Connection
from pi_workflows.client.errors import ConnectionLostError, ServerStartError, ServerUnavailableError
from pi_workflows.client.paths import LOG_DIR_NAME, log_path, socket_path

if TYPE_CHECKING:
    import subprocess

__all__ = ["ServerInfo", "connect_or_start", "ensure_server", "server_command"]

_FIRST_BACKOFF: Final = 0.005
_MAX_BACKOFF: Final = 0.05  # never sleep longer than this between connection attempts
_ALREADY_RUNNING_EXIT: Final = 4
"""The exit status of a server refused because another one holds the state directory's lock
(``server/main.py`` EXIT_ALREADY_RUNNING; a test keeps the two equal)."""
_RESPAWN_DELAY: Final = 0.2
"""How long to wait before starting a server again while a stopping one still holds the lock."""
_TAIL_BYTES: Final = 8192
_TAIL_LINES: Final = 12


@dataclass(frozen=True)
class ServerInfo:
    """A server that answered, and whether this call started it."""

    pid: int
    epoch: int
    version: str
    socket_path: Path
    started: bool
    """True when the server that answered is the child this call spawned."""
    log_path: Path


def server_command(home: Path) -> list[str]:
    """The argument list that starts a server for `home` in the foreground."""
    return [sys.executable, "-m", "pi_workflows.server", "run", "--home", str(home)]


def ensure_server(
    home: Path, *, timeout: float = 15.0, command: Sequence[str] | None = None
) -> ServerInfo:
    """Make sure a server answers on `home`'s socket, starting one if nobody listens.

    `command` overrides the spawned argument list (tests use a stand-in server); by default it
    is `server_command(home)`.

    Raises:
        ServerStartError: the spawned server exited, or did not say hello within `timeout`.
        ServerUnavailableError: the socket cannot be used at all (`startable` False).
        ProtocolMismatchError: whatever answers does not speak client protocol v1.
    """
    connection, started = connect_or_start(home, timeout=timeout, command=command)
    with connection:
        hello = connection.hello
    return ServerInfo(
        pid=hello.server_pid,
        epoch=hello.server_epoch,
        version=hello.server_version,
        socket_path=socket_path(home),
        started=started,
        log_path=log_path(home),
    )


def connect_or_start(
    home: Path, *, timeout: float = 15.0, command: Sequence[str] | None = None
) -> tuple[Connection, bool]:
    """Return an open connection to `home`'s server and whether this call started it.

    Same errors as `ensure_server`.
    """
    path = socket_path(home)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return Connection.open(path, timeout=timeout), False
        except ServerUnavailableError as exc:
            if not exc.startable:
                raise
        argv = list(command) if command is not None else server_command(home)
        log = log_path(home)
        child, log_offset = _spawn(home, argv, log)
        try:
            return _wait_for_hello(
                child, path, log, log_offset, max(0.1, deadline - time.monotonic())
            )
        except ServerStartError as exc:
            # Refused for the lock, yet nobody answers: the holder is a server that is
            # stopping (draining its runs). Start again once it has gone, within the deadline.
            if exc.exit_code != _ALREADY_RUNNING_EXIT or time.monotonic() >= deadline:
                raise
        time.sleep(min(_RESPAWN_DELAY, max(0.0, deadline - time.monotonic())))


def _spawn(home: Path, argv: list[str], log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start the server detached, its output appended to `log`; return it and the log offset."""
    import subprocess  # noqa: PLC0415 - only a client that starts the server pays for it

    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    logs = home / LOG_DIR_NAME
    logs.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        offset = os.fstat(fd).st_size
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            close_fds=True,
            cwd=home,
        )
    finally:
        os.close(fd)
    # Reap the child whenever it exits, so a long-lived client never keeps a zombie and the
    # Popen object never warns that it was dropped while the process still ran.
    threading.Thread(target=child.wait, name=f"pi-workflows-reap-{child.pid}", daemon=True).start()
    return child, offset


def _wait_for_hello(
    child: subprocess.Popen[bytes], path: Path, log: Path, log_offset: int, timeout: float
) -> tuple[Connection, bool]:
    """Poll-connect until a hello arrives, the child exits without anyone answering, or the
    deadline passes."""
    deadline = time.monotonic() + timeout
    backoff = _FIRST_BACKOFF
    while True:
        exit_code = child.poll()
        remaining = deadline - time.monotonic()
        try:
            connection = Connection.open(path, timeout=max(0.05, min(remaining, 5.0)))
        except (ServerUnavailableError, ConnectionLostError) as exc:
            if isinstance(exc, ServerUnavailableError) and not exc.startable:
                raise
            if exit_code is not None:
                # The child ended and nobody answers: it failed (a refusal because another
                # server holds the lock would have been followed by that server answering).
                raise ServerStartError(
                    f"the server exited with status {exit_code} before answering",
                    log_path=log,
                    log_tail=_log_tail(log, log_offset),
                    exit_code=exit_code,
                    pid=child.pid,
                ) from None
            if remaining <= 0:
                raise ServerStartError(
                    f"the server (pid {child.pid}) did not answer on {path} within {timeout:g} s",
                    log_path=log,
                    log_tail=_log_tail(log, log_offset),
                    exit_code=None,
                    pid=child.pid,
                ) from None
        else:
            return connection, connection.hello.server_pid == child.pid
        time.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
        backoff = min(backoff * 2, _MAX_BACKOFF)


def _log_tail(log: Path, offset: int) -> str:
    """The last lines written to `log` since `offset` (bounded), or "" if it cannot be read."""
    try:
        with log.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            start = max(offset, size - _TAIL_BYTES)
            if start > size:  # the log was truncated or replaced meanwhile
                start = max(0, size - _TAIL_BYTES)
            handle.seek(start)
            data = handle.read(size - start)
    except OSError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-_TAIL_LINES:])
