"""Drive the real Pi's terminal UI under tmux, for a smoke test of what a person sees.

Owns one private tmux server (`-L NAME`, its socket under the test's directory) running one
Pi TUI with the same private configuration as `PiProcess` (HOME, agent directory, mock model,
only our extension). Text is typed with `send-keys -l`, keys such as `Enter` are sent alone,
and the screen is read with `capture-pane -p`; every wait polls the screen with a deadline.
Stopping kills the tmux server, which hangs up on Pi.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pi.support.pi_rpc import WAIT_SECONDS, PiProcess

__all__ = ["TuiPi", "require_tmux"]

TMUX = "/usr/bin/tmux"
COLUMNS, ROWS = 110, 32


def require_tmux() -> str:
    """The tmux executable; fails (never skips) when it is missing."""
    found = TMUX if Path(TMUX).exists() else shutil.which("tmux")
    if not found:
        pytest.fail("tmux is needed for the Pi TUI smoke test", pytrace=False)
    return found


class TuiPi:
    """One Pi TUI in a private tmux server; use as a context manager."""

    def __init__(self, pi: PiProcess, name: str = "pi-tui") -> None:
        self.tmux = require_tmux()
        self.pi = pi
        self.name = name
        self.tmpdir = pi.root / "tmux"

    def _run(self, *args: str) -> str:
        result = subprocess.run(
            [self.tmux, "-L", self.name, *args],
            env={"TMUX_TMPDIR": str(self.tmpdir), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=WAIT_SECONDS,
            check=True,
        )
        return result.stdout

    def start(self) -> TuiPi:
        """Start tmux with Pi in its one pane, `COLUMNS` x `ROWS`."""
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        env = self.pi.prepare()
        env["TERM"] = "xterm-256color"
        command = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *self.pi.argv(mode=None)]
        self._run(
            "new-session", "-d", "-s", "main", "-x", str(COLUMNS), "-y", str(ROWS),
            "-c", str(self.pi.cwd), shlex.join(command),
        )  # fmt: skip
        return self

    def stop(self) -> None:
        """Kill the tmux server (Pi gets a hang-up and exits)."""
        subprocess.run(
            [self.tmux, "-L", self.name, "kill-server"],
            env={"TMUX_TMPDIR": str(self.tmpdir), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            timeout=WAIT_SECONDS,
            check=False,
        )

    def __enter__(self) -> TuiPi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def type(self, text: str) -> None:
        """Type `text` literally."""
        self._run("send-keys", "-t", "main", "-l", text)

    def key(self, key: str) -> None:
        """Press one key (`Enter`, `Escape`, `Down`)."""
        self._run("send-keys", "-t", "main", key)

    def screen(self) -> str:
        """The pane's visible text."""
        return self._run("capture-pane", "-p", "-t", "main")

    def wait_screen(
        self, predicate: Callable[[str], bool], what: str, timeout: float = WAIT_SECONDS
    ) -> str:
        """The screen once `predicate(screen)` holds; fails after `timeout` with the screen."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n{screen}")
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
