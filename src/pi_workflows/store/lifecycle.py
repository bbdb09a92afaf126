"""The lifecycle boundary: run-level transitions, and the one place every transition is found.

Run-level operations live here (park, pause, resume, complete, fail, time out, cancel,
expire), each
one transaction that goes through ``transitions.apply_transition``, which changes together
the run status, the queue row, the active attempt, decision and interaction state, effects,
the claim, one event and the viewer row. An impossible transition raises
``InvalidTransitionError`` and changes nothing. The other transitions are in the modules
named after what they own, and re-exported here so callers have one name for the
lifecycle: ``reservations`` (reserve, restart), ``claiming`` (claim, control claim),
``node_steps`` (start, finish, wait), ``wait_steps`` (sleep, retry, wait for an event),
``takeover`` (recovery, deadlines, due waits). The server calls these and
never writes those rows itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pi_workflows.store import (
    children,
    cleanups,
    deadlines,
    effects,
    interactions,
    messages,
    tree,
    waits,
)
from pi_workflows.store.claiming import ClaimResult, claim, control_claim, live_or_control
from pi_workflows.store.claims import Claim, OwnerType, acquire, read_lease
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidTransitionError, RevisionConflictError
from pi_workflows.store.ids import new_id
from pi_workflows.store.node_steps import (
    Finish,
    GoTo,
    NodeFinished,
    NodeStarted,
    finish_node,
    start_node,
    wait,
)
from pi_workflows.store.reservations import (
    NewRun,
    RunEnvironment,
    SourceRecord,
    reserve,
    restart,
)
from pi_workflows.store.runs import RunRow, WriteResult, read_run, write_run
from pi_workflows.store.states import (
    TERMINAL_STATUSES,
    NextCommand,
    Operation,
    ParkReason,
    RunStatus,
)
from pi_workflows.store.transitions import apply_transition
from pi_workflows.store.wait_steps import (
    Awaited,
    Retried,
    Slept,
    await_event,
    retry,
    sleep,
    spawn,
)


def park(
    db: Database,
    claim: Claim,
    reason: ParkReason,
    detail: str | None = None,
    *,
    expected_revision: int | None = None,
) -> WriteResult:
    """Stop a running run at its last durable boundary until it is resumed explicitly."""
    return write_run(
        db,
        claim.run_id,
        name="lifecycle.park",
        event_type="run.parked",
        event_data={"reason": reason.value},
        claim=claim,
        expected_revision=expected_revision,
        apply=lambda tx, run: apply_transition(
            tx, run, Operation.PARK, park_reason=reason, park_detail=detail
        ),
    )


def pause(
    db: Database,
    run_id: str,
    *,
    detail: str | None = None,
    expected_revision: int | None = None,
) -> WriteResult:
    """Pause a queued or waiting run (a running run is parked through its claim instead);
    ``detail`` is the person's reason, kept as the park detail.

    A waiting run keeps its open request (and its deadline); the session stops presenting
    it until the run is resumed.
    """
    return write_run(
        db,
        run_id,
        name="lifecycle.pause",
        event_type="run.paused",
        event_data={"reason": ParkReason.USER_PAUSED.value},
        claim=None,
        expected_revision=expected_revision,
        apply=lambda tx, run: apply_transition(
            tx, run, Operation.PAUSE, park_reason=ParkReason.USER_PAUSED, park_detail=detail
        ),
    )


def pause_waiting(
    db: Database, run_id: str, reason: ParkReason, detail: str | None = None
) -> WriteResult:
    """Pause a waiting (or queued) run for ``reason``: the session aborted the turn of its
    step, or a detached run's headless agent cannot work."""
    return write_run(
        db,
        run_id,
        name="lifecycle.pause",
        event_type="run.paused",
        event_data={"reason": reason.value},
        claim=None,
        apply=lambda tx, run: apply_transition(
            tx, run, Operation.PAUSE, park_reason=reason, park_detail=detail
        ),
    )


def resume(
    db: Database,
    run_id: str,
    *,
    expected_revision: int | None = None,
    command: NextCommand = NextCommand.RESUME,
) -> WriteResult:
    """Continue a paused run; clears its park reason.

    A run paused while it waited on a request waits again (no runner is needed), and if the
    step was already presented it is presented once more as a ``resumed`` step; so does a
    run paused during a sleep, a retry delay or an event wait that has not come due (its
    wait keeps its time); a parent paused while it waited on its children waits again, and
    the children its pause held back (``children.refill``) start now. Any other paused run
    is queued for a runner (a wait that fired
    while it was paused is routed then). Refused while any of its effects is still
    ambiguous: an operator resolves those first.
    """

    def apply(tx: Transaction, run: RunRow) -> None:
        if run.status is RunStatus.PAUSED:
            pending = effects.unresolved_ambiguous(tx.conn, run_id)
            if pending:
                raise InvalidTransitionError(
                    run_id,
                    Operation.RESUME.value,
                    run.status.value,
                    f"{pending} effect(s) are ambiguous; resolve them with "
                    "'pi-workflows effect resolve' first",
                )
            request = interactions.open_request_of(tx.conn, run_id)
            if request is not None and request.status == "pending":
                apply_transition(tx, run, Operation.REWAIT)
                interactions.reset_delivery(tx, request.request_id)
                if messages.was_sent(tx.conn, request.request_id):
                    interactions.present_again(tx, request, run.workflow_name)
                return
            if waits.pending_of(tx.conn, run_id) is not None:
                apply_transition(tx, run, Operation.REWAIT)
                children.refill(tx, run_id)  # the children a pause held back start now
                return
        elif run.status is RunStatus.WAITING:
            wait = waits.pending_of(tx.conn, run_id)
            raise InvalidTransitionError(
                run_id,
                Operation.RESUME.value,
                run.status.value,
                "answer its request instead" if wait is None else _waiting_advice(run_id, wait),
            )
        apply_transition(tx, run, Operation.RESUME, next_command=command)

    return write_run(
        db,
        run_id,
        name="lifecycle.resume",
        event_type="run.resumed",
        claim=None,
        expected_revision=expected_revision,
        apply=apply,
    )


def refill(db: Database, run_id: str) -> int:
    """Start the children a waiting run's joins held back while a run above it was paused
    (``children.paused_above``), as far as their concurrency has room; one run write on the
    parent when any starts. Returns how many started."""
    with db.read() as conn:
        room = any(
            join.status == "running"
            and join.started < join.total
            and len(children.active_children(conn, join.wait_id)) < join.concurrency
            for join in children.joins_of(conn, run_id)
        )
    if not room:
        return 0
    started: list[int] = []

    def apply(tx: Transaction, run: RunRow) -> None:
        if run.status is RunStatus.WAITING:
            started.append(children.refill(tx, run_id))

    write_run(
        db, run_id, name="lifecycle.refill", event_type="children.refilled", claim=None,
        apply=apply,
    )  # fmt: skip
    return sum(started)


def _waiting_advice(run_id: str, wait: waits.Wait) -> str:
    if wait.kind == "event":
        return (
            f"{wait.describe()}; send it with 'pi-workflows run signal {run_id}"
            f" {wait.event_name}', or pause or cancel the run"
        )
    return f"{wait.describe()}; it continues by itself then (pause or cancel it instead)"


def complete(db: Database, claim: Claim, output: Any) -> WriteResult:
    """Complete a running run with ``output`` (no attempt may be unfinished)."""
    return _end(db, claim, Operation.COMPLETE, "run.completed", output=output)


def fail(db: Database, claim: Claim, error: str) -> WriteResult:
    """Fail a running run; an unfinished attempt is closed as failed."""
    return _end(db, claim, Operation.FAIL, "run.failed", error=error)


def time_out(db: Database, claim: Claim, error: str) -> WriteResult:
    """End a running run as timed out; an unfinished attempt is closed as timed out."""
    return _end(db, claim, Operation.TIME_OUT, "run.timed_out", error=error)


def _end(
    db: Database,
    claim: Claim,
    operation: Operation,
    event_type: str,
    *,
    output: Any = None,
    error: str | None = None,
) -> WriteResult:
    return write_run(
        db,
        claim.run_id,
        name=f"lifecycle.{operation.name.lower()}",
        event_type=event_type,
        claim=claim,
        apply=lambda tx, run: apply_transition(tx, run, operation, output=output, error=error),
    )


def cancel(
    db: Database,
    run_id: str,
    *,
    claim: Claim | None = None,
    reason: str = "cancelled",
    expected_revision: int | None = None,
    claims: Mapping[str, Claim] | None = None,
) -> WriteResult:
    """Cancel a nonterminal run and its whole tree of child runs in one transaction.

    ``claims`` holds the live claims of the tree's running runs (the server's runners): a
    descendant with a live claim that is not given there cannot be cancelled behind its
    runner's back (``LeaseHeldError``, nothing changed).

    With ``claim`` the write is fenced by it (the server cancelling a run whose runner it
    supervises) while it is still live. Without one, or once that runner's claim is gone
    (it committed a wait or park, or expired), a control claim is taken in the same
    transaction: that needs
    the lease to be absent, released or expired, so a live owner's run is never cancelled
    behind its back (``LeaseHeldError``). Closes the active attempt, cancels open requests
    and decisions, cancels unstarted effects and marks applying effects ambiguous. A run
    whose workflow has a cleanup node is queued to run it first, and one whose cleanup runs
    already ends at once (``cleanups.end_run``); so is each run below it.
    """
    with db.atomic("lifecycle.cancel") as tx:
        run = read_run(tx.conn, run_id)
        if run.status in TERMINAL_STATUSES:
            raise InvalidTransitionError(run_id, Operation.CANCEL.value, run.status.value)
        if expected_revision is not None and run.execution_revision != expected_revision:
            raise RevisionConflictError(run_id, expected_revision, run.execution_revision)
        result = cleanups.end_run(
            db, tx, run_id, _fence(db, tx, run_id, claim), RunStatus.CANCELLED, reason,
            name="lifecycle.cancel",
        )  # fmt: skip
        tree.cancel_below(db, tx, run_id, claims, f"its parent run {run_id} was cancelled")
        return result


def _fence(db: Database, tx: Transaction, run_id: str, claim: Claim | None) -> Claim:
    """The claim a server-side end of a run is fenced by: its runner's ``claim`` while that
    is still live, else a control claim taken in ``tx`` (``LeaseHeldError`` when another
    live owner holds the run)."""
    lease = read_lease(tx.conn, run_id)
    if claim is not None and (
        lease is None or lease.generation != claim.generation or not lease.live_at(tx.now)
    ):
        claim = None  # the runner's claim is already gone (it waited, parked or expired)
    if claim is None:
        claim = acquire(tx, run_id, OwnerType.CONTROL, new_id("ctl"), db.lease_ms)
    return claim


def expire(
    db: Database,
    run_id: str,
    *,
    claim: Claim | None = None,
    claims: Mapping[str, Claim] | None = None,
) -> WriteResult | None:
    """End run ``run_id`` ``timed_out`` because its run deadline passed, and cancel its whole
    tree with the same reason, in one transaction; None (nothing changed) when the run has
    ended already or its deadline has not passed (a restart armed it again).

    Whatever the run is doing: a working runner is fenced (``claim``, its runner's, is used
    while live, and the write bumps the revision its later proposals are fenced by), a wait,
    a request or a paused run are ended as a cancel ends them, and effects are settled as
    for a cancel (applying ones become ambiguous, unstarted ones are cancelled).
    ``claims`` as for ``cancel``.
    """
    with db.atomic("lifecycle.expire") as tx:
        run = read_run(tx.conn, run_id)
        at = deadlines.deadline_at(tx.conn, run_id)
        duration = deadlines.duration_of(tx.conn, run_id)
        if run.status in TERMINAL_STATUSES or at is None or duration is None or at > tx.now:
            return None
        if cleanups.active(tx.conn, run_id) is not None:
            return None  # ended already: its cleanup node runs, bounded by its own timeout
        why = deadlines.reason(duration, at)
        result = cleanups.end_run(
            db, tx, run_id, _fence(db, tx, run_id, claim), RunStatus.TIMED_OUT, why,
            name="lifecycle.expire", extra={"deadline": "run", "deadlineAt": at},
        )  # fmt: skip
        tree.cancel_below(db, tx, run_id, claims, f"{why} for run {run_id}, above it")
        return result


__all__ = [
    "Awaited",
    "Retried",
    "Slept",
    "await_event",
    "retry",
    "sleep",
    "spawn",
    "ClaimResult",
    "Finish",
    "GoTo",
    "NewRun",
    "RunEnvironment",
    "NodeFinished",
    "NodeStarted",
    "SourceRecord",
    "apply_transition",
    "cancel",
    "claim",
    "complete",
    "control_claim",
    "expire",
    "fail",
    "finish_node",
    "live_or_control",
    "park",
    "pause",
    "pause_waiting",
    "reserve",
    "restart",
    "resume",
    "start_node",
    "time_out",
    "wait",
]
