"""A runner's durable waits: a sleep, a retry of a failed attempt, a wait for an event, and a
join of child runs.

Each is one write fenced by the runner's claim and its execution revision
(``runs.write_run``), like the steps of ``node_steps``. Waiting for time or an event leaves
the run ``waiting`` with no claim (the runner then exits) and a pending ``run_waits`` row;
the server fires it (``takeover.fire_due_waits``) or an event ends it (``signals.send``), in
the transaction that queues the run again, and the next runner routes the attempt. Nothing
here holds a process for the length of a wait.
"""

from __future__ import annotations

from dataclasses import dataclass

from pi_workflows.store import attempts, children, effects, signals, waits
from pi_workflows.store.attempts import Attempt
from pi_workflows.store.children import ChildWorkflow
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.runs import RunRow, read_run, write_run
from pi_workflows.store.signals import Signal
from pi_workflows.store.states import AttemptStatus, Operation, ParkReason, RunStatus
from pi_workflows.store.transitions import apply_transition


@dataclass(frozen=True)
class Slept:
    """A committed ``sleep``: ``waited`` (the run now waits until ``until``), or the time had
    already come (the runner finishes the node at once, ``late_ms`` after it)."""

    waited: bool
    until: int
    late_ms: int
    revision: int


@dataclass(frozen=True)
class Retried:
    """A committed ``retry``: the next try started now (``next_attempt``), is due at
    ``due_at`` (the run waits), or the tries ran out and the run parked (``parked``)."""

    revision: int
    next_attempt: Attempt | None
    due_at: int | None
    parked: bool


@dataclass(frozen=True)
class Awaited:
    """A ``wait_event`` proposal's answer: the run ``waited`` (the runner exits), the wait
    ``timed_out``, or a pending ``signal`` is there for the node to validate and consume."""

    revision: int
    waited: bool = False
    timed_out: bool = False
    signal: Signal | None = None


def _active(tx: Transaction, run: RunRow, attempt_id: str, what: str) -> Attempt:
    if run.status is not RunStatus.RUNNING:
        raise InvalidTransitionError(run.run_id, what, run.status.value)
    active = attempts.unfinished(tx.conn, run.run_id)
    if active is None or active.attempt_id != attempt_id:
        raise InvalidTransitionError(
            run.run_id, what, run.status.value, f"attempt {attempt_id} is not active"
        )
    if effects.applying(tx.conn, run.run_id):
        raise InvalidTransitionError(run.run_id, what, run.status.value, "an effect is applying")
    return active


def sleep(
    db: Database,
    claim: Claim,
    attempt_id: str,
    *,
    delay_ms: int | None = None,
    until_ms: int | None = None,
    expected_revision: int | None = None,
) -> Slept:
    """Put the active attempt of a sleep node to sleep until ``until_ms`` (epoch ms) or for
    ``delay_ms`` from this commit. A time already past commits nothing: the runner routes the
    node at once."""
    if (delay_ms is None) == (until_ms is None):
        raise ValueError("sleep takes exactly one of delay_ms and until_ms")
    run_id = claim.run_id
    with db.atomic("lifecycle.sleep") as tx:
        run = read_run(tx.conn, run_id)
        until = until_ms if until_ms is not None else tx.now + (delay_ms or 0)
        if until <= tx.now:
            _active(tx, run, attempt_id, "sleep in")
            return Slept(False, until, tx.now - until, run.execution_revision)
        holder: list[Slept] = []

        def apply(tx: Transaction, run: RunRow) -> None:
            active = _active(tx, run, attempt_id, "sleep in")
            attempts.set_waiting(tx, active)
            waits.open_wait(tx, run_id, attempt_id, active.node_id, "sleep", due_at=until)
            apply_transition(tx, run, Operation.WAIT)

        result = write_run(
            db,
            run_id,
            name="lifecycle.sleep",
            event_type="run.waiting",
            event_data={"attemptId": attempt_id, "kind": "sleep", "until": until},
            claim=claim,
            expected_revision=expected_revision,
            apply=apply,
        )
        holder.append(Slept(True, until, 0, result.execution_revision))
        return holder[0]


def retry(
    db: Database,
    claim: Claim,
    attempt_id: str,
    outcome: AttemptStatus,
    error: str,
    *,
    delay_ms: int,
    exhausted: bool = False,
    next_timeout_ms: int | None = None,
    expected_revision: int | None = None,
    error_class: str | None = None,
) -> Retried:
    """Settle an attempt that a retry policy tries again, in one write.

    ``outcome`` is what the attempt ended with (``failed`` or ``timed_out``; a
    ``timed_out`` attempt the server settled at its deadline is the run's unrouted one).
    The attempt becomes ``retried``; its idempotent effect keeps its outcome until the next
    try reserves it again under the same key (``effects.reserve``), so a cancel during the
    delay leaves the effect as it was. With ``delay_ms`` 0 the next try of the same visit
    starts in this write; with more, the run waits with no claim for a ``retry`` wait due
    ``delay_ms`` from now. With ``exhausted`` (a policy that pauses when its tries run
    out) the attempt becomes ``exhausted`` and the run parks ``retriesExhausted`` with
    ``error`` as its detail; ``run resume`` then starts try 1 of a fresh round. A retry
    never counts as a step. ``error_class`` (the qualified class of the exception that
    failed the attempt, when one did) goes into the event's data.
    """
    if delay_ms < 0:
        raise ValueError("delay_ms must not be negative")
    run_id = claim.run_id
    holder: list[Retried] = []

    def apply(tx: Transaction, run: RunRow) -> None:
        if run.status is not RunStatus.RUNNING:
            raise InvalidTransitionError(run_id, "retry a node of", run.status.value)
        if run.unrouted_attempt is not None:
            if run.unrouted_attempt != attempt_id or outcome is not AttemptStatus.TIMED_OUT:
                raise InvalidTransitionError(
                    run_id, f"retry attempt {attempt_id}", run.status.value, "it is not active"
                )
            target = attempts.read_attempt(tx.conn, attempt_id)
            assert target is not None
            tx.conn.execute(  # the server counted the timed-out visit as a step; a retry is not
                "UPDATE runs SET unrouted_attempt = NULL, step_count = MAX(0, step_count - 1)"
                " WHERE run_id = ?",
                (run_id,),
            )
        else:
            target = _active(tx, run, attempt_id, f"retry attempt {attempt_id} of")
        effects.check_retryable(tx.conn, run_id, attempt_id)
        attempts.settle_for_retry(tx, target, outcome, error, exhausted=exhausted)
        if exhausted:
            detail = (
                f"node {target.node_id!r} ran out of its {target.try_no} tries; the last"
                f" {outcome.value}: {error}"
            )
            apply_transition(
                tx, run, Operation.PARK, park_reason=ParkReason.RETRIES_EXHAUSTED,
                park_detail=detail[:2000],
            )  # fmt: skip
            holder.append(Retried(0, None, None, True))
        elif delay_ms == 0:
            following = attempts.start(
                tx, run_id, target.node_id, claim.generation, round_no=run.round,
                deadline_at=None if next_timeout_ms is None else tx.now + next_timeout_ms,
            )  # fmt: skip
            holder.append(Retried(0, following, None, False))
        else:
            due = tx.now + delay_ms
            waits.open_wait(tx, run_id, attempt_id, target.node_id, "retry", due_at=due)
            apply_transition(tx, run, Operation.WAIT)
            holder.append(Retried(0, None, due, False))

    event = "run.parked" if exhausted else "node.retried"
    data: dict[str, object] = {
        "attemptId": attempt_id,
        "outcome": outcome.value,
        "delayMs": delay_ms,
        "tryNo": _try_of(db, attempt_id),
    }
    if exhausted:
        data["reason"] = ParkReason.RETRIES_EXHAUSTED.value
    if error_class is not None:
        data["errorClass"] = error_class
    result = write_run(
        db,
        run_id,
        name="lifecycle.retry",
        event_type=event,
        event_data=data,
        claim=claim,
        expected_revision=expected_revision,
        apply=apply,
    )
    done = holder[0]
    return Retried(result.execution_revision, done.next_attempt, done.due_at, done.parked)


def spawn(
    db: Database,
    claim: Claim,
    attempt_id: str,
    *,
    kind: str,
    child: ChildWorkflow,
    inputs: list[object],
    concurrency: int,
    fail_fast: bool,
    detached: bool,
    expected_revision: int | None = None,
    rate: tuple[int, int] | None = None,
) -> int:
    """Start the child runs of the active attempt of a ``subworkflow`` or ``fan_out`` node
    (the first ``concurrency`` of them, as far as ``rate``, ``(starts, period ms)``, allows;
    the rest as children end and the rate's window moves) and wait for all of them with no
    claim (``children.spawn``). Returns the parent's execution revision."""
    run_id = claim.run_id

    def apply(tx: Transaction, run: RunRow) -> None:
        active = _active(tx, run, attempt_id, "start the children of")
        depth = int(
            tx.conn.execute("SELECT depth FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0]
        )
        children.spawn(
            tx, run, attempt_id, active.node_id, kind=kind, child=child, inputs=inputs,
            concurrency=concurrency, fail_fast=fail_fast, detached=detached, depth=depth,
            rate=rate,
        )  # fmt: skip
        attempts.set_waiting(tx, active)
        apply_transition(tx, run, Operation.WAIT)

    result = write_run(
        db,
        run_id,
        name="lifecycle.spawn",
        event_type="run.waiting",
        event_data={
            "attemptId": attempt_id,
            "kind": "children",
            "workflow": child.workflow_name,
            "children": len(inputs),
        },
        claim=claim,
        expected_revision=expected_revision,
        apply=apply,
    )
    return result.execution_revision


def _try_of(db: Database, attempt_id: str) -> int | None:
    found = attempts.read_attempt(db.conn, attempt_id)
    return None if found is None else found.try_no


def await_event(
    db: Database,
    claim: Claim,
    attempt_id: str,
    name: str,
    *,
    timeout_ms: int | None,
    validates: bool,
    expected_revision: int | None = None,
) -> Awaited:
    """The active attempt of a ``wait_event`` node asks for its event.

    In one transaction: a wait of this attempt that already timed out answers
    ``timed_out``; else the oldest pending event named ``name`` is returned for the node to
    validate and consume (nothing is written; ``finish_node`` consumes it, ``signals.reject``
    refuses it); else, once a wait's timeout has passed, ``timed_out``; else the attempt
    waits (the first time with a timeout ``timeout_ms`` from now, afterwards keeping the
    first one) and the run waits with no claim.
    """
    run_id = claim.run_id
    with db.atomic("lifecycle.await_event") as tx:
        run = read_run(tx.conn, run_id)
        active = _active(tx, run, attempt_id, f"wait for event {name!r} in")
        existing = waits.of_attempt(tx.conn, attempt_id)
        if existing is not None and existing.status == "fired":
            return Awaited(run.execution_revision, timed_out=True)
        found = signals.next_pending(tx.conn, run_id, name)
        if found is not None:
            return Awaited(run.execution_revision, signal=found)
        if existing is not None and existing.due_at is not None and existing.due_at <= tx.now:
            return Awaited(run.execution_revision, timed_out=True)

        def apply(tx: Transaction, run: RunRow) -> None:
            if active.status is AttemptStatus.RUNNING:
                attempts.set_waiting(tx, active)
            if existing is not None:
                waits.rearm(tx, existing)
            else:
                due = None if timeout_ms is None else tx.now + timeout_ms
                waits.open_wait(
                    tx, run_id, attempt_id, active.node_id, "event", due_at=due,
                    event_name=name, validates=validates,
                )  # fmt: skip
            apply_transition(tx, run, Operation.WAIT)

        result = write_run(
            db,
            run_id,
            name="lifecycle.await_event",
            event_type="run.waiting",
            event_data={"attemptId": attempt_id, "kind": "event", "event": name},
            claim=claim,
            expected_revision=expected_revision,
            apply=apply,
        )
        return Awaited(result.execution_revision, waited=True)
