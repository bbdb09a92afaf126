"""The runner template: one pre-imported child the server forks runners and resolvers from.

Runs in the server. Starting ``python -m pi_workflows.runner`` costs an interpreter and
~100 ms of imports per run; the template (``pi_workflows.runner.template``) pays that once
and forks a fresh child per request in a few milliseconds. The template imports the
runner's and resolver's code only — never workflow code, never the store — and each forked
child is what a spawned one would be: its own session and process group, its own channel,
its own stdout and stderr pipes drained by the server, no descriptor of the database, the
server socket or the lock. The server watches each child's exit through a pidfd, kills what
is left of its group while the template still holds the unreaped zombie (so the group id
cannot have been reused), and only then asks the template to reap it.

If the template cannot start, dies or stops answering, ``fork`` raises ``TemplateError`` and
the caller spawns the child directly; the next ``fork`` starts a new template. A request
whose caller is cancelled before the answer arrives drops the template too: requests and
answers share one socket, and an unread answer must never be taken for the next one's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
from typing import Any

from pi_workflows.protocol import CHANNEL_FD_ENV as CHANNEL_ENV

log = logging.getLogger(__name__)

TEMPLATE_MODULE = "pi_workflows.runner.template"
ANSWER_SECONDS = 10.0
START_SECONDS = 30.0


class TemplateError(Exception):
    """The template could not fork (it is gone, broken, or too slow): spawn directly."""


class RunnerTemplate:
    """The server's handle on its template child (started on first use)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._lock = asyncio.Lock()
        self._ready = False  # the template said it finished importing
        self.forks = 0

    @property
    def pid(self) -> int | None:
        """The template's pid while it runs."""
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        """Start the template now (it imports in the background) unless it runs."""
        if self._process is None or self._process.poll() is not None:
            self._drop()
            self._start()

    def _start(self) -> None:
        server_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        env[CHANNEL_ENV] = str(child_end.fileno())
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", TEMPLATE_MODULE],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=None,  # the server's log: a template that cannot start says why there
                pass_fds=(child_end.fileno(),),
                env=env,
                start_new_session=True,
            )
        finally:
            child_end.close()
        server_end.setblocking(False)
        self._control = server_end
        self._ready = False
        log.info("runner template started (pid %d)", self._process.pid)

    def _drop(self) -> None:
        """Forget a broken template (it exits when its channel closes)."""
        if self._control is not None:
            self._control.close()
        if self._process is not None:
            self._process.kill()
            self._process.wait()
        self._control = None
        self._process = None

    async def wait_ready(self, seconds: float = START_SECONDS) -> bool:
        """Wait until the template has imported the runner code (start-up uses it so that
        the first fork after it is warm); False if it did not say so in time."""
        async with self._lock:
            try:
                await self._await_ready(seconds)
            except TemplateError as exc:
                log.warning("%s; children are spawned directly until it works", exc)
                return False
            return True

    async def _await_ready(self, seconds: float) -> None:
        self.start()
        if self._ready:
            return
        control = self._control
        assert control is not None
        loop = asyncio.get_running_loop()
        try:
            hello = await asyncio.wait_for(loop.sock_recv(control, 4096), seconds)
        except (OSError, TimeoutError) as exc:
            self._drop()
            raise TemplateError(f"the runner template did not start ({exc})") from None
        if not hello or not json.loads(hello).get("ready"):
            self._drop()
            raise TemplateError("the runner template did not start")
        self._ready = True

    async def _ask(self, request: dict[str, Any], fds: list[int], seconds: float) -> Any:
        await self._await_ready(START_SECONDS)
        control = self._control
        assert control is not None
        loop = asyncio.get_running_loop()
        data = json.dumps(request).encode()
        try:
            socket.send_fds(control, [data], fds)
            answer = await asyncio.wait_for(loop.sock_recv(control, 4096), seconds)
        except (OSError, TimeoutError) as exc:
            self._drop()
            raise TemplateError(f"the runner template did not answer ({exc})") from None
        except asyncio.CancelledError:
            # The answer to this request would be read as the answer to the next one (a
            # fork would take a reap's reply, or a dead child's pid): a template out of step
            # is dropped, and a child it forked meanwhile ends at its closed channel.
            self._drop()
            raise
        if not answer:
            self._drop()
            raise TemplateError("the runner template exited")
        reply = json.loads(answer)
        if "error" in reply:
            raise TemplateError(f"the runner template refused: {reply['error']}")
        return reply

    async def fork(self, module: str, channel: int, stdout: int, stderr: int) -> int:
        """Fork a ``runner`` or ``resolve`` child over the given descriptors; its pid."""
        async with self._lock:
            reply = await self._ask(
                {"op": "fork", "module": module}, [channel, stdout, stderr], ANSWER_SECONDS
            )
            self.forks += 1
            return int(reply["pid"])

    async def reap(self, pid: int) -> int | None:
        """Reap an exited child (after its group was killed); its exit code if known."""
        async with self._lock:
            try:
                reply = await self._ask({"op": "reap", "pid": pid}, [], ANSWER_SECONDS)
            except TemplateError as exc:
                log.warning("could not reap child %d: %s", pid, exc)
                return None
            code = reply.get("code")
            return code if isinstance(code, int) else None

    def close(self) -> None:
        """Stop the template (server shutdown)."""
        self._drop()
