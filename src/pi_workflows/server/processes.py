"""Process identity and stopping process groups the server did not spawn itself.

Runs in the server. A recorded process is ours only while a process with its pid still has
its recorded start time: a pid alone proves nothing (pids are reused, also after a reboot).
``stop_groups`` therefore signals a group only while its leader matches its record, and is
checked again immediately before every signal; a group whose leader is gone or is another
process is never signalled. Used for the shell commands a runner recorded (when the runner
ends, and at start-up for an earlier server's runners) and for an earlier server's orphaned
runner groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import dataclass

import psutil

from pi_workflows.protocol.process_start import SAME_START_SECONDS, process_start

log = logging.getLogger(__name__)

_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class Identity:
    """A process as recorded: its pid (which is also its group id) and its start time."""

    pid: int
    process_start: float


def _process(identity: Identity) -> psutil.Process | None:
    try:
        process = psutil.Process(identity.pid)
    except psutil.Error:
        return None
    # Read after the handle: a pid reused in between reads as the newcomer's start.
    started = process_start(identity.pid)
    if started is not None and abs(started - identity.process_start) < SAME_START_SECONDS:
        return process
    return None


def owns_group(identity: Identity) -> bool:
    """True while the recorded leader exists (a zombie too: it still holds its group id)."""
    return _process(identity) is not None


def alive(identity: Identity) -> bool:
    """True while the recorded leader runs (exists and is not a zombie)."""
    process = _process(identity)
    if process is None:
        return False
    try:
        return bool(process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _signal_if_ours(identity: Identity, sig: signal.Signals) -> bool:
    if not owns_group(identity):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(identity.pid, sig)
        return True
    return False


async def stop_groups(identities: list[Identity], grace_seconds: float) -> list[Identity]:
    """SIGTERM (and SIGCONT) every group whose leader is still ours, wait up to
    ``grace_seconds`` for the leaders to exit, then SIGKILL the groups still ours.

    Returns the identities that were signalled (the ones that were still ours).
    """
    signalled = [i for i in identities if _signal_if_ours(i, signal.SIGTERM)]
    for identity in signalled:
        _signal_if_ours(identity, signal.SIGCONT)  # a stopped group must be able to act
    loop = asyncio.get_running_loop()
    until = loop.time() + grace_seconds
    # Not our children: there is no exit to await portably, so poll their identity.
    while any(alive(i) for i in signalled) and loop.time() < until:  # noqa: ASYNC110
        await asyncio.sleep(_POLL_SECONDS)
    for identity in signalled:
        # Also after a polite exit: stragglers of the group go with it.
        if alive(identity):
            log.info("process group %d did not stop within the grace period", identity.pid)
        _signal_if_ours(identity, signal.SIGKILL)
    return signalled
