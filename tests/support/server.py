"""A real server process in a temp state directory, for integration tests.

Starts ``python -m pi_workflows.server run`` with its own ``PI_WORKFLOWS_HOME`` and ``HOME``,
waits for its hello, and hands out real clients. Teardown stops it and kills anything it or
its runners left behind, so no test leaks processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from pi_workflows.client import Client

TERMINAL = {"completed", "failed", "timed_out", "cancelled"}


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def written_pid(path: Path, timeout: float = 30.0, what: str = "a pid") -> int:
    """The pid a workflow writes into ``path``, once it is there whole (a file that exists
    may still be empty: ``write_text`` creates it before it writes)."""

    def read() -> int | None:
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        return int(text) if text.isdigit() else None

    return int(wait_for(read, timeout, what))


class ServerProcess:
    """One server for one temp state directory; can be killed and started again."""

    # How the interpreter starts the server; a test may run it under a probe (``-c CODE``).
    python_args: tuple[str, ...] = ("-m", "pi_workflows.server")

    def __init__(self, root: Path, env: dict[str, str] | None = None) -> None:
        self.root = root
        self.home = root / "state"
        self.user_home = root / "home"
        self.project = root / "project"
        self.user_home.mkdir(parents=True, exist_ok=True)
        (self.project / ".pi" / "workflows").mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "PI_WORKFLOWS_HOME": str(self.home),
            "HOME": str(self.user_home),
            "PI_WORKFLOWS_IDLE_EXIT_SECONDS": "0",
            "PI_WORKFLOWS_KILL_GRACE_SECONDS": "2",
            # A stop mid-node waits this long for the node's boundary (the product's default
            # is 10 s); tests of the drain set their own.
            "PI_WORKFLOWS_DRAIN_SECONDS": "2",
            **(env or {}),
        }
        self.env.pop("PI_WORKFLOWS_FAULTS", None)
        self.process: subprocess.Popen[bytes] | None = None
        self.seen: set[int] = set()
        self.log = root / "server.log"

    # --- process control -----------------------------------------------------------------

    def start(self, faults: str | None = None, **extra_env: str) -> ServerProcess:
        """Start the server and wait until it answers."""
        env = dict(self.env, **extra_env)
        if faults:
            env["PI_WORKFLOWS_FAULTS"] = faults
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, *self.python_args, "run", "--home", str(self.home)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        self.seen.add(self.process.pid)
        wait_for(self._answers, 30, "the server to answer")
        return self

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"server exited with {self.process.returncode}:\n{self.tail()}")
        try:
            with Client(self.home, autostart=False, timeout=5) as client:
                client.status()
        except Exception:
            return False
        return True

    def tail(self, lines: int = 40) -> str:
        """The end of the server log."""
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def remember_children(self) -> None:
        """Note every descendant of the server, so teardown can kill leftovers."""
        if self.process is None:
            return
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.process.pid).children(recursive=True):
                self.seen.add(child.pid)

    def kill(self) -> int:
        """SIGKILL the server (its runners are left as orphans, as after a real crash)."""
        assert self.process is not None
        self.remember_children()
        self.process.kill()
        return self.process.wait(timeout=30)

    def wait_exit(self, timeout: float = 30) -> int:
        """Wait for the server to exit by itself (a fault point, an idle exit)."""
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        """SIGTERM the server and wait for its orderly shutdown."""
        if self.process is not None and self.process.poll() is None:
            self.remember_children()
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def cleanup(self) -> None:
        """Stop the server and kill every process it ever had."""
        self.stop()
        for pid in self.seen:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    # --- helpers -------------------------------------------------------------------------

    def client(self, **kwargs: Any) -> Client:
        """A real client that does not start servers by itself."""
        kwargs.setdefault("autostart", False)
        kwargs.setdefault("timeout", 30)
        return Client(self.home, **kwargs)

    def cli(
        self, *args: str, timeout: float = 90, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the real ``pi-workflows --home HOME ARGS`` in a child process, from the project
        directory, with the server's environment (``env`` instead, when given)."""
        return subprocess.run(
            [sys.executable, "-m", "pi_workflows.cli.main", "--home", str(self.home), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=self.project,
            env=self.env if env is None else env,
        )

    def write_workflow(self, name: str, source: str) -> Path:
        """Write ``<project>/.pi/workflows/NAME.workflow.py``."""
        path = self.project / ".pi" / "workflows" / f"{name}.workflow.py"
        path.write_text(textwrap.dedent(source))
        return path

    def write_module(self, name: str, source: str) -> Path:
        """Write a helper module next to the project's workflows."""
        path = self.project / ".pi" / "workflows" / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        return path

    def user_env(self) -> dict[str, str]:
        """What a client in a shell of the server's user records besides the test's own
        environment: that user's ``HOME`` and the server's ``PATH`` (a run records its
        starting client's environment, never the server's: docs/authoring.md)."""
        return {"HOME": str(self.user_home), "PATH": self.env.get("PATH", "")}

    def start_run(self, workflow: str, run_input: Any = None, **kwargs: Any) -> str:
        """Start a run of a project workflow, as a client in the server user's shell
        (``user_env``), and return its id."""
        kwargs.setdefault("env", self.user_env())
        with self.client() as client:
            receipt = client.start_run(
                workflow, run_input or {}, project_dir=self.project, **kwargs
            )
        return str(receipt["runId"])

    def run(self, run_id: str) -> dict[str, Any]:
        """The run's current view."""
        with self.client() as client:
            return dict(client.get_run(run_id))

    def wait_status(
        self, run_id: str, statuses: set[str] | str, timeout: float = 60
    ) -> dict[str, Any]:
        """Poll the run until its status is one of ``statuses``."""
        wanted = {statuses} if isinstance(statuses, str) else statuses
        seen: dict[str, Any] = {}

        def check() -> dict[str, Any] | None:
            seen["run"] = self.run(run_id)
            return seen["run"] if seen["run"]["status"] in wanted else None

        try:
            return dict(wait_for(check, timeout, f"run {run_id} to be {sorted(wanted)}"))
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last view: {seen.get('run')}\n{self.tail()}") from None

    def diagnose(self) -> list[Any]:
        """``state.diagnose`` through the server."""
        with self.client() as client:
            return list(client.diagnose())

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """Read the database directly (read-only) for assertions the protocol does not show."""
        conn = sqlite3.connect(f"file:{self.home / 'state.sqlite'}?mode=ro", uri=True)
        try:
            return [tuple(row) for row in conn.execute(sql, args).fetchall()]
        finally:
            conn.close()


@contextlib.contextmanager
def running_server(root: Path, env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    """A started server that is always cleaned up."""
    server = ServerProcess(root, env)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()
