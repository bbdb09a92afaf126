"""The runner template's request/answer channel stays in step whatever happens to a caller.

Real template process, real forked runners. Campaign seed 64 found the hole: a runner
stopped while it was being forked cancelled the fork after its request was sent, and every
later request read the answer meant for the one before (a fork took a reap's reply and
recorded a dead pid), so each later runner of the server was lost at start.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path

import pytest

from pi_workflows.server.template import RunnerTemplate

pytestmark = pytest.mark.timeout(60)


def _holds(pid: int, inode: int) -> bool:
    """Whether process ``pid`` has the socket ``inode`` among its open descriptors."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fd) == f"socket:[{inode}]" for fd in fds.iterdir())
    except (FileNotFoundError, ProcessLookupError):
        return False


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


async def _fork(template: RunnerTemplate) -> tuple[asyncio.Task[int], socket.socket, int]:
    """Start a fork of a runner over a new channel: the task, our end, the inode of the
    end the child gets."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    inode = os.fstat(theirs.fileno()).st_ino
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    task = asyncio.create_task(template.fork("runner", theirs.fileno(), out_write, err_write))
    await asyncio.sleep(0)  # the request is sent; the answer is awaited
    task.add_done_callback(
        lambda _: [os.close(fd) for fd in (out_write, err_write, out_read, err_read)]
    )
    task.add_done_callback(lambda _: theirs.close())
    return task, ours, inode


def test_a_fork_cancelled_mid_answer_never_hands_its_answer_to_the_next_request() -> None:
    async def scenario() -> None:
        template = RunnerTemplate()
        try:
            assert await template.wait_ready()
            cut_short, first_channel, _ = await _fork(template)
            cut_short.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cut_short
            task, channel, inode = await _fork(template)
            pid = await task
            # The pid answered is the child that holds the channel this fork gave it.
            assert _holds(pid, inode)
            channel.close()  # the runner ends at its closed channel
            deadline = time.monotonic() + 20
            while not _zombie(pid):
                assert time.monotonic() < deadline, "the forked runner did not end"
                await asyncio.sleep(0.02)
            code = await template.reap(pid)
            assert isinstance(code, int)
            first_channel.close()
        finally:
            template.close()

    asyncio.run(scenario())
