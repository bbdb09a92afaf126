"""The lifecycle boundary: every run and queue transition, each in one transaction.

Each operation checks ``states.TRANSITIONS`` first, then changes together the run status,
the queue row, the active attempt, decision and interaction state, effects, the claim
(renewed or released), one event and the viewer row. An impossible transition raises
``InvalidTransitionError`` and changes nothing. This module is the only code that changes
``runs.status``; the server calls it and never writes those rows itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pi_workflows.store import attempts, effects, interactions, jsoncol, messages, values
from pi_workflows.store.attempts import Attempt
from pi_workflows.store.claims import Claim, OwnerType, acquire, read_lease
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.ids import new_id
from pi_workflows.store.interactions import InteractionDraft
from pi_workflows.store.projection import project_run
from pi_workflows.store.runs import RunRow, WriteResult, read_run, write_run
from pi_workflows.store.states import (
    QUEUE_STATUS_OF,
    TERMINAL_STATUSES,
    TRANSITIONS,
    AttemptStatus,
    NextCommand,
    Operation,
    ParkReason,
    RunStatus,
)


@dataclass(frozen=True)
class SourceRecord:
    """Which source a run executes: root identity plus every mounted module's sha256."""

    kind: str
    ref: str
    revision: str
    project_dir: str | None
    mounted: dict[str, str]


@dataclass(frozen=True)
class NewRun:
    """Everything ``reserve`` needs to create a queued run."""

    workflow_name: str
    definition: dict[str, Any]
    definition_digest: str
    input: Any
    input_hash: str
    source: SourceRecord
    origin: str | None = None
    origin_session: str | None = None
    detached: bool = False  # its session is a headless Pi the server runs (see agents)


@dataclass(frozen=True)
class ClaimResult:
    """A runner claim and the command its runner must be given."""

    claim: Claim
    revision: int
    next_command: NextCommand


@dataclass(frozen=True)
class NodeStarted:
    """A committed ``start_node``."""

    attempt: Attempt
    revision: int


@dataclass(frozen=True)
class GoTo:
    """The engine routed to ``node_id``."""

    node_id: str


@dataclass(frozen=True)
class Finish:
    """The engine ended the run: ``status`` is completed, failed or timed_out."""

    status: RunStatus
    output: Any = None
    error: str | None = None


@dataclass(frozen=True)
class NodeFinished:
    """A committed ``finish_node``; ``next_attempt`` when the next node was started too."""

    revision: int
    status: RunStatus
    next_attempt: Attempt | None


_OPERATION_OF_FINISH = {
    RunStatus.COMPLETED: Operation.COMPLETE,
    RunStatus.FAILED: Operation.FAIL,
    RunStatus.TIMED_OUT: Operation.TIME_OUT,
}
_ATTEMPT_STATUS_OF_TERMINAL = {
    RunStatus.FAILED: AttemptStatus.FAILED,
    RunStatus.TIMED_OUT: AttemptStatus.TIMED_OUT,
    RunStatus.CANCELLED: AttemptStatus.CANCELLED,
}


def apply_transition(
    tx: Transaction,
    run: RunRow,
    operation: Operation,
    *,
    next_command: NextCommand | None = None,
    park_reason: ParkReason | None = None,
    park_detail: str | None = None,
    output: Any = None,
    error: str | None = None,
) -> RunStatus:
    """Move ``run`` along ``operation``: status, queue, claim, attempts, interactions, effects.

    The caller has already checked the claim when the transition needs one. Leaving
    ``running`` settles the effects its runner may still be applying, the same way whatever
    the path (``effects.settle_on_exit``); if that leaves a manual effect ambiguous, a
    non-terminal transition becomes a park with ``effectAmbiguous`` (the reason the caller
    gave, if any, is kept in the detail), so an uncertain effect can never run again
    unreviewed. Returns the status the run now has.
    """
    rule = TRANSITIONS[operation]
    if run.status not in rule.sources:
        raise InvalidTransitionError(run.run_id, operation.value, run.status.value)
    target = rule.target
    terminal = target in TERMINAL_STATUSES
    if target is RunStatus.COMPLETED:
        active = attempts.unfinished(tx.conn, run.run_id)
        if active is not None:
            raise InvalidTransitionError(
                run.run_id,
                operation.value,
                run.status.value,
                f"node {active.node_id} is still {active.status}",
            )
    leaving = run.status is RunStatus.RUNNING and target is not RunStatus.RUNNING
    if leaving or terminal:
        uncertain = effects.settle_on_exit(tx, run.run_id, terminal=terminal)
        if uncertain and not terminal:
            detail = uncertain[0].describe()
            if park_detail:
                detail += f"; {park_detail}"
            if park_reason not in (None, ParkReason.EFFECT_AMBIGUOUS):
                detail += f" (while parking as {park_reason})"
            target, park_reason, park_detail = (
                RunStatus.PAUSED,
                ParkReason.EFFECT_AMBIGUOUS,
                detail,
            )
    if target is RunStatus.PAUSED and park_reason is not ParkReason.SERVER_STOPPED:
        # Nobody will validate a queued submission of a paused run: answer its submitter now
        # (a clean server stop keeps it, and the next server validates it).
        submission = interactions.validating_of(tx.conn, run.run_id)
        if submission is not None:
            interactions.reject(
                tx,
                submission.submission_id,
                f"validation did not finish: the run was paused ({park_reason}); resume it and"
                " submit again",
            )
    if target in _ATTEMPT_STATUS_OF_TERMINAL:
        attempts.close_unfinished(tx, run.run_id, _ATTEMPT_STATUS_OF_TERMINAL[target])
    elif leaving and target in (RunStatus.PAUSED, RunStatus.QUEUED):
        attempts.close_unfinished(tx, run.run_id, AttemptStatus.INTERRUPTED, only_running=True)
    if terminal:
        interactions.cancel_open(tx, run.run_id)
        messages.record(
            tx,
            run.run_id,
            f"terminal:{run.round}",
            "terminal",
            {
                "runId": run.run_id,
                "workflow": run.workflow_name,
                "status": target.value,
                "output": output if output is None or len(jsoncol.dumps(output)) <= 16384 else None,
                "error": error,
            },
            run.origin_session,
        )
    tx.conn.execute(
        "UPDATE runs SET status = ?, park_reason = ?, park_detail = ?,"
        " error = COALESCE(?, error), finished_at = ? WHERE run_id = ?",
        (
            target.value,
            park_reason.value if park_reason else None,
            park_detail if park_reason else None,
            error,
            tx.now if terminal else None,
            run.run_id,
        ),
    )
    if output is not None:
        tx.conn.execute(
            "UPDATE runs SET output_json = ?, output_ref = ? WHERE run_id = ?",
            (*values.store(tx, output), run.run_id),
        )
    tx.conn.execute(
        "UPDATE run_queue SET status = ?, next_command = COALESCE(?, next_command),"
        " available_at = ?, updated_at = ? WHERE run_id = ?",
        (
            QUEUE_STATUS_OF[target].value,
            next_command.value if next_command else None,
            tx.now,
            tx.now,
            run.run_id,
        ),
    )
    if target is not RunStatus.RUNNING:
        tx.conn.execute(
            "UPDATE leases SET status = 'released', released_at = ?"
            " WHERE run_id = ? AND status = 'held'",
            (tx.now, run.run_id),
        )
    return target


def _input(tx: Transaction, value: Any) -> tuple[str | None, str | None]:
    """The input's (inline, ref) columns; JSON ``null`` is stored inline as ``null``."""
    if value is None:
        return "null", None
    return values.store(tx, value)


def _store_definition(tx: Transaction, new_run: NewRun) -> None:
    definition = jsoncol.dumps(new_run.definition).encode()
    tx.conn.execute(
        "INSERT OR IGNORE INTO blobs (digest, size, data, created_at) VALUES (?, ?, ?, ?)",
        (new_run.definition_digest, len(definition), definition, tx.now),
    )


def reserve(db: Database, new_run: NewRun, *, run_id: str | None = None) -> WriteResult:
    """Create a queued run with its definition snapshot, input and source identity."""
    run_id = run_id or new_id("run")
    with db.atomic("lifecycle.reserve") as tx:
        _store_definition(tx, new_run)
        tx.conn.execute(
            "INSERT INTO runs (run_id, workflow_name, definition_digest, input_json, input_ref,"
            " input_hash, status, revision, origin, origin_session, execution_mode, created_at,"
            " updated_at) VALUES (?, ?, ?, ?, ?, ?, 'queued', 1, ?, ?, ?, ?, ?)",
            (
                run_id,
                new_run.workflow_name,
                new_run.definition_digest,
                *_input(tx, new_run.input),
                new_run.input_hash,
                new_run.origin,
                f"detached-{run_id}" if new_run.detached else new_run.origin_session,
                "detached" if new_run.detached else "attached",
                tx.now,
                tx.now,
            ),
        )
        source = new_run.source
        tx.conn.execute(
            "INSERT INTO run_sources (run_id, source_kind, source_ref, source_revision,"
            " project_dir, mounted_json) VALUES (?, ?, ?, ?, ?, ?)",
            (
                run_id,
                source.kind,
                source.ref,
                source.revision,
                source.project_dir,
                jsoncol.dumps(source.mounted),
            ),
        )
        tx.conn.execute(
            "INSERT INTO run_queue (run_id, status, next_command, available_at, enqueued_at,"
            " updated_at) VALUES (?, 'ready', 'start', ?, ?, ?)",
            (run_id, tx.now, tx.now, tx.now),
        )
        # The insert is revision 1; its event is the reservation.
        tx.conn.execute(
            "INSERT INTO events (run_id, revision, type, run_status, generation, data_json, at)"
            " VALUES (?, 1, 'run.reserved', 'queued', NULL, ?, ?)",
            (run_id, jsoncol.dumps({"workflow": new_run.workflow_name}), tx.now),
        )
        project_run(tx.conn, run_id)
        return WriteResult(run_id, 1, RunStatus.QUEUED, "run.reserved")


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


def _deadline(tx: Transaction, timeout_ms: int | None) -> int | None:
    return None if timeout_ms is None else tx.now + timeout_ms


def start_node(
    db: Database,
    claim: Claim,
    node_id: str,
    *,
    timeout_ms: int | None = None,
    expected_revision: int | None = None,
) -> NodeStarted:
    """Open a running attempt of ``node_id`` and make it the run's current node.

    ``timeout_ms`` becomes the attempt's deadline, which the server enforces.
    """
    holder: list[Attempt] = []

    def apply(tx: Transaction, run: RunRow) -> None:
        if run.status is not RunStatus.RUNNING:
            raise InvalidTransitionError(run_id, f"start node {node_id}", run.status.value)
        if run.unrouted_attempt is not None:
            raise InvalidTransitionError(
                run_id, f"start node {node_id}", run.status.value, "route the timed-out node first"
            )
        holder.append(
            attempts.start(
                tx,
                run.run_id,
                node_id,
                claim.generation,
                round_no=run.round,
                deadline_at=_deadline(tx, timeout_ms),
            )
        )
        tx.conn.execute("UPDATE runs SET current_node = ? WHERE run_id = ?", (node_id, run_id))

    run_id = claim.run_id
    result = write_run(
        db,
        run_id,
        name="lifecycle.start_node",
        event_type="node.started",
        event_data={"nodeId": node_id},
        claim=claim,
        expected_revision=expected_revision,
        apply=apply,
    )
    return NodeStarted(holder[0], result.revision)


def finish_node(
    db: Database,
    claim: Claim,
    attempt_id: str,
    status: AttemptStatus,
    next_step: GoTo | Finish,
    *,
    output: Any = None,
    error: str | None = None,
    expected_revision: int | None = None,
    start_next: bool = False,
    next_timeout_ms: int | None = None,
    message: tuple[str, Any] | None = None,
    submission_id: str | None = None,
) -> NodeFinished:
    """Settle an attempt and apply the engine's decision, in one fenced write.

    ``GoTo`` makes the next node current (and, with ``start_next``, opens its attempt in
    the same write); ``Finish`` ends the run. ``step_count`` counts the settled attempt.
    An attempt the server already settled (``runs.unrouted_attempt``) is only routed.
    ``message`` (level, text) records a notify node's workflow message in the same write.
    ``submission_id`` accepts the validated submission that answered the attempt's request
    (the request is answered and its unsent step messages cancelled) in the same write.
    """
    if status not in (AttemptStatus.COMPLETED, AttemptStatus.FAILED, AttemptStatus.TIMED_OUT):
        raise ValueError(f"finish_node settles completed, failed or timed_out, not {status}")
    holder: list[Attempt] = []
    run_id = claim.run_id

    def apply(tx: Transaction, run: RunRow) -> None:
        if run.status is not RunStatus.RUNNING:
            raise InvalidTransitionError(run_id, "finish a node of", run.status.value)
        active_node = run.current_node
        if run.unrouted_attempt is not None:
            if run.unrouted_attempt != attempt_id:
                raise InvalidTransitionError(
                    run_id, f"finish attempt {attempt_id}", run.status.value, "it is not active"
                )
            tx.conn.execute("UPDATE runs SET unrouted_attempt = NULL WHERE run_id = ?", (run_id,))
        else:
            active = attempts.unfinished(tx.conn, run_id)
            if active is None or active.attempt_id != attempt_id:
                raise InvalidTransitionError(
                    run_id, f"finish attempt {attempt_id}", run.status.value, "it is not active"
                )
            attempts.settle(tx, active, status, output=output, error=error)
        counted = 0 if run.unrouted_attempt is not None else 1  # the server counted it already
        if submission_id is not None:
            interactions.accept(tx, submission_id, attempt_id)
        elif (request := interactions.open_request_of(tx.conn, run_id)) is not None:
            raise InvalidTransitionError(
                run_id,
                f"finish attempt {attempt_id}",
                run.status.value,
                f"its request {request.request_id} is {request.status}; accept or reject the"
                " submission",
            )
        if message is not None:
            body = {
                "runId": run_id,
                "workflow": run.workflow_name,
                "nodeId": active_node or "",
                "level": message[0],
                "text": message[1],
            }
            messages.record(tx, run_id, attempt_id, "notification", body, run.origin_session)
        if isinstance(next_step, GoTo):
            tx.conn.execute(
                "UPDATE runs SET current_node = ?, step_count = step_count + ? WHERE run_id = ?",
                (next_step.node_id, counted, run_id),
            )
            if start_next:
                holder.append(
                    attempts.start(
                        tx,
                        run_id,
                        next_step.node_id,
                        claim.generation,
                        round_no=run.round,
                        deadline_at=_deadline(tx, next_timeout_ms),
                    )
                )
        else:
            tx.conn.execute(
                "UPDATE runs SET step_count = step_count + ? WHERE run_id = ?", (counted, run_id)
            )
            apply_transition(
                tx,
                run,
                _OPERATION_OF_FINISH[next_step.status],
                output=next_step.output,
                error=next_step.error,
            )

    event = "node.finished" if isinstance(next_step, GoTo) else f"run.{next_step.status.value}"
    data: dict[str, Any] = {"attemptId": attempt_id, "outcome": status.value}
    if isinstance(next_step, GoTo):
        data["next"] = next_step.node_id
    result = write_run(
        db,
        run_id,
        name="lifecycle.finish_node",
        event_type=event,
        event_data=data,
        claim=claim,
        expected_revision=expected_revision,
        apply=apply,
    )
    return NodeFinished(result.revision, result.status, holder[0] if holder else None)


def wait(
    db: Database,
    claim: Claim,
    attempt_id: str,
    draft: InteractionDraft,
    *,
    expected_revision: int | None = None,
) -> tuple[WriteResult, str]:
    """Open an interactive request for the active attempt, then wait with no claim."""
    request_ids: list[str] = []
    run_id = claim.run_id

    def apply(tx: Transaction, run: RunRow) -> None:
        if run.status is not RunStatus.RUNNING:
            raise InvalidTransitionError(run_id, Operation.WAIT.value, run.status.value)
        active = attempts.unfinished(tx.conn, run_id)
        if active is None or active.attempt_id != attempt_id:
            raise InvalidTransitionError(
                run_id,
                Operation.WAIT.value,
                run.status.value,
                f"attempt {attempt_id} is not active",
            )
        if effects.applying(tx.conn, run_id):
            raise InvalidTransitionError(
                run_id, Operation.WAIT.value, run.status.value, "an effect is still applying"
            )
        attempts.set_waiting(tx, active)
        request_ids.append(
            interactions.open_request(
                tx,
                run_id,
                attempt_id,
                active.node_id,
                draft,
                workflow=run.workflow_name,
                origin_session=run.origin_session,
            )
        )
        apply_transition(tx, run, Operation.WAIT)

    result = write_run(
        db,
        run_id,
        name="lifecycle.wait",
        event_type="run.waiting",
        event_data={"attemptId": attempt_id, "kind": draft.kind},
        claim=claim,
        expected_revision=expected_revision,
        apply=apply,
    )
    return result, request_ids[0]


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


def pause(db: Database, run_id: str, *, expected_revision: int | None = None) -> WriteResult:
    """Pause a queued or waiting run (a running run is parked through its claim instead).

    A waiting run keeps its open request (and its deadline); the session stops presenting
    it until the run is resumed.
    """
    return write_run(
        db,
        run_id,
        name="lifecycle.pause",
        event_type="run.paused",
        claim=None,
        expected_revision=expected_revision,
        apply=lambda tx, run: apply_transition(
            tx, run, Operation.PAUSE, park_reason=ParkReason.USER_PAUSED
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
    step was already presented it is presented once more as a ``resumed`` step; any other
    paused run is queued for a runner. Refused while any of its effects is still ambiguous:
    an operator resolves those first.
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
                if messages.was_sent(tx.conn, request.request_id):
                    interactions.present_again(tx, request, run.workflow_name)
                return
        elif run.status is RunStatus.WAITING:
            raise InvalidTransitionError(
                run_id, Operation.RESUME.value, run.status.value, "answer its request instead"
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
) -> WriteResult:
    """Cancel a nonterminal run in one transaction.

    With ``claim`` the write is fenced by it (the server cancelling a run whose runner it
    supervises) while it is still live. Without one, or once that runner's claim is gone
    (it committed a wait or park, or expired), a control claim is taken in the same
    transaction: that needs
    the lease to be absent, released or expired, so a live owner's run is never cancelled
    behind its back (``LeaseHeldError``). Closes the active attempt, cancels open requests
    and decisions, cancels unstarted effects and marks applying effects ambiguous.
    """
    with db.atomic("lifecycle.cancel") as tx:
        run = read_run(tx.conn, run_id)
        if run.status in TERMINAL_STATUSES:
            raise InvalidTransitionError(run_id, Operation.CANCEL.value, run.status.value)
        lease = read_lease(tx.conn, run_id)
        fence = claim
        if fence is not None and (
            lease is None or lease.generation != fence.generation or not lease.live_at(tx.now)
        ):
            fence = None  # the runner's claim is already gone (it waited, parked or expired)
        if fence is None:
            fence = acquire(tx, run_id, OwnerType.CONTROL, new_id("ctl"), db.lease_ms)
        return write_run(
            db,
            run_id,
            name="lifecycle.cancel",
            event_type="run.cancelled",
            event_data={"reason": reason},
            claim=fence,
            expected_revision=expected_revision,
            apply=lambda tx, run: apply_transition(tx, run, Operation.CANCEL, error=reason),
        )


def restart(
    db: Database,
    run_id: str,
    *,
    new_source: tuple[NewRun, str] | None = None,
    expected_revision: int | None = None,
) -> WriteResult:
    """Queue a paused or failed, timed-out or cancelled run to run again from its start.

    Starts a new round: earlier attempts stay as history, but the next runner sees no
    outputs, results or steps. Refused while any effect of the run is ambiguous (an operator
    resolves those first); idempotent effects left pending by a lost runner are cancelled.
    ``new_source`` (the re-resolved run and its definition digest) replaces the recorded
    source identity, so a restart runs the code as it is now.
    """

    def apply(tx: Transaction, run: RunRow) -> None:
        open_effects = tx.conn.execute(
            "SELECT COUNT(*) FROM effects WHERE run_id = ? AND status IN ('applying', 'ambiguous')",
            (run_id,),
        ).fetchone()[0]
        if open_effects:
            raise InvalidTransitionError(
                run_id,
                Operation.RESTART.value,
                run.status.value,
                f"{open_effects} effect(s) are ambiguous; resolve them with "
                "'pi-workflows effect resolve' first",
            )
        # Idempotent effects a lost runner left pending belong to the old round: the new
        # round's keys differ, so they will never be reserved again.
        tx.conn.execute(
            "UPDATE effects SET status = 'cancelled', updated_at = ?"
            " WHERE run_id = ? AND status = 'pending'",
            (tx.now, run_id),
        )
        apply_transition(tx, run, Operation.RESTART, next_command=NextCommand.RESTART)
        attempts.close_unfinished(tx, run_id, AttemptStatus.INTERRUPTED)
        interactions.cancel_open(tx, run_id)
        tx.conn.execute(
            "UPDATE runs SET round = round + 1, step_count = 0, current_node = NULL,"
            " unrouted_attempt = NULL, output_json = NULL, output_ref = NULL, error = NULL,"
            " finished_at = NULL"
            " WHERE run_id = ?",
            (run_id,),
        )
        if new_source is not None:
            fresh, digest = new_source
            _store_definition(tx, fresh)
            source = fresh.source
            tx.conn.execute(
                "UPDATE runs SET definition_digest = ? WHERE run_id = ?", (digest, run_id)
            )
            tx.conn.execute(
                "UPDATE run_sources SET source_kind = ?, source_ref = ?, source_revision = ?,"
                " mounted_json = ? WHERE run_id = ?",
                (source.kind, source.ref, source.revision, jsoncol.dumps(source.mounted), run_id),
            )

    return write_run(
        db,
        run_id,
        name="lifecycle.restart",
        event_type="run.restarted",
        claim=None,
        expected_revision=expected_revision,
        apply=apply,
    )


__all__ = [
    "ClaimResult",
    "Finish",
    "GoTo",
    "NewRun",
    "NodeFinished",
    "NodeStarted",
    "SourceRecord",
    "cancel",
    "claim",
    "complete",
    "control_claim",
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
