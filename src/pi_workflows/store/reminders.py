"""Reminders: an agent step whose model ends its turn without submitting.

Owns the reminder rule and the ``reminders`` count of ``interactive_requests``. A session
reports each model turn it ran for a step (``workflowTurn.report``); when a turn started for
the step of its run's open agent request ends ``completed`` and the request is still pending
(nothing was submitted, or only rejected submissions), the model forgot to submit:

- the first ``MAX_REMINDERS`` times, the step is presented once more as a reminder (a new
  ``step`` message, superseding the unsent ones, whose text opens with the reminder line);
  the session presents it like any step, in a new turn. Only bookkeeping changes (event
  ``step.reminded``, a presentation event of the revision rule);
- the next time, the request closes ``failed`` with a ``missingSubmission`` answer and the
  run is queued: its next runner fails the same attempt with that error, which the workflow
  routes through ``$result.outcome`` like any failure (event ``interaction.missed``).

A turn the person aborts pauses the run instead (``sessions.report_turn``). Checkpoints and
assistant-message steps get no reminders (a person may answer a checkpoint; an
assistant-message step's reply is its output). Functions here run inside the report's
transaction.
"""

from __future__ import annotations

from typing import Any, Final

from pi_workflows.store import interactions, messages
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.runs import RunRow, write_run
from pi_workflows.store.states import NextCommand, Operation, RunStatus
from pi_workflows.store.transitions import apply_transition

MAX_REMINDERS: Final = 2
"""Reminders before a turn that ends without a submission fails the step (three turns in all,
as in the seed system)."""

MISSING_SUBMISSION: Final = "missingSubmission"
"""The ``reason`` of a step failed because its model never submitted it."""


def after_turn(db: Database, tx: Transaction, run_id: str, message_id: str) -> str | None:
    """A turn started for ``message_id`` ended ``completed``: remind or fail (see the module
    docstring). Returns ``reminded``, ``failed`` or None (nothing to do)."""
    row = tx.conn.execute(
        "SELECT q.request_id, q.kind, q.status, q.reminders, r.status FROM workflow_messages m"
        " JOIN interactive_requests q USING (request_id) JOIN runs r ON r.run_id = q.run_id"
        " WHERE m.message_id = ? AND q.run_id = ?",
        (message_id, run_id),
    ).fetchone()
    if row is None:
        return None
    request_id, kind, status, sent, run_status = row
    if kind != "agent" or status != "pending" or run_status != RunStatus.WAITING:
        return None
    if sent < MAX_REMINDERS:
        _remind(db, run_id, request_id, sent + 1)
        return "reminded"
    _fail(db, run_id, request_id, sent + 1)
    return "failed"


def _remind(db: Database, run_id: str, request_id: str, k: int) -> None:
    def apply(tx: Transaction, run: RunRow) -> None:
        request = interactions.read_request(tx.conn, request_id)
        assert request is not None
        tx.conn.execute(
            "UPDATE interactive_requests SET reminders = ? WHERE request_id = ?", (k, request_id)
        )
        messages.record_request(
            tx,
            run_id=run_id,
            workflow=run.workflow_name,
            request_id=request_id,
            node_id=request.node_id,
            kind=request.kind,
            request=request.request,
            deadline_at=request.deadline_at,
            origin_session=request.origin_session,
            resumed=True,
            reminder=(k, MAX_REMINDERS),
        )

    write_run(
        db,
        run_id,
        name="reminders.remind",
        event_type="step.reminded",
        event_data={"requestId": request_id, "reminder": k, "of": MAX_REMINDERS},
        claim=None,
        apply=apply,
    )


def _fail(db: Database, run_id: str, request_id: str, turns: int) -> None:
    answer: dict[str, Any] = {
        "reason": MISSING_SUBMISSION,
        "turns": turns,
        "error": (
            f"{MISSING_SUBMISSION}: the model ended {turns} turns without submitting the step"
            f" ({MAX_REMINDERS} reminders)"
        ),
    }

    def apply(tx: Transaction, run: RunRow) -> None:
        if not interactions.settle_request(tx, request_id, "failed", answer):
            return
        apply_transition(tx, run, Operation.RESUME, next_command=NextCommand.RESUME)

    write_run(
        db,
        run_id,
        name="reminders.fail",
        event_type="interaction.missed",
        event_data={"requestId": request_id, "reason": MISSING_SUBMISSION, "turns": turns},
        claim=None,
        apply=apply,
    )
