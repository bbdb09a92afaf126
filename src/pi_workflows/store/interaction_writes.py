"""Run writes for interactive requests: submissions, their outcome, and decision answers.

Each is one run write (revision, event, projection), like every lifecycle transition:

- ``submit`` records a submission as ``validating`` and queues the waiting run, so that a
  supervised runner loads the workflow and runs the node's ``validate`` (never the server,
  never a client). The runner accepts it with ``lifecycle.finish_node(submission_id=...)``
  or rejects it with ``reject``; if it dies first, the server calls ``abandon``.
- ``answer_decision`` is the only way a protected human decision is answered: the first
  valid answer, the timeout default or a cancellation wins, exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pi_workflows.store import delivery, interactions, jsoncol
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidTransitionError, RequestClosedError
from pi_workflows.store.interactions import Interaction
from pi_workflows.store.runs import RunRow, WriteResult, write_run
from pi_workflows.store.states import NextCommand, Operation, RunStatus, paused_refusal
from pi_workflows.store.transitions import apply_transition

PROTECTED_DECISION_MESSAGE = "Protected human decisions cannot be answered by the workflow tool"
"""The exact refusal of any non-person answer to a human decision."""


@dataclass(frozen=True)
class Submitted:
    """A committed submission: its id and the run write."""

    submission_id: str
    result: WriteResult


def _request(db: Database, request_id: str) -> Interaction:
    with db.read() as conn:
        request = interactions.read_request(conn, request_id)
    if request is None:
        raise RequestClosedError(request_id, "unknown")
    return request


def submit(
    db: Database,
    request_id: str,
    value: Any,
    *,
    kinds: frozenset[str],
    submitted_by: str | None,
) -> Submitted:
    """Record ``value`` as the validating submission of a pending request of ``kinds`` and
    queue its waiting run so that a runner validates it.

    A decision is refused with ``PROTECTED_DECISION_MESSAGE``; a request that is not
    pending is ``RequestClosedError`` (answered, timed out, cancelled, or still validating
    another submission); a paused run must be resumed first.
    """
    request = _request(db, request_id)
    holder: list[str] = []

    def apply(tx: Transaction, run: RunRow) -> None:
        current = interactions.read_request(tx.conn, request_id)
        assert current is not None
        if current.kind == "decision":
            raise InvalidTransitionError(
                run.run_id, f"answer request {request_id}", run.status.value,
                PROTECTED_DECISION_MESSAGE,
            )  # fmt: skip
        if current.kind not in kinds:
            raise InvalidTransitionError(
                run.run_id,
                f"answer request {request_id}",
                run.status.value,
                f"it is a {current.kind} request",
            )
        if current.status != "pending":
            raise RequestClosedError(request_id, current.status)
        if run.status is not RunStatus.WAITING:
            raise InvalidTransitionError(
                run.run_id,
                f"answer request {request_id}",
                run.status.value,
                paused_refusal(run.run_id, run.park_reason)
                if run.status is RunStatus.PAUSED
                else "",
            )
        holder.append(interactions.submit(tx, request_id, value, submitted_by))
        apply_transition(tx, run, Operation.RESUME, next_command=NextCommand.RESUME)

    result = write_run(
        db,
        request.run_id,
        name="interactions.submit",
        event_type="interaction.submitted",
        event_data={"requestId": request_id},
        claim=None,
        apply=apply,
    )
    return Submitted(holder[0], result)


def reject(db: Database, claim: Claim, submission_id: str, error: str) -> WriteResult:
    """The runner's validation rejected the submission: record ``error``, reopen the
    request and let the run wait again with no claim (the runner then exits)."""

    def apply(tx: Transaction, run: RunRow) -> None:
        submission = interactions.reject(tx, submission_id, error)
        request = interactions.read_request(tx.conn, submission.request_id)
        if request is None or request.run_id != run.run_id:
            raise InvalidTransitionError(
                run.run_id, f"reject submission {submission_id}", run.status.value
            )
        apply_transition(tx, run, Operation.RETURN)
        delivery.reopened(tx, submission.request_id)

    return write_run(
        db,
        claim.run_id,
        name="interactions.reject",
        event_type="interaction.rejected",
        event_data={"submissionId": submission_id},
        claim=claim,
        apply=apply,
    )


def abandon(db: Database, fence: Claim, reason: str) -> WriteResult | None:
    """The runner validating the run's submission ended without an outcome.

    The submission is rejected with ``validation did not finish: <reason>`` and the request
    is pending again for a corrected retry; if its deadline has passed meanwhile it is
    closed as timed out instead and the run is queued to route the timeout (the same
    attempt). None when the run has no validating submission.
    """
    run_id = fence.run_id
    with db.read() as conn:
        submission = interactions.validating_of(conn, run_id)
    if submission is None:
        return None

    def apply(tx: Transaction, run: RunRow) -> None:
        request = interactions.read_request(tx.conn, submission.request_id)
        assert request is not None
        error = f"validation did not finish: {reason}"
        if request.deadline_at is not None and request.deadline_at <= tx.now:
            interactions.settle_request(
                tx, request.request_id, "timed_out",
                submission_error=f"{error}; the step's deadline passed",
            )  # fmt: skip
            apply_transition(tx, run, Operation.RECOVER, next_command=NextCommand.RESUME)
            return
        interactions.reject(tx, submission.submission_id, error)
        apply_transition(tx, run, Operation.RETURN)
        delivery.reopened(tx, submission.request_id)

    return write_run(
        db,
        run_id,
        name="interactions.abandon",
        event_type="interaction.abandoned",
        event_data={"submissionId": submission.submission_id},
        claim=fence,
        apply=apply,
    )


def answer_decision(
    db: Database,
    request_id: str,
    choice: str,
    *,
    answered_by: str | None,
    person: str | None = None,
) -> WriteResult:
    """A person's answer to a human decision; queues the run to route the choice.

    ``choice`` must be one of the decision's choices. If the decision was already resolved
    (another answer, its timeout default, or a cancellation won), ``DecisionResolvedError``
    names the winner; nothing changes.
    """
    request = _request(db, request_id)
    if request.kind != "decision":
        raise InvalidTransitionError(
            request.run_id, f"decide request {request_id}", "waiting", "it is not a decision"
        )

    def apply(tx: Transaction, run: RunRow) -> None:
        interactions.raise_if_resolved(tx.conn, request_id)
        _check_choice(tx, run.run_id, request_id, choice)
        if run.status is not RunStatus.WAITING:
            raise InvalidTransitionError(
                run.run_id, f"decide request {request_id}", run.status.value,
                paused_refusal(run.run_id, run.park_reason)
                if run.status is RunStatus.PAUSED else "",
            )  # fmt: skip
        if not interactions.settle_request(tx, request_id, "answered", {"choice": choice}):
            raise RequestClosedError(request_id, "closed")
        interactions.resolve_decision(tx, request_id, "answered", choice, answered_by)
        apply_transition(tx, run, Operation.RESUME, next_command=NextCommand.RESUME)

    return write_run(
        db,
        request.run_id,
        name="interactions.decide",
        event_type="interaction.answered",
        event_data={"requestId": request_id, "choice": choice}
        | ({"person": person} if person else {}),
        claim=None,
        apply=apply,
    )


def _check_choice(tx: Transaction, run_id: str, request_id: str, choice: str) -> None:
    row = tx.conn.execute(
        "SELECT choices_json FROM human_decisions WHERE decision_id = ?", (request_id,)
    ).fetchone()
    choices = jsoncol.loads(row[0]) if row else []
    if choice not in choices:
        raise InvalidTransitionError(
            run_id,
            "answer the decision of",
            "waiting",
            f"{choice!r} is not one of its choices: {', '.join(choices)}",
        )
