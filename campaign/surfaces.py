"""The public surfaces the campaign drives: the `pi-workflows` CLI and the Python client.

Runs in the campaign driver. Every state-changing command is one *logical* command with one
idempotency key: when its CLI process is killed, or the connection or the server is lost
before a definitive answer, it is sent again with the same key until the server answers
(accepted, adopted or refused) or a deadline passes. Everything either surface prints or
raises is fed to the leak scanner. The CLI's error output must be one line.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from campaign.leaks import LeakScanner
from campaign.processes import Processes
from pi_workflows.client import Client
from pi_workflows.client.errors import (
    ClientError,
    CommandError,
    ConnectionLostError,
    ServerStartError,
    ServerUnavailableError,
    UnavailableError,
)

COMMAND_DEADLINE: Final = 90.0
"""How long one logical command keeps being retried before it counts as lost."""

CLI_TIMEOUT: Final = 60.0


@dataclass
class Answer:
    """The definitive outcome of one logical command."""

    status: str  # "ok", "refused" or "lost"
    body: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    code: str = ""
    tries: int = 1
    killed: int = 0  # CLI processes of this command the campaign killed

    @property
    def ok(self) -> bool:
        """The server accepted or adopted it."""
        return self.status == "ok"


class Surfaces:
    """The CLI and the Python client of one seed's state directory."""

    def __init__(
        self,
        home: Path,
        project: Path,
        env: dict[str, str],
        processes: Processes,
        leaks: LeakScanner,
        client_id: str,
        note: Callable[[str], None],
    ) -> None:
        self.home = home
        self.project = project
        self.env = env
        self.processes = processes
        self.leaks = leaks
        self.note = note
        self.executable = cli_executable()
        self.client = Client(
            home, client_id=client_id, autostart=True, timeout=20.0, start_timeout=30.0
        )
        self.kill_next_cli: float | None = None
        """Armed by a `killCli` fault: the next CLI command is SIGKILLed after this delay."""
        self.cli_kills = 0
        self.last_error = ""
        """The message of the last read that failed (a server that cannot start says why)."""
        self.problems: list[str] = []
        """Contract breaks seen at the surface (a traceback, a usage error, a bad reply)."""

    # --- the CLI --------------------------------------------------------------------------

    def cli(self, *args: str) -> tuple[int, Any, str]:
        """Run one CLI command once; return (exit code, parsed JSON stdout or None, stderr)."""
        argv = [*self.executable, "--home", str(self.home), *args]
        proc = subprocess.Popen(
            argv,
            cwd=self.project,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.processes.note(proc.pid, "cli")
        delay, self.kill_next_cli = self.kill_next_cli, None
        try:
            out, err = proc.communicate(timeout=delay if delay is not None else CLI_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            out, err = proc.communicate()
            if delay is not None:
                self.cli_kills += 1
                self.note(f"killed CLI {' '.join(args[:2])} after {delay:.2f} s")
                return -9, None, ""
            self.problems.append(f"`pi-workflows {' '.join(args)}` hung for {CLI_TIMEOUT:.0f} s")
            return -9, None, ""
        if delay is not None:
            self.kill_next_cli = delay  # it finished first: the next command gets the kill
        text_out, text_err = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        self.leaks.feed(f"CLI stdout of {args[0]} {args[1] if len(args) > 1 else ''}", text_out)
        self.leaks.feed(f"CLI stderr of {args[0]} {args[1] if len(args) > 1 else ''}", text_err)
        parsed = None
        if text_out.strip().startswith(("{", "[")):
            try:
                parsed = json.loads(text_out)
            except json.JSONDecodeError:
                self.problems.append(f"`pi-workflows {' '.join(args)}` printed invalid JSON")
        # A failure is one line: `{"error": {"code", "message"}}` on stdout under --json,
        # else `pi-workflows: error: ...` on stderr.
        error = _error_of(parsed) if "--json" in args else None
        if proc.returncode not in (0, 1, 3) or (
            proc.returncode and error is None and not _one_error_line(text_err)
        ):
            self.problems.append(
                f"`pi-workflows {' '.join(args)}` exited {proc.returncode} with stdout "
                f"{text_out.strip()[-300:]!r} and stderr {text_err.strip()[-300:]!r}"
            )
        if error is not None:
            return proc.returncode, parsed, f"{error[0]}: {error[1]}"
        return proc.returncode, parsed, text_err.strip()

    def cli_command(self, *args: str) -> Answer:
        """One logical CLI command (its idempotency key is in `args`), retried until answered."""
        deadline = time.monotonic() + COMMAND_DEADLINE
        tries = killed = 0
        while True:
            tries += 1
            code, out, err = self.cli(*args, "--json")
            if code == 0:
                return Answer(
                    "ok", out if isinstance(out, dict) else {}, tries=tries, killed=killed
                )
            if code == 1:
                error = _error_of(out)
                return Answer(
                    "refused",
                    message=err,
                    code=error[0] if error else "",
                    tries=tries,
                    killed=killed,
                )
            if code == -9:
                killed += 1
            if time.monotonic() > deadline:
                return Answer("lost", message=err, tries=tries, killed=killed)
            time.sleep(0.2)

    # --- the Python client ----------------------------------------------------------------

    def call(self, method: str, *args: Any, **kwargs: Any) -> Answer:
        """One logical client command, retried with its idempotency key until answered."""
        deadline = time.monotonic() + COMMAND_DEADLINE
        tries = 0
        last: ClientError
        while True:
            tries += 1
            try:
                receipt = getattr(self.client, method)(*args, **kwargs)
            except UnavailableError as exc:  # the server is stopping: retry after it
                self._feed_error(method, exc)
                last = exc
            except CommandError as exc:
                self._feed_error(method, exc)
                return Answer("refused", message=exc.message, code=exc.code, tries=tries)
            except (ConnectionLostError, ServerUnavailableError, ServerStartError) as exc:
                self._feed_error(method, exc)
                last = exc
            except ClientError as exc:
                self._feed_error(method, exc)
                self.problems.append(f"client {method}: {type(exc).__name__}: {exc.message}")
                last = exc
            else:
                body = receipt.body if hasattr(receipt, "body") else {}
                self.leaks.feed(f"client reply to {method}", json.dumps(body))
                return Answer("ok", dict(body), tries=tries)
            self.client.close()
            if time.monotonic() > deadline:
                return Answer("lost", message=str(last), tries=tries)
            time.sleep(0.2)

    def read(self, method: str, *args: Any) -> Any:
        """A read through the client that auto-starts the server; None if it failed."""
        try:
            value = getattr(self.client, method)(*args)
        except ClientError as exc:
            self._feed_error(method, exc)
            self.last_error = exc.message
            self.client.close()
            return None
        self.leaks.feed(f"client {method}", json.dumps(value, default=str))
        return value

    def read_no_start(self, method: str, *args: Any) -> Any:
        """A read that never starts a server (for observing while it may be down)."""
        self.client.autostart = False
        try:
            return self.read(method, *args)
        finally:
            self.client.autostart = True

    def _feed_error(self, method: str, exc: ClientError) -> None:
        self.leaks.feed(f"client error of {method}", exc.message)

    def close(self) -> None:
        """Close the client's connection."""
        self.client.close()


def cli_executable() -> list[str]:
    """The `pi-workflows` console script of this environment."""
    beside = Path(sys.executable).parent / "pi-workflows"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("pi-workflows")
    if found is None:
        raise RuntimeError("the pi-workflows command is not installed in this environment")
    return [found]


def _error_of(parsed: Any) -> tuple[str, str] | None:
    """The `{"error": {"code", "message"}}` a failing command prints under `--json`."""
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        error = parsed["error"]
        code, message = error.get("code"), error.get("message")
        if isinstance(code, str) and isinstance(message, str) and "\n" not in message:
            return code, message
    return None


def _one_error_line(stderr: str) -> bool:
    """The CLI's failure contract: exactly one line, `pi-workflows: error: ...`."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    return len(lines) == 1 and lines[0].startswith("pi-workflows: error:")
