"""A runner's steps through the graph: start a node, finish it (and route), wait on a request.

Each is one write fenced by the runner's claim and its execution revision
(``runs.write_run``): ``start_node`` opens an attempt, ``finish_node`` settles it and applies
the engine's decision (the next node, possibly started in the same write, or the run's
end), ``wait`` opens an interactive request and leaves the run waiting with no claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pi_workflows.store import attempts, cleanups, effects, interactions, messages, signals
from pi_workflows.store.attempts import Attempt
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.interactions import InteractionDraft
from pi_workflows.store.runs import RunRow, WriteResult, write_run
from pi_workflows.store.states import AttemptStatus, Operation, RunStatus
from pi_workflows.store.transitions import apply_transition


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
    """The engine ended the run: ``status`` is completed, failed or timed_out (a cleanup
    node: the status its run was ended with, cancelled or timed_out)."""

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
    data: dict[str, Any] = {"nodeId": node_id}

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
        data["attemptId"] = holder[0].attempt_id
        data["settingsChange"] = holder[0].settings_change

    run_id = claim.run_id
    result = write_run(
        db,
        run_id,
        name="lifecycle.start_node",
        event_type="node.started",
        event_data=data,
        claim=claim,
        expected_revision=expected_revision,
        apply=apply,
    )
    return NodeStarted(holder[0], result.revision)


def _record_notice(
    tx: Transaction,
    run: RunRow,
    attempt_id: str,
    node_id: str | None,
    message: tuple[str, Any] | tuple[str, Any, str | None],
) -> None:
    """A notify node's workflow message (level, text, and its audience when given)."""
    body = {
        "runId": run.run_id,
        "workflow": run.workflow_name,
        "nodeId": node_id or "",
        "level": message[0],
        "text": message[1],
    }
    if len(message) == 3 and message[2] is not None:
        body["audience"] = message[2]  # notify(audience=...), docs/channels.md
    messages.record(tx, run.run_id, attempt_id, "notification", body, run.origin_session)


def _check_ending(
    tx: Transaction, run: RunRow, attempt_id: str, next_step: GoTo | Finish
) -> cleanups.Cleanup | None:
    """The run's running cleanup, if any, after checking ``next_step`` may follow it: a
    cleanup node ends the run as its cleanup says, and only a cancel ends a run cancelled."""
    cleanup = cleanups.active(tx.conn, run.run_id)
    if cleanup is not None:
        if isinstance(next_step, GoTo) or next_step.status is not cleanup.ends_as:
            raise InvalidTransitionError(
                run.run_id, f"finish attempt {attempt_id}", run.status.value,
                f"its cleanup node ends the run {cleanup.ends_as.value}, nothing else",
            )  # fmt: skip
    elif isinstance(next_step, Finish) and next_step.status is RunStatus.CANCELLED:
        raise InvalidTransitionError(
            run.run_id, f"finish attempt {attempt_id}", run.status.value,
            "only a cancel ends a run cancelled",
        )  # fmt: skip
    return cleanup


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
    message: tuple[str, Any] | tuple[str, Any, str | None] | None = None,
    submission_id: str | None = None,
    signal_id: str | None = None,
    error_class: str | None = None,
    retry_note: str | None = None,
) -> NodeFinished:
    """Settle an attempt and apply the engine's decision, in one fenced write.

    ``GoTo`` makes the next node current (and, with ``start_next``, opens its attempt in
    the same write); ``Finish`` ends the run. ``step_count`` counts the settled attempt.
    An attempt the server already settled (``runs.unrouted_attempt``) is only routed.
    ``message`` (level, text) records a notify node's workflow message in the same write.
    ``submission_id`` accepts the validated submission that answered the attempt's request
    (the request is answered and its unsent step messages cancelled) in the same write.
    ``signal_id`` consumes the event a ``wait_event`` node received, in the same write.
    ``error_class`` (the qualified class of the exception that failed the attempt) and
    ``retry_note`` (why its retry policy did not retry it) go into the event's data.
    """
    if status not in (AttemptStatus.COMPLETED, AttemptStatus.FAILED, AttemptStatus.TIMED_OUT):
        raise ValueError(f"finish_node settles completed, failed or timed_out, not {status}")
    holder: list[Attempt] = []
    run_id = claim.run_id

    def apply(tx: Transaction, run: RunRow) -> None:
        if run.status is not RunStatus.RUNNING:
            raise InvalidTransitionError(run_id, "finish a node of", run.status.value)
        cleanup = _check_ending(tx, run, attempt_id, next_step)
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
        if signal_id is not None:
            signals.consume(tx, run_id, signal_id, attempt_id)
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
            _record_notice(tx, run, attempt_id, active_node, message)
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
                data["nextAttemptId"] = holder[0].attempt_id
                data["settingsChange"] = holder[0].settings_change
        elif cleanup is not None:
            cleanups.finish(tx, run, cleanup, status, error, data)
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
    if error_class is not None:
        data["errorClass"] = error_class
    if retry_note is not None:
        data["retryNote"] = retry_note
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
