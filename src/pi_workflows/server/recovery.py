"""Start-up recovery: what a new server does before it serves anyone.

Runs in the server, after the epoch bump and before the socket is bound. In order:
kill runner children left by earlier servers that still match their recorded identity
(pid and process start time), expire the claims those servers held, recover every
expired running run (settling applying effects), resume runs parked by a clean server
stop, and close interactive requests whose deadlines passed while no server ran.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal

import psutil

from pi_workflows.store import interactions, lifecycle, runners, takeover
from pi_workflows.store.database import Database
from pi_workflows.store.errors import StoreError
from pi_workflows.store.states import ParkReason

log = logging.getLogger(__name__)

# Process start times are floats read from /proc; equal within this tolerance means same.
START_TIME_TOLERANCE = 0.05


def _same_process(pid: int, process_start: float) -> bool:
    try:
        return abs(psutil.Process(pid).create_time() - process_start) < START_TIME_TOLERANCE
    except psutil.Error:
        return False


def _group_members(pgid: int, not_before: float) -> list[int]:
    """Processes still in group ``pgid`` that started after its leader did."""
    members = []
    for process in psutil.process_iter(["pid", "create_time"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError, OSError):
            if (
                os.getpgid(process.info["pid"]) == pgid
                and process.info["create_time"] >= not_before - START_TIME_TOLERANCE
            ):
                members.append(process.info["pid"])
    return members


def kill_orphans(db: Database, server_epoch: int) -> int:
    """Kill the process groups of runners earlier servers left behind; return how many.

    A pid alone proves nothing: a group is signalled only when its leader still has the
    recorded start time, or, with the leader gone, only processes of that group that
    started after it.
    """
    killed = 0
    for record in runners.live_records(db.conn):
        if record.server_epoch >= server_epoch:
            continue
        if record.pid is not None and record.process_start is not None:
            if _same_process(record.pid, record.process_start):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(record.pid, signal.SIGKILL)
                    killed += 1
            else:
                for pid in _group_members(record.pid, record.process_start):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                        killed += 1
        runners.mark_exited(db, record.runner_epoch, "orphaned")
    return killed


def recover(db: Database, server_epoch: int) -> dict[str, int]:
    """Run every start-up recovery step; return counts for the log."""
    orphans = kill_orphans(db, server_epoch)
    released = takeover.release_claims_of_dead_servers(db, server_epoch)
    recovered = takeover.recover_all_expired(db)
    resumed = 0
    for (run_id,) in db.conn.execute(
        "SELECT run_id FROM runs WHERE status = 'paused' AND park_reason = ?",
        (ParkReason.SERVER_STOPPED.value,),
    ).fetchall():
        with contextlib.suppress(StoreError):
            lifecycle.resume(db, run_id)
            resumed += 1
    expired = expire_due_requests(db)
    counts = {
        "orphansKilled": orphans,
        "claimsReleased": len(released),
        "runsRecovered": len(recovered),
        "runsResumed": resumed,
        "requestsExpired": expired,
    }
    log.info("start-up recovery: %s", counts)
    return counts


def expire_due_requests(db: Database) -> int:
    """Close every open request whose deadline has passed; return how many."""
    count = 0
    for request_id in interactions.due_requests(db.conn, db.clock.now_ms()):
        try:
            takeover.expire_request(db, request_id)
            count += 1
        except StoreError as exc:
            log.warning("could not expire request %s: %s", request_id, exc)
    return count
