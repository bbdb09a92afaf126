"""A recorded process is ours only while its pid has exactly its recorded start time.

Start times are read since boot, in clock ticks (1/100 s): one process always reads the same
value, and a process started one tick later (a reused pid, as in a fast pid wrap) is another
process. A tolerance wider than a tick once let recovery signal a stand-in that started
within 50 ms of a recorded command.
"""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from pi_workflows.protocol.process_start import process_start
from pi_workflows.server.processes import Identity, alive, owns_group

pytestmark = pytest.mark.timeout(30)

TICK = 1 / os.sysconf("SC_CLK_TCK")


def test_a_process_matches_its_own_record_and_not_one_a_tick_away() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = process_start(child.pid)
        assert started is not None
        assert owns_group(Identity(child.pid, started))
        assert alive(Identity(child.pid, started))
        assert not owns_group(Identity(child.pid, started - TICK))
        assert not owns_group(Identity(child.pid, started + TICK))
    finally:
        child.kill()
        child.wait()
    assert not owns_group(Identity(child.pid, started))


def test_the_start_time_is_measured_from_boot_not_from_the_wall_clock() -> None:
    """The epoch form adds /proc/stat's boot time, which moves when the wall clock is set."""
    started = process_start(os.getpid())
    assert started is not None
    assert abs(started + psutil.boot_time() - psutil.Process().create_time()) < 1.0
    with open("/proc/uptime", encoding="ascii") as uptime:
        since_boot = float(uptime.read().split()[0])
    assert 0 <= started <= since_boot + 1
