"""The processes of one seed: every pid the campaign saw, with its start identity, and the
signals it sends them.

Runs in the campaign driver. A pid alone proves nothing (it may be reused), so each pid is
remembered with the start time psutil reports the first time it is seen, and a process
counts as ours only while it still has that start time. Signals go only to processes whose
identity still matches, never by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class Seen:
    """A process the campaign saw: what it was, and its start identity."""

    pid: int
    role: str  # "server", "runner", "shell", "cli"
    started: float


class Processes:
    """Every process of one seed the campaign has seen."""

    def __init__(self, home: str) -> None:
        self.home = home
        self.seen: dict[int, Seen] = {}

    def note(self, pid: int | None, role: str) -> Seen | None:
        """Remember `pid` (if it is alive now) under `role`; return its identity."""
        if not pid or pid <= 1:
            return None
        known = self.seen.get(pid)
        started = _start_time(pid)
        if started is None:
            return known
        if known is not None and known.started == started:
            return known
        entry = Seen(pid, role, started)
        self.seen[pid] = entry
        return entry

    def alive(self, entry: Seen) -> bool:
        """The process is running (not a zombie) and is still the one that was seen."""
        return _start_time(entry.pid) == entry.started

    def send(self, pid: int, sig: signal.Signals, *, group: bool = False) -> bool:
        """Send `sig` to `pid` (or its group) if it is still the process seen; True if sent."""
        entry = self.seen.get(pid)
        if entry is None or not self.alive(entry):
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
            return True
        return False

    def survivors(self) -> list[Seen]:
        """Seen processes (other than CLI clients) that are still alive."""
        return [e for e in self.seen.values() if e.role != "cli" and self.alive(e)]

    def strays(self) -> list[tuple[int, str]]:
        """Any live process whose environment names this seed's state directory.

        Catches processes the campaign never saw (a runner that lived between two polls, a
        resolver child): servers, runners and shell commands all inherit
        `PI_WORKFLOWS_HOME`.
        """
        found = []
        me = os.getpid()
        for proc in psutil.process_iter(["pid", "name"]):
            if proc.pid == me:
                continue
            with contextlib.suppress(psutil.Error):
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                if proc.environ().get("PI_WORKFLOWS_HOME") == self.home:
                    found.append((proc.pid, " ".join(proc.cmdline())[:200]))
        return found

    def kill_everything(self) -> None:
        """Cleanup after a failed seed: SIGKILL every stray of this seed."""
        for pid, _ in self.strays():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)


def _start_time(pid: int) -> float | None:
    """The process's start time, or None if it is gone or a zombie."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except psutil.Error:
        return None
