"""How a process's start time is measured, for the `processStart` fields both sides record.

A pid alone proves nothing (pids are reused), so the server and the runner child record a
process as its pid and its start time, and the server signals a recorded group only while
its leader still has both. The start time is the kernel's `starttime` (field 22 of
`/proc/PID/stat`: clock ticks since boot) divided by the tick rate: one process always reads
the same value, and a wall-clock change (NTP, a resumed VM) never moves it, which the epoch
form (`psutil.Process.create_time`, which adds the boot time of `/proc/stat`) does not
promise.

Owns only that measurement: it reads `/proc` and never signals or waits on anything.
"""

from __future__ import annotations

import os

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
"""The kernel's clock-tick rate for `/proc` times (USER_HZ, 100 on Linux)."""

SAME_START_SECONDS = 0.5 / TICKS_PER_SECOND
"""Two recorded start times closer than half a tick are the same reading."""


def process_start(pid: int) -> float | None:
    """Seconds from boot to the start of process ``pid``, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            line = stat.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces or ')'.
    fields = line[line.rfind(b")") + 2 :].split()
    return int(fields[19]) / TICKS_PER_SECOND
