"""A claim that expires under a live server never strands its run.

The server is frozen (SIGSTOP) past the lease while a runner works, or the settlement after
a runner's exit fails; either way the run must be recovered through a control claim while
the server keeps running, with the runner's outcome recorded as ``claimLost``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from support.server import ServerProcess, wait_for

SLOW = """
import time
from pathlib import Path
from pi_workflows import Workflow, compute, edge

STARTED = Path({started!r})

def slow(ctx):
    with STARTED.open("a") as out:
        out.write("start\\n")
    time.sleep({seconds})
    return {{"slow": True}}

workflow = Workflow(
    "slow",
    start="slow",
    nodes={{"slow": compute(slow), "done": compute(lambda ctx: {{"done": True}})}},
    edges=[edge("slow", "done")],
)
"""


def _no_expired_claims(server: ServerProcess) -> bool:
    with server.client() as client:
        return client.status()["expiredClaims"] == 0


def test_a_server_frozen_past_the_lease_recovers_the_run_at_once(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: SIGSTOP of the server longer than the lease while a node runs; after SIGCONT
    the expired claim is taken over by control, the runner stopped as ``claimLost``, and
    the run resumes and completes without a server restart."""
    started = tmp_path / "started"
    server_process.write_workflow("slow", SLOW.format(started=str(started), seconds=4))
    server_process.start(PI_WORKFLOWS_LEASE_SECONDS="1")
    run_id = server_process.start_run("slow")
    wait_for(started.exists, 30, "the node to start")
    assert server_process.process is not None
    pid = server_process.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(2.5)  # the frozen server is the fault under test, not synchronisation
    finally:
        os.kill(pid, signal.SIGCONT)
    view = server_process.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert view["status"] == "completed", view
    sql = "SELECT outcome FROM run_runners WHERE run_id = ? ORDER BY runner_epoch"
    wait_for(
        lambda: all(o is not None for (o,) in server_process.query(sql, run_id)),
        30,
        "every runner's outcome to be recorded",
    )
    outcomes = [o for (o,) in server_process.query(sql, run_id)]
    assert outcomes[0] == "claimLost", outcomes
    assert outcomes[-1] == "exited"
    assert server_process.query("SELECT epoch FROM server_state") == [(1,)]  # same server
    wait_for(lambda: _no_expired_claims(server_process), 30, "no expired claims")
    assert server_process.diagnose() == []


def _runner_outcomes(server: ServerProcess, run_id: str) -> list[str]:
    """Every runner's outcome of ``run_id``, oldest first, once each one is recorded."""
    sql = "SELECT outcome FROM run_runners WHERE run_id = ? ORDER BY runner_epoch"
    wait_for(
        lambda: all(o is not None for (o,) in server.query(sql, run_id)),
        30,
        "every runner's outcome to be recorded",
    )
    return [str(o) for (o,) in server.query(sql, run_id)]


def _ever_paused(server: ServerProcess, run_id: str) -> bool:
    return bool(
        server.query(
            "SELECT 1 FROM events WHERE run_id = ? AND run_status = 'paused' LIMIT 1", run_id
        )
    )


def _run_with_stalls(server: ServerProcess, stalls: int) -> tuple[str, dict[str, Any]]:
    """A run of a two-node workflow on a server (lease 1 s) whose loop stalls 2.5 s before
    each of its first ``stalls`` runners is sent its launch; its id and its view once it
    completed, failed or paused."""
    server.write_workflow("slow", SLOW.format(started="/dev/null", seconds=0))
    server.start(
        faults=f"supervisor.stall_before_launch=flag:{stalls}", PI_WORKFLOWS_LEASE_SECONDS="1"
    )
    run_id = server.start_run("slow")
    return run_id, server.wait_status(run_id, {"completed", "failed", "paused"}, 30 * stalls + 30)


def test_a_claim_lost_before_the_runner_was_ready_requeues_the_run(
    server_process: ServerProcess,
) -> None:
    """Window: the server's loop stalls (as if frozen) past the lease between a runner's
    spawn and its ready (found by campaign seed 11: a server frozen just after a schedule
    fired). The runner is stopped as ``claimLost``; it did nothing, the server let its
    claim lapse: the run is recovered and completes, never parked ``runnerNoProgress``."""
    run_id, view = _run_with_stalls(server_process, 1)
    assert view["status"] == "completed", view
    assert not _ever_paused(server_process, run_id)
    outcomes = _runner_outcomes(server_process, run_id)
    assert outcomes[0] == "claimLost", outcomes
    assert outcomes[-1] == "exited", outcomes
    assert server_process.query("SELECT epoch FROM server_state") == [(1,)]  # same server
    assert server_process.diagnose() == []


def test_a_claim_that_lapses_before_every_ready_parks_the_run_after_three(
    server_process: ServerProcess,
) -> None:
    """The recovery of a lapsed claim is bounded: a server that stalls past the lease
    before each of three runners of a run is ready parks the run ``runnerNoProgress``,
    with the lapses in its detail, instead of launching runners for ever; ``run resume``
    then runs it to its end."""
    run_id, view = _run_with_stalls(server_process, 3)
    assert view["status"] == "paused", view
    assert view["parkReason"] == "runnerNoProgress", view
    assert "claim lapsed 3 times in a row" in view["parkDetail"], view
    assert _runner_outcomes(server_process, run_id) == ["claimLost"] * 3
    with server_process.client() as client:
        client.resume(run_id)
    view = server_process.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert view["status"] == "completed", view
    assert server_process.diagnose() == []


CRASH_ONCE = """
import os
from pathlib import Path
from pi_workflows import Workflow, compute, edge

MARK = Path({mark!r})

def first(ctx):
    return {{"first": True}}

def crash_once(ctx):
    if not MARK.exists():
        MARK.write_text("crashed")
        os.kill(os.getpid(), 9)
    return {{"second": True}}

workflow = Workflow(
    "crash",
    start="first",
    nodes={{"first": compute(first), "second": compute(crash_once)}},
    edges=[edge("first", "second")],
)
"""


def test_a_failed_settlement_is_swept_up_when_the_claim_expires(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: the runner crashed and settling its run failed (an injected store fault);
    the periodic sweep recovers the run once its claim expires, with no server restart."""
    server_process.write_workflow("crash", CRASH_ONCE.format(mark=str(tmp_path / "mark")))
    server_process.start(faults="supervisor.settle=raise", PI_WORKFLOWS_LEASE_SECONDS="1")
    run_id = server_process.start_run("crash")
    view = server_process.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert view["status"] == "completed", view
    assert view["output"] == {"second": True}
    assert "recovered a running run whose claim had expired" in server_process.tail(400)
    assert server_process.query("SELECT epoch FROM server_state") == [(1,)]
    assert server_process.diagnose() == []


ASK = """
from pi_workflows import Workflow, checkpoint

workflow = Workflow("ask", start="ask", nodes={"ask": checkpoint({"question": "Go?"})})
"""


def test_a_claim_its_own_runner_released_is_not_a_lost_claim(
    server_process: ServerProcess,
) -> None:
    """Window: the runner's ``node.wait`` committed (the run waits, the claim is released)
    and the runner has not exited yet when the backup renewal runs: the renewal leaves it
    alone, and the runner is recorded ``exited``, never ``claimLost`` nor stopped."""
    server_process.write_workflow("ask", ASK)
    server_process.start(
        faults="supervisor.delay_reply_after.node.wait=flag", PI_WORKFLOWS_LEASE_SECONDS="0.6"
    )
    run_id = server_process.start_run("ask")
    server_process.wait_status(run_id, "waiting")

    def outcome() -> str | None:
        rows = server_process.query("SELECT outcome FROM run_runners WHERE run_id = ?", run_id)
        return rows[0][0] if rows and rows[0][0] else None

    # The committed reply is held 3 s: several renewals (every 0.2 s) pass meanwhile.
    assert wait_for(outcome, 30, "the runner's exit to be recorded") == "exited"
    assert "lost at renewal" not in server_process.log.read_text(errors="replace")
    assert server_process.diagnose() == []


def test_a_runner_that_lingers_after_its_last_commit_is_stopped(
    server_process: ServerProcess,
) -> None:
    """Window: the runner's ``node.wait`` committed (its claim released) but the runner does
    not exit (here its reply is held 3 s, longer than the lease and twice the kill grace):
    the renewal stops it (outcome ``timedOut``) instead of letting it hold its slot; the run
    waits as committed."""
    server_process.write_workflow("ask", ASK)
    server_process.start(
        faults="supervisor.delay_reply_after.node.wait=flag",
        PI_WORKFLOWS_LEASE_SECONDS="0.6",
        PI_WORKFLOWS_KILL_GRACE_SECONDS="0.5",
    )
    run_id = server_process.start_run("ask")
    server_process.wait_status(run_id, "waiting")

    def outcome() -> str | None:
        rows = server_process.query("SELECT outcome FROM run_runners WHERE run_id = ?", run_id)
        return rows[0][0] if rows and rows[0][0] else None

    assert wait_for(outcome, 30, "the runner's exit to be recorded") == "timedOut"
    assert "did not exit after its last commit" in server_process.log.read_text(errors="replace")
    assert server_process.run(run_id)["status"] == "waiting"
    assert server_process.diagnose() == []
