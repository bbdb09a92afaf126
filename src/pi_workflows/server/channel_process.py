"""The channel process: run `python -m pi_workflows.channels` while a channel is configured,
restart it with backoff when it ends, and say why in `<state dir>/channels/process.json`.

Runs in the server, as one supervision task of the serve phase. The child is a client of
this server (like the web page): it answers decisions through `decision.answer`, so nothing
here takes part in any decision, and a channel that fails never holds up a run. The child
gets its own session (process group), stdin on a pipe only the server holds (it exits when
that closes, so a SIGKILLed server leaves no channel process behind for long), a bounded
stderr tail (its last line is the reason a failure shows), and a small environment: no
workflow's variables and none of the server's beyond what a network client needs.

When the configuration file changes (checked every `CHECK_SECONDS`), the child is stopped
and started again with it; when no channel is left, it is stopped. A child that ends by
itself is started again after a delay doubling from `PI_WORKFLOWS_CHANNEL_BACKOFF_SECONDS`
to `MAX_BACKOFF_SECONDS` (reset once a child lived `STABLE_SECONDS`); one that exits
`EXIT_MISSING_EXTRA` (the channels extra is not installed) waits for a configuration change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Final

from pi_workflows.channels import config as channel_config
from pi_workflows.channels.state import write_process
from pi_workflows.server import children

__all__ = ["EXIT_MISSING_EXTRA", "ChannelProcess", "channel_environment"]

log = logging.getLogger(__name__)

CHECK_SECONDS: Final = 1.0
MAX_BACKOFF_SECONDS: Final = 60.0
STABLE_SECONDS: Final = 30.0
EXIT_MISSING_EXTRA: Final = 3
"""The channel process's exit status when the channels extra is not installed."""
_TAIL_BYTES: Final = 8192
_PASSED: Final = (
    "PATH", "HOME", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR",
    "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy",
    "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE",
)  # fmt: skip


def channel_environment(home: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The channel process's environment: what a network client needs, the state directory,
    and the `PI_WORKFLOWS_CHANNEL_*` settings (docs/channels.md)."""
    server = dict(os.environ if environ is None else environ)
    env = {k: v for k, v in server.items() if k in _PASSED}
    env.update({k: v for k, v in server.items() if k.startswith("PI_WORKFLOWS_CHANNEL_")})
    env["PI_WORKFLOWS_HOME"] = str(home)
    return env


def _backoff_start() -> float:
    try:
        return max(0.05, float(os.environ.get("PI_WORKFLOWS_CHANNEL_BACKOFF_SECONDS", "1")))
    except ValueError:
        return 1.0


class ChannelProcess:
    """Supervises the one channel process of a server."""

    def __init__(self, home: Path, epoch: int, kill_grace_seconds: float) -> None:
        self.home = home
        self.epoch = epoch
        self.kill_grace_seconds = kill_grace_seconds
        self.restarts = 0
        self.child: children.Process | None = None  # the running child, if any

    def _config_key(self) -> tuple[int, int, int] | None:
        """What identifies the configuration file's content (None: no file)."""
        path = channel_config.channels_dir(self.home) / channel_config.CONFIG_NAME
        try:
            info = path.stat()
        except OSError:
            return None
        return (info.st_mtime_ns, info.st_size, info.st_ino)

    def _configured(self) -> tuple[bool, str]:
        """Whether a channel is configured, and why not when the file cannot be read."""
        try:
            return bool(channel_config.load(self.home).channels), ""
        except channel_config.ChannelConfigError as exc:
            return False, exc.message

    def _record(self, state: str, detail: str = "", **more: Any) -> None:
        record = {
            "state": state,
            "detail": detail,
            "at": int(time.time() * 1000),
            "restarts": self.restarts,
            "serverEpoch": self.epoch,
            **more,
        }
        try:
            write_process(self.home, record)
        except (OSError, channel_config.ChannelConfigError) as exc:
            log.warning("cannot record the channel process's state: %s", exc)

    async def run(self) -> None:
        """Supervise until cancelled (the server's shutdown); the child is stopped then."""
        delay = _backoff_start()
        waiting_for_change: tuple[int, int, int] | None = None
        try:
            while True:
                key = self._config_key()
                configured, problem = self._configured() if key is not None else (False, "")
                if not configured or key == waiting_for_change:
                    if key is None or not configured:
                        waiting_for_change = None
                        if problem:
                            self._record("failed", problem)
                    await self._changed(key)
                    continue
                waiting_for_change = None
                assert key is not None
                started = time.monotonic()
                code, reason = await self._run_child(key)
                if code is None:
                    continue  # stopped for a configuration change: start again at once
                if code == EXIT_MISSING_EXTRA:
                    self._record("failed", reason)
                    waiting_for_change = key
                    continue
                delay = (
                    _backoff_start()
                    if time.monotonic() - started >= STABLE_SECONDS
                    else min(MAX_BACKOFF_SECONDS, delay * 2)
                )
                self.restarts += 1
                self._record("restarting", reason, retryInMs=int(delay * 1000))
                log.warning("the channel process ended (%s); starting it again in %.1fs",
                            reason, delay)  # fmt: skip
                await self._changed(key, delay)
        finally:
            child, self.child = self.child, None
            if child is not None:
                await children.stop(child, self.kill_grace_seconds)
                self._record("stopped", "the server stopped")

    async def _changed(self, key: tuple[int, int, int] | None, seconds: float = 3600.0) -> None:
        """Wait up to `seconds`, returning early when the configuration changes."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self._config_key() == key:  # noqa: ASYNC110 - a file has no event to wait on
            await asyncio.sleep(min(CHECK_SECONDS, max(0.0, deadline - time.monotonic())))

    async def _run_child(self, key: tuple[int, int, int]) -> tuple[int | None, str]:
        """Start the child and wait until it ends (its code and why) or the configuration
        changes (None: it was stopped for that)."""
        argv = [sys.executable, "-m", "pi_workflows.channels", "--home", str(self.home)]
        try:
            child = await children.spawn_command(
                argv, cwd=str(self.home), env=channel_environment(self.home),
                tail_bytes=_TAIL_BYTES, keep_stdout=False,
            )  # fmt: skip
        except OSError as exc:
            return 1, f"cannot start the channel process: {exc}"
        self.child = child
        self._record("running", "", pid=child.pid)
        while not await children.wait_exited(child, CHECK_SECONDS):
            if self._config_key() != key:
                self.child = None
                await children.stop(child, self.kill_grace_seconds)
                self._record("restarting", "the configuration changed")
                return None, ""
        self.child = None
        code = await child.reap()
        await children.close(child)
        lines = [line for line in child.error_tail().splitlines() if line.strip()]
        said = lines[-1].strip() if lines else ""
        with contextlib.suppress(ValueError):
            said = said.removeprefix("pi-workflows channels: ")
        reason = f"exit code {code}" + (f": {said}" if said else "")
        return (code if code is not None else 1), reason[:500]
