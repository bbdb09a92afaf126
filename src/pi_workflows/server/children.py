"""Spawning and stopping child processes: own session, inherited channel, polite kill.

Runs in the server. Every child (resolver or runner) starts in a new session, so it leads
its own process group and everything it spawns can be signalled with it. Stopping is always
SIGTERM to the group, a bounded grace, SIGKILL, then waiting for the exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections import deque
from dataclasses import dataclass, field

from pi_workflows.protocol import MAX_FRAME_BYTES

CHANNEL_ENV = "PI_WORKFLOWS_RUNNER_FD"


@dataclass
class Child:
    """A spawned child with its private channel and bounded output tails."""

    process: asyncio.subprocess.Process
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    tail_bytes: int
    stdout_tail: deque[bytes] = field(default_factory=deque)
    stderr_tail: deque[bytes] = field(default_factory=deque)
    drains: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        """The child's pid, which is also its process group id."""
        return self.process.pid

    def output_tail(self) -> str:
        """The last bytes of stdout and stderr, for diagnostics."""
        out = b"".join(self.stdout_tail).decode(errors="replace")
        err = b"".join(self.stderr_tail).decode(errors="replace")
        return (f"[stdout]\n{out}\n" if out else "") + (f"[stderr]\n{err}" if err else "")


async def _drain(stream: asyncio.StreamReader | None, tail: deque[bytes], limit: int) -> None:
    """Read a pipe to its end keeping only the last ``limit`` bytes (memory stays flat)."""
    if stream is None:
        return
    kept = 0
    while chunk := await stream.read(65536):
        tail.append(chunk)
        kept += len(chunk)
        while kept - len(tail[0]) >= limit:
            kept -= len(tail.popleft())


async def spawn(module: str, *, tail_bytes: int, env: dict[str, str] | None = None) -> Child:
    """Start ``python -m MODULE`` in a new session with a socketpair channel."""
    parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child_env = dict(os.environ if env is None else env)
    child_env[CHANNEL_ENV] = str(child_sock.fileno())
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            module,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=(child_sock.fileno(),),
            env=child_env,
            start_new_session=True,
        )
    finally:
        child_sock.close()
    reader, writer = await asyncio.open_unix_connection(sock=parent_sock, limit=MAX_FRAME_BYTES)
    child = Child(process, reader, writer, tail_bytes)
    child.drains = [
        asyncio.create_task(_drain(process.stdout, child.stdout_tail, tail_bytes)),
        asyncio.create_task(_drain(process.stderr, child.stderr_tail, tail_bytes)),
    ]
    return child


def signal_group(pid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to the process group led by ``pid``; False if it is already gone."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


async def stop(child: Child, grace_seconds: float) -> int:
    """SIGTERM the child's group, SIGKILL it after ``grace_seconds``, wait; return the code."""
    if child.process.returncode is None:
        signal_group(child.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(child.process.wait(), grace_seconds)
        except TimeoutError:
            signal_group(child.pid, signal.SIGKILL)
    code = await child.process.wait()
    # Grandchildren that outlived the leader still carry its group id.
    signal_group(child.pid, signal.SIGKILL)
    await close(child)
    return code


async def close(child: Child) -> None:
    """Close the channel and finish draining output (after the process has exited)."""
    child.writer.close()
    with contextlib.suppress(Exception):
        await child.writer.wait_closed()
    for task in child.drains:
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(task, 2.0)
        task.cancel()
