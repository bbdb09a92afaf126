"""The CPU scheduling policy of runner processes: batch work, never ahead of the server.

Runs in the runner template and in every runner and resolver child; never opens the
database. A runner (and whatever its nodes start: shell commands inherit the policy)
takes the CPU under Linux's ``SCHED_BATCH``: the same share of the CPU as any normal
process of the same nice value, but a runner woken by a reply does not preempt the process
that is running. On a busy machine the server, which every run's progress goes through,
and the user's interactive programs then keep the CPU they were using instead of yielding
it to workflow code at every reply; on an idle core nothing changes. Measured with both
cores saturated (``make bench``, section parked) it is worth a few per cent of runs parked
and completed a second.
"""

from __future__ import annotations

import contextlib
import os


def become_batch() -> None:
    """Put this process under ``SCHED_BATCH`` (priority 0). Needs no privilege; where the
    platform has no such policy or refuses it, the process keeps the normal one."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
