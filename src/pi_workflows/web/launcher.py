"""`pi-workflows ui`'s side of the page: find the page process that serves this state
directory, or start one, and say where it is.

Runs in the CLI process. The page process (`python -m pi_workflows.web`) is a client of
the server: it is started detached (its own session, stdin from /dev/null, stderr appended
to `<state dir>/logs/ui.log`), says `ready <port>` on its stdout once it listens, then
serves until the server goes away. A page that serves an older server, or another port
than the one asked for, is stopped first (only while its recorded identity matches).
Imports no web framework: the page process does.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pi_workflows.web.access import cookie_value, load_or_create_secret, secret_text
from pi_workflows.web.errors import PageStartError, PortInUseError
from pi_workflows.web.record import live_record, stop_page

__all__ = ["COOKIE_NAME", "LOG_NAME", "PageInfo", "ensure_page", "page_command"]

COOKIE_NAME: Final = "pi_workflows_ui"
"""The session cookie (HttpOnly, SameSite=Strict, Path=/)."""

LOG_NAME: Final = "ui.log"
"""The page process's log, in `<state dir>/logs/` beside the server's (mode 0600)."""

EXIT_LOCKED: Final = 4
"""The page process's exit status when another one holds `ui.lock` (`page.py` uses it)."""

EXIT_PORT_IN_USE: Final = 5
"""The page process's exit status when its port is taken (`page.py` uses it too)."""

_START_TIMEOUT: Final = 20.0
_TAIL_BYTES: Final = 4096


@dataclass(frozen=True)
class PageInfo:
    """A page process that serves the state directory."""

    port: int
    pid: int
    started: bool
    """True when this call started it."""
    url: str
    """The address to open, with the secret (print it to the user only)."""


def page_command(home: Path, port: int) -> list[str]:
    """The argument list of the page process."""
    return [sys.executable, "-m", "pi_workflows.web", "--home", str(home), "--port", str(port)]


def ensure_page(
    home: Path, *, port: int | None, server_epoch: int, timeout: float = _START_TIMEOUT
) -> PageInfo:
    """The page process serving `home` for the server of `server_epoch` (on `port` when
    given), started now if there is none."""
    secret = load_or_create_secret(home)
    record = live_record(home)
    if record is not None:
        if (
            record.server_epoch == server_epoch
            and port in (None, record.port)
            and _answers(record.port, cookie_value(secret))
        ):
            return PageInfo(record.port, record.pid, False, _url(record.port, secret))
        stop_page(record)
    deadline = time.monotonic() + timeout
    while True:
        try:
            child, ready_port = _spawn(home, 0 if port is None else port, timeout)
        except PageStartError as exc:
            # Refused for the lock: a page process that is stopping (its server went away
            # a moment ago) still holds it. Start again once it has gone.
            if exc.exit_code != EXIT_LOCKED or time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
            continue
        return PageInfo(ready_port, child, True, _url(ready_port, secret))


def _url(port: int, secret: bytes) -> str:
    return f"http://127.0.0.1:{port}/auth?key={secret_text(secret)}"


def _answers(port: int, cookie: str) -> bool:
    """True when the page on `port` answers an authenticated health check."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
    try:
        connection.request(
            "GET",
            "/health",
            headers={"Cookie": f"{COOKIE_NAME}={cookie}", "Host": f"127.0.0.1:{port}"},
        )
        response = connection.getresponse()
        response.read()
        return response.status == 200
    except OSError:
        return False
    finally:
        connection.close()


def _spawn(home: Path, port: int, timeout: float) -> tuple[int, int]:
    """Start the page process detached; its pid and port once it said `ready`."""
    logs = home / "logs"
    logs.mkdir(mode=0o700, parents=True, exist_ok=True)
    log = logs / LOG_NAME
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        offset = os.fstat(fd).st_size
        child = subprocess.Popen(
            page_command(home, port),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=fd,
            start_new_session=True,
            close_fds=True,
            cwd=home,
        )
    finally:
        os.close(fd)
    assert child.stdout is not None
    try:
        line = _ready_line(child, timeout)
    finally:
        child.stdout.close()
    # Reap it whenever it exits, so the CLI never leaves a zombie nor a ResourceWarning.
    threading.Thread(target=child.wait, name="pi-workflows-ui-reap", daemon=True).start()
    if not line:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=2)  # it closed its stdout: it is exiting, so learn how
    parts = line.split()
    if len(parts) == 2 and parts[0] == "ready" and parts[1].isdigit():
        return child.pid, int(parts[1])
    exit_code = child.poll()
    if exit_code == EXIT_PORT_IN_USE:
        raise PortInUseError(port)
    why = (
        f"exited with status {exit_code}"
        if exit_code is not None
        else f"did not say it was serving within {timeout:g} s"
    )
    if exit_code is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, 15)
    raise PageStartError(
        f"the page process {why}; see {log}",
        log_tail=_tail(log, offset),
        exit_code=exit_code,
    )


def _ready_line(child: subprocess.Popen[bytes], timeout: float) -> str:
    """The first line of the child's stdout within `timeout` seconds ("" if none came)."""
    assert child.stdout is not None
    descriptor = child.stdout.fileno()
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data and len(data) < 256:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        readable, _, _ = select.select([descriptor], [], [], left)
        if not readable:
            break
        chunk = os.read(descriptor, 256)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0].decode("ascii", "replace") if b"\n" in data else ""


def _tail(log: Path, offset: int) -> str:
    try:
        with log.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(offset, size - _TAIL_BYTES))
            return handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
