"""A real pi-workflows server for the bench: a private state directory, HOME, and project.

Runs in the bench process. The server is ``python -m pi_workflows.server run`` (what
``pi-workflows server start`` spawns), with ``PI_WORKFLOWS_HOME`` and ``HOME`` pointing into
a temp directory, idle exit off, and every other ``PI_WORKFLOWS_*`` setting at its default
(capacity included). The bench talks to it only through the public ``Client``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from bench.processes import Processes
from pi_workflows.client import Client, ClientError

TERMINAL = frozenset({"completed", "failed", "timed_out", "cancelled", "paused", "ambiguous"})


class BenchError(RuntimeError):
    """A measurement could not be taken (a run failed, a process did not answer)."""


class OurServer:
    """One server process (restartable) over one temp state directory."""

    def __init__(
        self,
        procs: Processes,
        root: Path,
        extra_env: Mapping[str, str] | None = None,
        wrapper: Sequence[str] = (),
    ) -> None:
        self.procs = procs
        self.root = root
        self.wrapper = list(wrapper)
        """A command the server runs under (``strace ...``); then ``process`` is that one."""
        self.home = root / "state"
        self.user_home = root / "home"
        self.project = root / "project"
        for path in (self.user_home, self.project):
            path.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PI_WORKFLOWS_")}
        env.update(
            {
                "PI_WORKFLOWS_HOME": str(self.home),
                "HOME": str(self.user_home),
                "PI_WORKFLOWS_IDLE_EXIT_SECONDS": "0",
            }
        )
        env.update(extra_env or {})
        self.env = env
        self.process: subprocess.Popen[Any] | None = None
        self._client: Client | None = None

    @property
    def pid(self) -> int:
        """The live server's pid."""
        if self.process is None:
            raise BenchError("the server is not running")
        return self.process.pid

    def spawn(self) -> int:
        """Spawn the server process; return ``time.monotonic_ns()`` taken just before."""
        self.close_client()
        started = time.monotonic_ns()
        self.process = self.procs.spawn(
            [
                *self.wrapper,
                *(sys.executable, "-m", "pi_workflows.server", "run", "--home", str(self.home)),
            ],
            env=self.env,
            log=self.root / "server.log",
            cwd=self.root,
        )
        return started

    def wait_ready(self, timeout: float = 30.0) -> int:
        """Poll-connect until the server says hello; return the monotonic ns it did."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise BenchError(f"the server exited with {self.process.returncode}: {self.tail()}")
            try:
                client = Client(self.home, autostart=False, timeout=30.0, start_timeout=1.0)
                client.connect()
            except ClientError:
                if time.monotonic() > deadline:
                    raise BenchError(f"the server did not answer in {timeout:g} s") from None
                time.sleep(0.002)
                continue
            at = time.monotonic_ns()
            self._client = client
            return at

    def start(self) -> OurServer:
        """Spawn and wait until it answers."""
        self.spawn()
        self.wait_ready()
        return self

    @property
    def client(self) -> Client:
        """A connected client (created on first use after a (re)start)."""
        if self._client is None:
            self._client = Client(self.home, autostart=False, timeout=60.0)
        return self._client

    def close_client(self) -> None:
        """Drop the bench's connection (before a kill or a stop)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def descendants(self) -> list[psutil.Process]:
        """Every live process below the server that works for a run (runners, resolvers,
        shell commands, agents): not the runner template, which holds no run."""
        if self.process is None or self.process.poll() is not None:
            return []
        found: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.process.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if "pi_workflows.runner.template" not in child.cmdline():
                        found.append(child)
        return found

    def rss_bytes(self) -> int:
        """The server process's resident set size."""
        return int(psutil.Process(self.pid).memory_info().rss)

    def template_rss_bytes(self) -> int:
        """The resident set size of the runner template(s) below the server (0 if none)."""
        total = 0
        if self.process is None or self.process.poll() is not None:
            return 0
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.process.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if "pi_workflows.runner.template" in child.cmdline():
                        total += int(child.memory_info().rss)
        return total

    def kill(self) -> None:
        """SIGKILL the server (its runners are left as orphans, as after a real crash)."""
        self.close_client()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the server and wait for its orderly shutdown (SIGKILL after ``timeout``)."""
        self.close_client()
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def tail(self, lines: int = 20) -> str:
        """The end of the server log."""
        log = self.root / "server.log"
        if not log.exists():
            return ""
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    # --- runs ------------------------------------------------------------------------------

    def wait_run(
        self,
        run_id: str,
        until: frozenset[str] = TERMINAL,
        timeout: float = 120.0,
        poll: float = 0.025,
    ) -> dict[str, Any]:
        """Poll ``run.get`` every ``poll`` seconds until the run's status is in ``until``."""
        deadline = time.monotonic() + timeout
        while True:
            view = self.client.get_run(run_id)
            if view.get("status") in until:
                return view
            if time.monotonic() > deadline:
                raise BenchError(f"run {run_id} still {view.get('status')} after {timeout:g} s")
            time.sleep(poll)

    def run_to_end(
        self, workflow: Path, run_input: dict[str, Any], poll: float = 0.025
    ) -> dict[str, Any]:
        """Start ``workflow`` and wait for it to finish; fail unless it completed.

        Returns the timing marks: ``t0Ns`` (monotonic, just before ``run.start`` was sent),
        ``t0WallNs``, ``ackNs`` (monotonic, when the receipt arrived), ``finishedWallNs``
        (the completing transaction's time, server clock, ms resolution) and the run's
        output (the last node's stamps).
        """
        t0_wall = time.time_ns()
        t0 = time.monotonic_ns()
        receipt = self.client.start_run(str(workflow), run_input)
        ack = time.monotonic_ns()
        view = self.wait_run(str(receipt["runId"]), poll=poll)
        if view.get("status") != "completed":
            raise BenchError(
                f"run of {workflow.name} ended {view.get('status')}: {view.get('error')}"
                f" {view.get('parkReason')} {view.get('parkDetail')}"
            )
        return {
            "t0Ns": t0,
            "t0WallNs": t0_wall,
            "ackNs": ack,
            "finishedWallNs": int(view["finishedAt"]) * 1_000_000,
            "output": view["output"],
            "runId": view["runId"],
        }
