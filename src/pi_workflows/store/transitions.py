"""The one transition applier: a run's status change with every projection it implies.

``apply_transition`` is the only code that changes ``runs.status``. It checks
``states.TRANSITIONS`` first, then changes together the run status, the queue row, the
active attempt, decision and interaction state, durable waits, effects, the claim (released
whenever the run leaves ``running``) and the terminal message. It runs inside a run write's
transaction (``runs.write_run``), which appends the event and rebuilds the viewer row; the
operations that call it live in ``lifecycle`` (run-level), ``node_steps`` and ``wait_steps``
(a runner's steps), ``claiming``, ``reservations``, ``takeover``, ``interaction_writes``,
``signals`` and ``reminders``.
"""

from __future__ import annotations

from typing import Any

from pi_workflows.store import (
    attempts,
    children,
    effects,
    follow_ups,
    interactions,
    jsoncol,
    messages,
    values,
    waits,
)
from pi_workflows.store.database import Transaction
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.runs import RunRow, finish_change, read_run
from pi_workflows.store.states import (
    CODE_CHANGED,
    QUEUE_STATUS_OF,
    TERMINAL_STATUSES,
    TRANSITIONS,
    AttemptStatus,
    NextCommand,
    Operation,
    ParkReason,
    RunStatus,
    code_changed_advice,
)

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
    asked = park_reason  # what the caller parks for (an uncertain effect may change it below)
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
    # A cleanup ends what a cancel ends (its run only goes on to run its cleanup node).
    ending = terminal or operation is Operation.CLEAN_UP
    if leaving or ending:
        uncertain = effects.settle_on_exit(tx, run.run_id, terminal=ending)
        if uncertain and not ending:
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
            why = (
                f"{CODE_CHANGED}; {code_changed_advice(run.run_id)}"
                if park_reason == ParkReason.WORKFLOW_SOURCE_CHANGED
                else f"the run was paused ({park_reason}); resume it and submit again"
            )
            interactions.reject(
                tx, submission.submission_id, f"validation did not finish: {why}", closed=True
            )
    if target in _ATTEMPT_STATUS_OF_TERMINAL:
        attempts.close_unfinished(tx, run.run_id, _ATTEMPT_STATUS_OF_TERMINAL[target])
    elif operation is Operation.CLEAN_UP:
        attempts.close_unfinished(tx, run.run_id, AttemptStatus.CANCELLED)
    elif leaving and target in (RunStatus.PAUSED, RunStatus.QUEUED):
        parked = asked in (ParkReason.USER_PAUSED, ParkReason.SERVER_STOPPED)
        attempts.close_unfinished(
            tx, run.run_id, AttemptStatus.INTERRUPTED, only_running=True,
            error=f"{attempts.PARKED_MARK}{asked})" if parked else None,
        )  # fmt: skip
    if ending or operation is Operation.RESTART:
        waits.cancel_open(tx, run.run_id)  # a sleep, retry delay or event wait ends with it
        # Its joins end with it; a tree cancel (lifecycle.cancel) ends the children too.
        children.parent_ended(tx, run.run_id)
    if ending:
        interactions.cancel_open(tx, run.run_id)
    if terminal:
        # A follow-up is sent only after a completion: any other end cancels them, saying why.
        follow_ups.cancel_waiting(tx, run.run_id, target)
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
            # A child's end is its parent's progress, not news for the session: one
            # "run finished" message per child of a fan_out would flood it.
            None if _is_child(tx, run.run_id) else run.origin_session,
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
    if terminal:
        _join_parent(tx, run, target)
    return target


def _join_parent(tx: Transaction, child: RunRow, status: RunStatus) -> None:
    """A child run ended: its parent's join records it, in this same transaction; when it
    was the last one, the parent's wait fires and a waiting parent is queued, exactly once
    (``children.child_ended``). The parent's change is its own revision and event."""
    ended = children.child_ended(tx, child, status)
    if ended is None:
        return
    if ended.parent is not None:
        apply_transition(tx, ended.parent, Operation.RESUME, next_command=NextCommand.RESUME)
    parent = read_run(tx.conn, ended.parent_id)
    finish_change(tx, ended.parent_id, parent.revision, ended.event, ended.data)


def _is_child(tx: Transaction, run_id: str) -> bool:
    row = tx.conn.execute("SELECT parent_run_id FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return row is not None and row[0] is not None
