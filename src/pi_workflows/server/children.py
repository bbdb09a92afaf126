"""Spawning and stopping child processes: own session, inherited channel, polite kill.

Runs in the server. Every child (resolver or runner) starts in a new session, so it leads
its own process group and everything it spawns in that group can be signalled with it.
Stopping is always SIGTERM to the group, a bounded grace, SIGKILL, then reaping.

The server notices a child's exit without reaping it (a pidfd, or ``waitid(WNOWAIT)`` where
there is none) and reaps it only after a last SIGKILL to its group: while the exited leader
is an unreaped zombie its pid, and so its group id, cannot be reused, so that SIGKILL can
only reach stragglers of our own child, never an unrelated process that got the pid later.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections import deque
from dataclasses import dataclass, field

from pi_workflows.protocol import MAX_FRAME_BYTES

CHANNEL_ENV = "PI_WORKFLOWS_RUNNER_FD"
_POLL_SECONDS = 0.05  # only where the platform has no pidfd to wait on


@dataclass
class Process:
    """A spawned child process in its own session, with bounded output tails."""

    process: subprocess.Popen[bytes]
    tail_bytes: int
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    stdout_tail: deque[bytes] = field(default_factory=deque)
    stderr_tail: deque[bytes] = field(default_factory=deque)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        """The child's pid, which is also its process group id."""
        return self.process.pid

    def output_tail(self) -> str:
        """The last bytes of stdout and stderr, for diagnostics."""
        out = b"".join(self.stdout_tail).decode(errors="replace")
        err = b"".join(self.stderr_tail).decode(errors="replace")
        return (f"[stdout]\n{out}\n" if out else "") + (f"[stderr]\n{err}" if err else "")


@dataclass
class Child(Process):
    """A spawned ``python -m`` child with its private channel (resolver, runner)."""

    reader: asyncio.StreamReader = field(kw_only=True)
    writer: asyncio.StreamWriter = field(kw_only=True)


async def _drain(stream: asyncio.StreamReader, tail: deque[bytes], limit: int) -> None:
    """Read a pipe to its end keeping only the last ``limit`` bytes (memory stays flat)."""
    kept = 0
    while chunk := await stream.read(65536):
        tail.append(chunk)
        kept += len(chunk)
        while kept - len(tail[0]) >= limit:
            kept -= len(tail.popleft())


async def _pipe_reader(pipe: object) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_FRAME_BYTES, loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
    return reader


def _has_exited(pid: int) -> bool:
    """Whether ``pid`` (our child) has exited, without reaping it."""
    try:
        status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
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
                while not _has_exited(child.pid):
                    await readable.wait()
                    readable.clear()
            finally:
                loop.remove_reader(pidfd)
        else:
            while not _has_exited(child.pid):  # noqa: ASYNC110 - no pidfd: nothing to await
                await asyncio.sleep(_POLL_SECONDS)
    finally:
        if pidfd is not None:
            os.close(pidfd)
        child.exited.set()


async def spawn(module: str, *, tail_bytes: int, env: dict[str, str] | None = None) -> Child:
    """Start ``python -m MODULE`` in a new session with a socketpair channel."""
    parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child_env = dict(os.environ if env is None else env)
    child_env[CHANNEL_ENV] = str(child_sock.fileno())
    try:
        # Not asyncio's subprocess: its child watcher reaps at once, and we must reap only
        # after the last kill of the group (see the module docstring). fork+exec is short.
        process = subprocess.Popen(  # noqa: ASYNC220
            [sys.executable, "-m", module],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(child_sock.fileno(),),
            env=child_env,
            start_new_session=True,
        )
    except BaseException:
        parent_sock.close()
        raise
    finally:
        child_sock.close()
    reader, writer = await asyncio.open_unix_connection(sock=parent_sock, limit=MAX_FRAME_BYTES)
    child = Child(process, tail_bytes, reader=reader, writer=writer)
    await _supervise_output(child)
    return child


async def _supervise_output(child: Process) -> None:
    process = child.process
    assert process.stdout is not None
    assert process.stderr is not None
    stdout = await _pipe_reader(process.stdout)
    stderr = await _pipe_reader(process.stderr)
    child.tasks = [
        asyncio.create_task(_watch_exit(child)),
        asyncio.create_task(_drain(stdout, child.stdout_tail, child.tail_bytes)),
        asyncio.create_task(_drain(stderr, child.stderr_tail, child.tail_bytes)),
    ]


async def spawn_command(
    argv: list[str], *, cwd: str | None, env: dict[str, str], tail_bytes: int
) -> Process:
    """Start ``argv`` in a new session with stdin on a pipe the server holds open (closing
    it asks the program to end) and stdout/stderr drained into bounded tails."""
    process = subprocess.Popen(  # noqa: ASYNC220 - see ``spawn``
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    child = Process(process, tail_bytes)
    await _supervise_output(child)
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


async def stop(child: Process, grace_seconds: float) -> int:
    """SIGTERM the child's group, SIGKILL it after ``grace_seconds``, reap; return the code.

    The code is the exit status, or minus the signal number that ended the child.
    """
    if not child.exited.is_set():
        signal_group(child.pid, signal.SIGTERM)
        signal_group(child.pid, signal.SIGCONT)
        if not await wait_exited(child, grace_seconds):
            signal_group(child.pid, signal.SIGKILL)
            await child.exited.wait()
    # The leader is an unreaped zombie: its group id is still ours, stragglers go now.
    signal_group(child.pid, signal.SIGKILL)
    code = child.process.wait()
    await close(child)
    return code


async def close(child: Process) -> None:
    """Close the channel (if any) and finish draining output (after the process exited)."""
    if isinstance(child, Child):
        child.writer.close()
        with contextlib.suppress(Exception):
            await child.writer.wait_closed()
    if child.process.stdin is not None:
        with contextlib.suppress(OSError):
            child.process.stdin.close()
    for task in child.tasks:
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(task, 2.0)
        task.cancel()
