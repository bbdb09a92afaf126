"""Start-up recovery: what a new server does before it serves anyone.

Runs in the server, after the epoch bump and before the socket is bound. In order:
stop runner children left by earlier servers, and the process groups they recorded, that
still match their recorded identity (pid and process start time), expire the claims those
servers held, recover every expired running run (settling applying effects), resume runs
parked by a clean server stop, and close interactive requests whose deadlines passed while
no server ran.
"""

from __future__ import annotations

import contextlib
import logging

from pi_workflows.server import processes
from pi_workflows.server.processes import Identity
from pi_workflows.store import agents, interactions, lifecycle, runners, takeover
from pi_workflows.store.database import Database
from pi_workflows.store.errors import StoreError
from pi_workflows.store.states import ParkReason

log = logging.getLogger(__name__)


async def stop_orphans(db: Database, server_epoch: int, grace_seconds: float) -> int:
    """Stop what runners and headless agents of earlier servers left running; return how
    many groups it stopped.

    Each runner's own group, every group it recorded (shell commands in their own sessions)
    and every headless Pi of a detached run get SIGTERM, a grace period, then SIGKILL, all
    together, and only while their
    leader still has the recorded pid and start time: a reused pid is never signalled, and
    a group whose leader is gone is left alone (nothing proves its members are ours).
    """
    records = [r for r in runners.live_records(db.conn) if r.server_epoch < server_epoch]
    identities = [
        Identity(r.pid, r.process_start)
        for r in records
        if r.pid is not None and r.process_start is not None
    ]
    for record in records:
        identities.extend(
            Identity(p.pid, p.process_start)
            for p in runners.live_processes(db.conn, record.runner_epoch)
        )
    orphaned_agents = [a for a in agents.live(db.conn) if a.server_epoch < server_epoch]
    identities.extend(Identity(a.pid, a.process_start) for a in orphaned_agents)
    stopped = await processes.stop_groups(identities, grace_seconds) if identities else []
    for record in records:
        runners.mark_exited(db, record.runner_epoch, "orphaned")
    for agent in orphaned_agents:
        agents.record_ended(db, agent.agent_id, None, "orphaned: stopped at server start")
    return len(stopped)


async def recover(db: Database, server_epoch: int, grace_seconds: float) -> dict[str, int]:
    """Run every start-up recovery step; return counts for the log."""
    orphans = await stop_orphans(db, server_epoch, grace_seconds)
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
        "orphanGroupsStopped": orphans,
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
