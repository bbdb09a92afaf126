"""Starting and stopping child processes: own session, private channel, polite kill.

Runs in the server. Every child (resolver, runner, headless agent) starts in a new session,
so it leads its own process group and everything it spawns in that group can be signalled
with it. Stopping is always SIGTERM to the group, a bounded grace, SIGKILL, then reaping.

A resolver or runner is forked from the runner template when there is one (see
``template.py``; no interpreter start, no imports), else spawned as ``python -m MODULE``.
Either way the server notices the exit without reaping (a pidfd; for its own children
``waitid(WNOWAIT)`` where there is no pidfd) and reaps only after a last SIGKILL to the
group: while the exited leader is an unreaped zombie (held by the server or by the
template) its pid, and so its group id, cannot be reused, so that SIGKILL can only reach
stragglers of our own child, never an unrelated process that got the pid later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

import psutil

from pi_workflows.protocol import CHANNEL_FD_ENV, MAX_FRAME_BYTES

if TYPE_CHECKING:
    from pi_workflows.server.template import RunnerTemplate

log = logging.getLogger(__name__)

CHANNEL_ENV = CHANNEL_FD_ENV  # the child reads its channel descriptor's number here
_POLL_SECONDS = 0.05  # only where the platform has no pidfd to wait on
_TEMPLATE_MODULES = {"pi_workflows.runner": "runner", "pi_workflows.runner.resolve": "resolve"}


@dataclass
class Process:
    """A started child process in its own session, with bounded output tails.

    Exactly one of ``popen`` (the server's own child) and ``template`` (forked by the
    runner template, which reaps it) is set.
    """

    pid: int
    tail_bytes: int
    popen: subprocess.Popen[bytes] | None = None
    template: RunnerTemplate | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    stdout_tail: deque[bytes] = field(default_factory=deque)
    stderr_tail: deque[bytes] = field(default_factory=deque)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def stdin(self) -> IO[bytes] | None:
        """The pipe to the child's stdin, when the server holds one."""
        return None if self.popen is None else self.popen.stdin

    def error_tail(self) -> str:
        """The last bytes of stderr only (a program whose stdout carries content that is not
        the server's to keep, such as a headless Pi's conversation)."""
        return b"".join(self.stderr_tail).decode(errors="replace")

    def output_tail(self) -> str:
        """The last bytes of stdout and stderr, for diagnostics."""
        out = b"".join(self.stdout_tail).decode(errors="replace")
        err = b"".join(self.stderr_tail).decode(errors="replace")
        return (f"[stdout]\n{out}\n" if out else "") + (f"[stderr]\n{err}" if err else "")

    async def reap(self) -> int | None:
        """Reap the exited child; its exit code (minus the signal number), if known."""
        if self.popen is not None:
            return self.popen.wait()
        assert self.template is not None
        return await self.template.reap(self.pid)


@dataclass
class Child(Process):
    """A resolver or runner with its private channel."""

    reader: asyncio.StreamReader = field(kw_only=True)
    writer: asyncio.StreamWriter = field(kw_only=True)


async def _drain(stream: asyncio.StreamReader, tail: deque[bytes], limit: int) -> None:
    """Read a pipe to its end keeping only the last ``limit`` bytes (memory stays flat;
    nothing when ``limit`` is 0)."""
    kept = 0
    while chunk := await stream.read(65536):
        if limit <= 0:
            continue
        tail.append(chunk)
        kept += len(chunk)
        while kept - len(tail[0]) >= limit:
            kept -= len(tail.popleft())


async def _pipe_reader(pipe: object) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_FRAME_BYTES, loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
    return reader


def _has_exited(child: Process) -> bool:
    """Whether the child has exited, without reaping it."""
    if child.popen is None:
        try:
            return bool(psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return True
    try:
        status = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return status is not None


async def _watch_exit(child: Process) -> None:
    """Set ``child.exited`` once the process has exited (it stays unreaped)."""
    loop = asyncio.get_running_loop()
    pidfd: int | None = None
    opener = getattr(os, "pidfd_open", None)
    if opener is not None:
        with contextlib.suppress(OSError):
            pidfd = opener(child.pid)
    try:
        if pidfd is not None:
            readable = asyncio.Event()
            loop.add_reader(pidfd, readable.set)
            try:
                await readable.wait()  # a pidfd is readable once its process has exited
            finally:
                loop.remove_reader(pidfd)
        else:
            while not _has_exited(child):  # noqa: ASYNC110 - no pidfd: nothing to await
                await asyncio.sleep(_POLL_SECONDS)
    finally:
        if pidfd is not None:
            os.close(pidfd)
        child.exited.set()


async def spawn(
    module: str,
    *,
    tail_bytes: int,
    env: dict[str, str] | None = None,
    template: RunnerTemplate | None = None,
) -> Child:
    """Start a resolver or runner child with a socketpair channel: forked from ``template``
    when one is given and answers (``env`` is then the template's), else spawned."""
    parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if template is not None and module in _TEMPLATE_MODULES and env is None:
            forked = await _fork(template, _TEMPLATE_MODULES[module], child_sock, tail_bytes)
            if forked is not None:
                pid, stdout, stderr = forked
                reader, writer = await _open(parent_sock)
                child = Child(pid, tail_bytes, template=template, reader=reader, writer=writer)
                await _supervise_output(child, stdout, stderr)
                return child
        popen = _popen(module, child_sock, env)
    except BaseException:
        parent_sock.close()
        raise
    finally:
        child_sock.close()
    reader, writer = await _open(parent_sock)
    child = Child(popen.pid, tail_bytes, popen=popen, reader=reader, writer=writer)
    assert popen.stdout is not None
    assert popen.stderr is not None
    await _supervise_output(child, popen.stdout, popen.stderr)
    return child


async def _open(sock: socket.socket) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_unix_connection(sock=sock, limit=MAX_FRAME_BYTES)


def _popen(
    module: str, child_sock: socket.socket, env: dict[str, str] | None
) -> subprocess.Popen[bytes]:
    child_env = dict(os.environ if env is None else env)
    child_env[CHANNEL_ENV] = str(child_sock.fileno())
    # Not asyncio's subprocess: its child watcher reaps at once, and we must reap only after
    # the last kill of the group (see the module docstring). fork+exec is short.
    return subprocess.Popen(
        [sys.executable, "-m", module],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(child_sock.fileno(),),
        env=child_env,
        start_new_session=True,
    )


async def _fork(
    template: RunnerTemplate, kind: str, child_sock: socket.socket, tail_bytes: int
) -> tuple[int, IO[bytes], IO[bytes]] | None:
    """Fork ``kind`` from the template; None (spawn instead) if the template fails."""
    from pi_workflows.server.template import TemplateError  # noqa: PLC0415 - cycle

    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        pid = await template.fork(kind, child_sock.fileno(), out_write, err_write)
    except TemplateError as exc:
        log.warning("spawning the %s directly: %s", kind, exc)
        for fd in (out_read, err_read):
            os.close(fd)
        return None
    except BaseException:  # cancelled: nobody reads these pipes
        for fd in (out_read, err_read):
            os.close(fd)
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    return pid, os.fdopen(out_read, "rb", buffering=0), os.fdopen(err_read, "rb", buffering=0)


async def _supervise_output(
    child: Process, stdout: IO[bytes], stderr: IO[bytes], *, keep_stdout: bool = True
) -> None:
    out = await _pipe_reader(stdout)
    err = await _pipe_reader(stderr)
    child.tasks = [
        asyncio.create_task(_watch_exit(child)),
        asyncio.create_task(_drain(out, child.stdout_tail, child.tail_bytes if keep_stdout else 0)),
        asyncio.create_task(_drain(err, child.stderr_tail, child.tail_bytes)),
    ]


async def spawn_command(
    argv: list[str],
    *,
    cwd: str | None,
    env: dict[str, str],
    tail_bytes: int,
    spawned: Callable[[int], None] | None = None,
    keep_stdout: bool = True,
) -> Process:
    """Start ``argv`` in a new session with stdin on a pipe the server holds open (closing
    it asks the program to end) and stdout/stderr drained into bounded tails (stdout read
    and dropped when not ``keep_stdout``).

    ``spawned(pid)`` runs right after the exec, before this coroutine first yields, so the
    server handles nothing from the child before it returns; if it raises, the child's group
    is killed and reaped and the error propagates."""
    popen = subprocess.Popen(  # noqa: ASYNC220 - see ``spawn``
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    if spawned is not None:
        try:
            spawned(popen.pid)
        except BaseException:
            signal_group(popen.pid, signal.SIGKILL)
            popen.communicate()  # reaped, and the pipes closed
            raise
    child = Process(popen.pid, tail_bytes, popen=popen)
    assert popen.stdout is not None
    assert popen.stderr is not None
    await _supervise_output(child, popen.stdout, popen.stderr, keep_stdout=keep_stdout)
    return child


def signal_group(pid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to the process group led by ``pid``; False if it is already gone.

    Only for our own unreaped children: their group id cannot have been reused.
    """
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def wait_exited(child: Process, seconds: float | None) -> bool:
    """Wait up to ``seconds`` for the child to exit (it stays unreaped); True if it did."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(child.exited.wait(), seconds)
    return child.exited.is_set()


async def stop(child: Process, grace_seconds: float) -> int | None:
    """SIGTERM the child's group, SIGKILL it after ``grace_seconds``, reap; return the code.

    The code is the exit status, or minus the signal number that ended the child (None when
    the template that forked it is gone).
    """
    if not child.exited.is_set():
        signal_group(child.pid, signal.SIGTERM)
        signal_group(child.pid, signal.SIGCONT)
        if not await wait_exited(child, grace_seconds):
            signal_group(child.pid, signal.SIGKILL)
            await child.exited.wait()
    # The leader is an unreaped zombie: its group id is still ours, stragglers go now.
    signal_group(child.pid, signal.SIGKILL)
    code = await child.reap()
    await close(child)
    return code


async def close(child: Process) -> None:
    """Close the channel (if any) and finish draining output (after the process exited)."""
    if isinstance(child, Child):
        child.writer.close()
        with contextlib.suppress(Exception):
            await child.writer.wait_closed()
    if child.stdin is not None:
        with contextlib.suppress(OSError):
            child.stdin.close()
    for task in child.tasks:
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(task, 2.0)
        task.cancel()
