"""Which page process serves a state directory: `<state dir>/ui.json` and `ui.lock`.

Owns the record the page process writes once it listens (`{pid, processStart, port,
serverPid, serverEpoch, startedAt}`, mode 0600, replaced atomically) and removes when it
exits, and the lock (`ui.lock`, flock) that keeps a second page process for the same
directory from starting. A record is believed only while its pid still has the recorded
start time (a pid alone proves nothing: pids are reused).

Runs in the CLI (`ui` reads the record) and in the page process (which writes it). Never
signals anything by itself except through `stop_page`, and only a process whose identity
matches the record.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pi_workflows.protocol.process_start import SAME_START_SECONDS, process_start

__all__ = [
    "LOCK_NAME",
    "RECORD_NAME",
    "PageRecord",
    "hold_lock",
    "live_record",
    "remove_record",
    "stop_page",
    "write_record",
]

RECORD_NAME: Final = "ui.json"
LOCK_NAME: Final = "ui.lock"


@dataclass(frozen=True)
class PageRecord:
    """A page process as it recorded itself."""

    pid: int
    process_start: float
    port: int
    server_pid: int
    server_epoch: int
    started_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "processStart": self.process_start,
            "port": self.port,
            "serverPid": self.server_pid,
            "serverEpoch": self.server_epoch,
            "startedAt": self.started_at,
        }

    def alive(self) -> bool:
        """True while the recorded process still runs (the same pid and start time)."""
        started = process_start(self.pid)
        return started is not None and abs(started - self.process_start) <= SAME_START_SECONDS


def write_record(home: Path, record: PageRecord) -> None:
    """Write `ui.json` (mode 0600) atomically: a reader sees the old record or the new one."""
    temporary = home / f".{RECORD_NAME}.{os.getpid()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, json.dumps(record.to_json(), sort_keys=True).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, home / RECORD_NAME)


def _read_record(home: Path) -> PageRecord | None:
    try:
        data = json.loads((home / RECORD_NAME).read_text())
        return PageRecord(
            pid=int(data["pid"]),
            process_start=float(data["processStart"]),
            port=int(data["port"]),
            server_pid=int(data["serverPid"]),
            server_epoch=int(data["serverEpoch"]),
            started_at=float(data["startedAt"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def live_record(home: Path) -> PageRecord | None:
    """The record of the page process that serves `home` now, or None (no record, or its
    process has gone)."""
    record = _read_record(home)
    return record if record is not None and record.alive() else None


def remove_record(home: Path, pid: int) -> None:
    """Remove `ui.json` if it is the record of process `pid` (a newer page's stays)."""
    record = _read_record(home)
    if record is not None and record.pid == pid:
        with contextlib.suppress(FileNotFoundError):
            (home / RECORD_NAME).unlink()


def hold_lock(home: Path) -> int | None:
    """Take `ui.lock` for this process: its file descriptor (keep it open while serving),
    or None when another page process holds it."""
    fd = os.open(home / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


_STOP_GRACE: Final = 5.0


def stop_page(record: PageRecord, *, grace: float = _STOP_GRACE) -> bool:
    """SIGTERM the recorded page process (only while its identity matches), SIGKILL it
    after `grace` seconds; True once it has gone."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        if not record.alive():
            return True
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, sig)
        until = time.monotonic() + wait
        while record.alive() and time.monotonic() < until:
            time.sleep(0.02)
    return not record.alive()
