"""Every process the bench spawns, and the one way they all end.

Runs in the bench process. Each child is started in its own session with the environment
variable ``PIWF_BENCH_TAG`` set to this invocation's random tag; everything it spawns
(runner and resolver children of a server, DBOS workers) inherits the tag. ``cleanup``
stops the tracked children (SIGTERM to the group, a short grace, SIGKILL), then kills any
process that still carries this invocation's tag: never by name, never another user's.
``install_signal_handlers`` turns SIGTERM and SIGHUP into ``KeyboardInterrupt`` so the
``finally`` that calls ``cleanup`` also runs when the bench is stopped, as on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import psutil

TAG_VARIABLE = "PIWF_BENCH_TAG"


class Processes:
    """The registry of this invocation's children."""

    def __init__(self, pycache: Path | None = None) -> None:
        self.tag = uuid.uuid4().hex
        self.pycache = pycache
        self._children: list[subprocess.Popen[Any]] = []
        self._logs: list[IO[bytes]] = []

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) plus the bench tag (and the
        bytecode cache settings)."""
        env = dict(os.environ if base is None else base)
        env[TAG_VARIABLE] = self.tag
        if self.pycache is not None:
            # Bytecode caching as in a normal install (a session may disable it): every
            # child reads and writes .pyc files under one private prefix, never in src/.
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(self.pycache)
        return env

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        log: Path | None = None,
        cwd: Path | None = None,
        pipes: bool = False,
    ) -> subprocess.Popen[Any]:
        """Start ``argv`` in a new session, tagged, output to ``log`` (or pipes, or nowhere).

        With ``pipes`` the child's stdin and stdout are pipes (line-JSON workers); stderr
        still goes to ``log``.
        """
        handle: IO[bytes] | None = None
        if log is not None:
            handle = log.open("ab")
            self._logs.append(handle)
        sink: Any = handle if handle is not None else subprocess.DEVNULL
        child = subprocess.Popen(
            list(argv),
            env=self.environment(env),
            cwd=cwd,
            stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipes else sink,
            stderr=sink,
            start_new_session=True,
            close_fds=True,
        )
        self._children.append(child)
        return child

    def tagged(self) -> list[psutil.Process]:
        """Live processes (other than this one) that carry this invocation's tag."""
        found = []
        me = os.getpid()
        uid = os.getuid()
        for process in psutil.process_iter(["pid", "uids"]):
            with contextlib.suppress(psutil.Error):
                if process.pid == me or process.info["uids"].real != uid:
                    continue
                if process.environ().get(TAG_VARIABLE) == self.tag:
                    found.append(process)
        return found

    def cleanup(self, grace: float = 3.0) -> int:
        """Stop every child and every tagged process; return how many had to be killed."""
        live = [c for c in self._children if c.poll() is None]
        for child in live:
            _signal_group(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
        killed = 0
        for child in live:
            if child.poll() is None:
                _signal_group(child.pid, signal.SIGKILL)
                killed += 1
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=5)
        for process in self.tagged():
            with contextlib.suppress(psutil.Error):
                process.kill()
                killed += 1
        for child in self._children:
            for stream in (child.stdin, child.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        for handle in self._logs:
            handle.close()
        self._children.clear()
        self._logs.clear()
        return killed


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def install_signal_handlers() -> None:
    """SIGTERM and SIGHUP raise ``KeyboardInterrupt`` in the main thread (like Ctrl-C)."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)
