"""Taking a run: a runner's claim (queued to running) and the server's control claim.

``claim`` starts a queued run under a new generation for a runner; ``control_claim`` takes a
running run whose claim expired or was released (never a live one), bumping the generation
so the old owner is fenced out; ``live_or_control`` keeps a runner's claim while it is live
and takes control otherwise. The claim check itself is ``claims``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pi_workflows.store.claims import Claim, OwnerType, acquire, read_lease
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.ids import new_id
from pi_workflows.store.runs import RunRow, write_run
from pi_workflows.store.states import NextCommand, Operation, RunStatus
from pi_workflows.store.transitions import apply_transition


@dataclass(frozen=True)
class ClaimResult:
    """A runner claim and the command its runner must be given."""

    claim: Claim
    revision: int
    next_command: NextCommand


def claim(
    db: Database, run_id: str, owner_id: str, *, expected_revision: int | None = None
) -> ClaimResult:
    """Claim a queued run for a runner: new generation, new token, status running."""
    holder: list[Claim] = []
    command: list[NextCommand] = []

    def apply(tx: Transaction, run: RunRow) -> None:
        if run.status is not RunStatus.QUEUED:
            raise InvalidTransitionError(run_id, Operation.CLAIM.value, run.status.value)
        holder.append(acquire(tx, run_id, OwnerType.RUNNER, owner_id, db.lease_ms))
        row = tx.conn.execute(
            "SELECT next_command FROM run_queue WHERE run_id = ?", (run_id,)
        ).fetchone()
        command.append(NextCommand(row[0]))
        apply_transition(tx, run, Operation.CLAIM)

    result = write_run(
        db,
        run_id,
        name="lifecycle.claim",
        event_type="run.claimed",
        claim=None,
        expected_revision=expected_revision,
        apply=apply,
    )
    return ClaimResult(holder[0], result.revision, command[0])


def control_claim(db: Database, run_id: str) -> Claim:
    """Take control of a running run whose claim expired or was released (never a live one).

    Bumps the generation, so the old owner's every later write is fenced out. The run stays
    running under the control claim until the caller parks, recovers or cancels it.
    """
    holder: list[Claim] = []

    def apply(tx: Transaction, run: RunRow) -> None:
        if run.status is not RunStatus.RUNNING:
            raise InvalidTransitionError(run_id, "take control of", run.status.value)
        holder.append(acquire(tx, run_id, OwnerType.CONTROL, new_id("ctl"), db.lease_ms))

    write_run(
        db,
        run_id,
        name="lifecycle.control_claim",
        event_type="run.controlClaimed",
        claim=None,
        apply=apply,
    )
    return holder[0]


def live_or_control(db: Database, run_id: str, claim: Claim | None) -> Claim:
    """``claim`` if it is still the run's live claim, else a new control claim.

    For server commands on a running run (pause, cancel) that hold the claim of the runner
    they supervise: in the window after that runner committed a wait or park, or after its
    claim expired, the runner's claim is gone and a control claim takes its place (refused,
    with ``LeaseHeldError``, only while somebody else's claim is live). Joins the caller's
    transaction.
    """
    with db.atomic("lifecycle.fence") as tx:
        lease = read_lease(tx.conn, run_id)
        if (
            claim is not None
            and lease is not None
            and lease.generation == claim.generation
            and lease.live_at(tx.now)
        ):
            return claim
    return control_claim(db, run_id)
