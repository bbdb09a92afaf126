"""What happens to a run after its runner, and everything the runner started, ended.

Owns the runner's recorded outcome (``exited``, ``refused``, ``crashed``, ...) and the one
decision of the run's fate, made from committed state, never from the exit alone: leave it
(it waits, is paused, finished, or somebody else owns it), reject only a submission under
validation, time out a node, park it, or recover it for the next runner. Never signals or
waits for a process: the supervisor stops everything first and calls ``settle`` last.
"""

from __future__ import annotations

import logging

from pi_workflows.server.config import ServerConfig
from pi_workflows.server.runner_handle import RunnerHandle
from pi_workflows.store import (
    attempts,
    cleanups,
    faults,
    interaction_writes,
    lifecycle,
    takeover,
)
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database
from pi_workflows.store.errors import LeaseHeldError
from pi_workflows.store.runs import read_run
from pi_workflows.store.states import ParkReason, RunStatus

log = logging.getLogger(__name__)

# A node that keeps crashing its runner after making progress parks after this many tries.
MAX_ATTEMPTS_PER_VISIT = 3


def outcome(handle: RunnerHandle, code: int | None) -> str:
    """The ``run_runners.outcome`` of a runner that ended with ``code``."""
    if handle.claim_lost or handle.kill_reason == "claimLost":
        return "claimLost"
    if handle.kill_reason in ("cancelled", "stopping"):
        return "cancelled"
    if handle.kill_reason in ("timedOut", "nodeTimeout", "validationTimeout", "lingered"):
        return "timedOut"
    if code == 0 and handle.kill_reason is None:
        return "exited"
    if handle.refused is not None and handle.kill_reason in (None, "crashed"):
        return "refused"  # it stopped because the server said no: not a crash
    return "crashed"


def settle(db: Database, config: ServerConfig, handle: RunnerHandle, code: int | None) -> None:
    """Decide the run's fate from committed state after its runner (and all it started)
    ended.

    Fenced by the runner's claim while it is live; when it is gone (expired while the
    server was frozen or its loop stalled, or released by a wait or park the runner
    committed) a control claim is taken, so a running run is never left behind with a
    dead claim. A live claim of somebody else means the run moved on.
    """
    faults.hit("supervisor.settle")
    run = read_run(db.conn, handle.run_id)
    if run.status is not RunStatus.RUNNING:
        return  # it waits, is paused or finished: nothing to do
    try:
        fence = lifecycle.live_or_control(db, handle.run_id, handle.identity.claim)
    except LeaseHeldError:
        return  # somebody else owns it now
    if fence is not handle.identity.claim:
        log.warning("run %s: its runner's claim was gone; recovered by control", run.run_id)
    progressed = (
        handle.ready_revision is not None and run.execution_revision > handle.ready_revision
    )
    lapse_note = ""
    if not progressed and _lapsed(handle, fence, code):
        lapses = max(1, _lapses_in_a_row(db, handle.run_id))
        if lapses < MAX_ATTEMPTS_PER_VISIT:
            # The server let the claim lapse (it was frozen, or its loop stalled past the
            # lease) before the runner committed anything: nothing of the run failed, and a
            # submission it was validating is validated again by the next runner.
            takeover.recover(db, handle.run_id, claim=fence)
            return
        lapse_note = (
            f"; its claim lapsed {lapses} times in a row before its runner committed anything"
            " (the server was frozen or its loop stalled past the lease)"
        )
    conflict = handle.kill_reason is None and handle.refused_code == "revisionConflict"
    if (
        handle.kill_reason != "stopping"
        and not conflict  # the run moved under it: the next runner validates again
        and interaction_writes.abandon(db, fence, _ended_how(config, handle, code))
    ):
        return  # only that submission is rejected; the request waits for a corrected one
    if handle.kill_reason == "nodeTimeout":
        active = attempts.unfinished(db.conn, handle.run_id)
        if active is not None:
            takeover.time_out_node(
                db,
                fence,
                active.attempt_id,
                f"node {active.node_id} did not finish within its timeout",
            )
            return
    if handle.kill_reason == "stopping":
        lifecycle.park(db, fence, ParkReason.SERVER_STOPPED)
        return
    if handle.refused is not None and handle.kill_reason is None:
        _settle_refused(db, handle, fence)
        return
    detail = f"runner exited with {'code ' + str(code) if code is not None else 'no code'}"
    detail += lapse_note
    cleaning_up = cleanups.active(db.conn, handle.run_id) is not None
    if not progressed:
        if cleaning_up:  # a cleanup never parks and never loops: the run ends as it was ended
            cleanups.give_up(db, fence, f"its runner stopped before the cleanup ran ({detail})")
            return
        lifecycle.park(db, fence, ParkReason.RUNNER_NO_PROGRESS, detail)
        return
    active = attempts.unfinished(db.conn, handle.run_id)
    tries = 0 if active is None else attempts.crash_tries(db.conn, active)
    if active is not None and tries >= MAX_ATTEMPTS_PER_VISIT:
        if cleaning_up:
            cleanups.give_up(db, fence, f"it stopped its runner {tries} times; {detail}")
            return
        lifecycle.park(
            db,
            fence,
            ParkReason.RUNNER_CRASHED,
            f"node {active.node_id} stopped its runner {tries} times; {detail}",
        )
        return
    takeover.recover(db, handle.run_id, claim=fence)


def _lapsed(handle: RunnerHandle, fence: Claim, code: int | None) -> bool:
    """Whether the runner's claim lapsed under it: it was no longer live when the run was
    settled (the run still runs, so the runner's own commit did not release it) or the
    runner was stopped for its loss. Not for a server stop or a refused proposal, which
    settle as they always do."""
    if handle.kill_reason == "stopping" or handle.refused is not None:
        return False
    return fence is not handle.identity.claim or outcome(handle, code) == "claimLost"


def _lapses_in_a_row(db: Database, run_id: str) -> int:
    """How many of the run's newest runners, in a row, ended with their claim lost."""
    rows = db.conn.execute(
        "SELECT outcome FROM run_runners WHERE run_id = ? ORDER BY runner_epoch DESC LIMIT ?",
        (run_id, MAX_ATTEMPTS_PER_VISIT + 1),
    ).fetchall()
    lapses = 0
    for (ended,) in rows:
        if ended != "claimLost":
            break
        lapses += 1
    return lapses


def _settle_refused(db: Database, handle: RunnerHandle, fence: Claim) -> None:
    """The runner stopped because the server refused its proposal (``handle.refused``).

    Not a crash: its effects' receipts were kept when the refusal was answered
    (``runner_messages``), so nothing it did is lost. A revision conflict means the run
    moved under it: the run is recovered and the next runner reads the new state (up to
    ``MAX_ATTEMPTS_PER_VISIT`` attempts of one node visit). Any other refusal would be
    refused again: the run parks ``proposalRefused`` with what was refused.
    """
    active = attempts.unfinished(db.conn, handle.run_id)
    again = active is None or (attempts.crash_tries(db.conn, active) < MAX_ATTEMPTS_PER_VISIT)
    if handle.refused_code == "revisionConflict" and again:
        takeover.recover(db, handle.run_id, claim=fence)
        return
    lifecycle.park(
        db,
        fence,
        ParkReason.PROPOSAL_REFUSED,
        f"the server refused the runner: {handle.refused}; run resume tries again",
    )


def _ended_how(config: ServerConfig, handle: RunnerHandle, code: int | None) -> str:
    if handle.refused is not None and handle.kill_reason is None:
        return f"the server refused its {handle.refused}"
    if handle.kill_reason == "validationTimeout":
        return f"it ran longer than {config.validate_seconds:g} s or past the deadline"
    if code is not None and code < 0:
        return f"the runner was killed by signal {-code}"
    return f"the runner exited with code {code}" if code is not None else "the runner ended"
