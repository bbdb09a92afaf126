"""The seed's session clients and headless agents, seen from the campaign driver.

Runs in the campaign driver. Each origin session of the plan has one scripted client
(`session_client.py`) running as a child process; a `killSession` fault SIGKILLs it and
`SessionClients.tick` starts a new one (a new `session.attach`, so a new coordinator epoch)
once the fault's down time is over. A client that exits by itself is a violation. Detached
runs get their headless agent from the server, which runs `$PI_WORKFLOWS_PI`: the seed's
`bin/pi` wrapper around `session_client.pi_main`; `agents()` finds them for `killAgent`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psutil

from campaign.processes import Processes
from campaign.session_client import RECORD_NAME, read_record

ROOT: Final = Path(__file__).resolve().parent.parent

PI_WRAPPER: Final = """#!{python}
# The campaign's stand-in for `pi` (PI_WORKFLOWS_PI): a scripted headless agent.
import sys

sys.path.insert(0, {root!r})
from campaign.session_client import pi_main

sys.exit(pi_main(sys.argv[1:]))
"""


def write_pi_wrapper(root: Path) -> Path:
    """Write `<root>/bin/pi`, the executable the seed's servers start for detached runs."""
    path = root / "bin" / "pi"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PI_WRAPPER.format(python=sys.executable, root=str(ROOT)))
    path.chmod(0o700)
    return path


@dataclass
class ClientProcess:
    """One session's client: its current process and what the campaign did to it."""

    session: str
    record: Path
    stderr: Path
    proc: subprocess.Popen[bytes] | None = None
    restart_at: float | None = None  # killed: when to start the next one
    starts: int = 0
    kills: int = 0


class SessionClients:
    """The scripted clients of one seed's origin sessions."""

    def __init__(
        self,
        directory: Path,
        home: Path,
        env: dict[str, str],
        seed: int,
        processes: Processes,
        violation: Callable[[str, str], Any],
        note: Callable[[str], None],
    ) -> None:
        self.directory = directory
        self.home = home
        self.env = env
        self.seed = seed
        self.processes = processes
        self.violation = violation
        self.note = note
        self.clients: dict[str, ClientProcess] = {}

    def start_all(self, sessions: list[str]) -> None:
        """Start one client per session."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for session in sessions:
            client = ClientProcess(
                session,
                self.directory / f"{session}.jsonl",
                self.directory / f"{session}.stderr",
            )
            self.clients[session] = client
            self._start(client)

    def _start(self, client: ClientProcess) -> None:
        argv = [
            sys.executable, "-m", "campaign.session_client", "--home", str(self.home),
            "--session", client.session, "--record", str(client.record),
            "--seed", str(self.seed),
        ]  # fmt: skip
        with client.stderr.open("ab") as err:
            client.proc = subprocess.Popen(
                argv, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip
        client.starts += 1
        client.restart_at = None
        self.processes.note(client.proc.pid, "session")

    def live(self) -> list[ClientProcess]:
        """Clients whose process runs now, in a stable order."""
        return [
            c
            for _, c in sorted(self.clients.items())
            if c.proc is not None and c.proc.poll() is None
        ]

    def kill(self, client: ClientProcess, down: float) -> int | None:
        """SIGKILL a client now; a new one attaches after `down` seconds. Its pid."""
        proc = client.proc
        if proc is None or proc.poll() is not None:
            return None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        client.kills += 1
        client.restart_at = time.monotonic() + down
        return proc.pid

    def tick(self) -> None:
        """Start the clients whose down time is over; a client that exited by itself is a
        violation (it is started again, so that its session is still presented)."""
        now = time.monotonic()
        for client in self.clients.values():
            proc = client.proc
            if client.restart_at is not None:
                if now >= client.restart_at:
                    self._start(client)
                    self.note(f"session client of {client.session} started again")
                continue
            if proc is not None and proc.poll() is not None:
                tail = _tail(client.stderr)
                self.violation(
                    "sessionClientExited",
                    f"the client of session {client.session} exited {proc.returncode} by "
                    f"itself: {tail}",
                )
                self._start(client)

    def stop_all(self) -> None:
        """Stop every client (the end of a seed, or a failed one)."""
        for client in self.clients.values():
            client.restart_at = None
            proc = client.proc
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5.0)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()

    def records(self) -> dict[str, list[dict[str, Any]]]:
        """Every session's record (its branch and log), by session id."""
        return {s: read_record(c.record) for s, c in sorted(self.clients.items())}


def agent_records(home: Path) -> dict[str, list[dict[str, Any]]]:
    """The records of the headless agents (in their session directories), by session id."""
    found: dict[str, list[dict[str, Any]]] = {}
    folder = home / "agents"
    with contextlib.suppress(FileNotFoundError):
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            record = Path(entry.path) / RECORD_NAME
            if entry.is_dir() and record.exists():
                found[f"detached-{entry.name}"] = read_record(record)
    return found


def agents(wrapper: Path) -> list[tuple[int, str]]:
    """Live headless agents of this seed: (pid, run id), sorted."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error):
            cmdline = proc.cmdline()
            if proc.status() == psutil.STATUS_ZOMBIE or str(wrapper) not in cmdline:
                continue
            if "--session-id" in cmdline:
                session = cmdline[cmdline.index("--session-id") + 1]
                found.append((proc.pid, session.removeprefix("detached-")))
    return sorted(found)


def _tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no stderr)"
    return " | ".join(text.strip().splitlines()[-lines:]) or "(no stderr)"
