"""Reading runs, and the one write path that changes a run: revisions, event and projection.

Every change to a run, or to a record that belongs to it, goes through ``write_run`` (or,
for a brand-new run, ``finish_change`` after the insert), so each commit bumps the
revision exactly once, appends exactly one immutable event and rebuilds the viewer row.
When a claim is given the write is fenced: the claim is checked and renewed first.

The revision rule, enforced here and nowhere else: a run has two revisions. ``revision``
moves with every change (one event each; clients' ``expectedRevision`` and history cursors
use it). ``execution_revision`` moves with every change *except* session and presentation
bookkeeping (``PRESENTATION_EVENTS``: a message marked sent or presented again, a client's
progress update on an open step): it is what a runner reads its state at and what its
proposals are fenced by, so such bookkeeping can never make a live runner's next proposal
conflict. A presentation write takes no claim and may not change anything a runner reads
(``PresentationWriteError`` otherwise). A runner's own progress value (``PROGRESS_EVENTS``,
``store/progress.py``) is fenced by its claim yet is read by no runner: it does not move
the execution revision either, and is refused the same way if it would change what a
runner reads; nor does a value a callback publishes for outside readers
(``PUBLISHED_EVENTS``, ``store/published.py``). An event sent to a run that wakes no wait
(``signals.RECEIVED_EVENT``) does not move it either: a runner reads events only inside its
own fenced proposals, never from the state it keeps. Nor does a change of the run's live
settings (``SETTINGS_EVENTS``): an attempt gets the settings in its own proposal's reply.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pi_workflows.store import faults, jsoncol
from pi_workflows.store.claims import Claim, check_and_renew
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import (
    PresentationWriteError,
    RevisionConflictError,
    RunNotFoundError,
)
from pi_workflows.store.projection import expected_view, write_view
from pi_workflows.store.states import RunStatus

RUN_COLUMNS = (
    "run_id, workflow_name, definition_digest, status, park_reason, park_detail, current_node,"
    " step_count, revision, output_json, error, created_at, updated_at, finished_at, round,"
    " unrouted_attempt, origin, origin_session, execution_revision"
)

PRESENTATION_EVENTS = frozenset(
    {
        "message.sent",
        "message.resumed",
        "interaction.update",
        "step.reminded",
        # Delivery to seats (store/delivery.py): a turn lost with its seat, a step presented
        # again, a presentation again made due after a provider error, an agent nudged.
        "turn.lost",
        "step.represented",
        "step.retryDue",
        "agent.nudged",
        # A channel refused an answer from a person it does not allow (store/seat_feed.py).
        "decision.refused",
    }
)
"""Event types of session and presentation bookkeeping: they move ``revision`` but never
``execution_revision`` (the module docstring states the rule)."""

PROGRESS_EVENTS = frozenset({"node.update"})
"""A runner's ``publish_update`` values sampled into history (``store/progress.py``): written
under the runner's claim, read by no runner, so they leave ``execution_revision`` alone."""

SETTINGS_EVENTS = frozenset({"settings.changed"})
"""A change of the run's live settings (``store/settings.py``): no runner keeps settings in
its state (each attempt gets them in its own fenced proposal's reply), so a change leaves
``execution_revision`` alone and may not change anything a runner reads."""

FOLLOW_UP_EVENTS = frozenset({"followUp.queued", "followUp.removed"})
"""A follow-up prompt queued on the run or removed (``store/follow_ups.py``): for its origin
session after it completed, read by no runner, so they leave ``execution_revision`` alone
and may not change anything a runner reads."""

PUBLISHED_EVENTS = frozenset({"value.published"})
"""A value a callback published for readers outside the run (``store/published.py``):
written under the runner's claim, read by no runner, so it leaves ``execution_revision``
alone and may not change anything a runner reads."""

OUTSIDE_EXECUTION_EVENTS = (
    PRESENTATION_EVENTS
    | PROGRESS_EVENTS
    | SETTINGS_EVENTS
    | FOLLOW_UP_EVENTS
    | PUBLISHED_EVENTS
    | {"signal.received"}
)
"""Every event type that leaves ``execution_revision`` where it is."""

RULE_OFF_FLAG = "runs.presentation_moves_execution"
"""A fault flag (``PI_WORKFLOWS_FAULTS=runs.presentation_moves_execution=flag``) that turns
the revision rule off, so that tests and the campaign can prove they see its absence."""


@dataclass(frozen=True)
class RunRow:
    """A ``runs`` row as stored, without its input."""

    run_id: str
    workflow_name: str
    definition_digest: str
    status: RunStatus
    park_reason: str | None
    park_detail: str | None
    current_node: str | None
    step_count: int
    revision: int
    output_json: str | None  # decoded only by readers that need it (``views.run_view``)
    error: str | None
    created_at: int
    updated_at: int
    finished_at: int | None
    round: int
    unrouted_attempt: str | None
    origin: str | None
    origin_session: str | None  # the Pi session that presents its requests and messages
    # Moves with every change but presentation bookkeeping; a runner is fenced by it.
    execution_revision: int


def _row(row: sqlite3.Row) -> RunRow:
    return RunRow(
        run_id=row[0],
        workflow_name=row[1],
        definition_digest=row[2],
        status=RunStatus(row[3]),
        park_reason=row[4],
        park_detail=row[5],
        current_node=row[6],
        step_count=row[7],
        revision=row[8],
        output_json=row[9],
        error=row[10],
        created_at=row[11],
        updated_at=row[12],
        finished_at=row[13],
        round=row[14],
        unrouted_attempt=row[15],
        origin=row[16],
        origin_session=row[17],
        execution_revision=row[18],
    )


def read_run(conn: sqlite3.Connection, run_id: str) -> RunRow:
    """Read one run; ``RunNotFoundError`` when there is none."""
    row = conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    if row is None:
        raise RunNotFoundError(run_id)
    return _row(row)


@dataclass(frozen=True)
class WriteResult:
    """What a committed run write produced."""

    run_id: str
    revision: int
    status: RunStatus
    event_type: str
    execution_revision: int = 0  # 0 only for a reservation (the run's first revision is 1)


def finish_change(
    tx: Transaction, run_id: str, old_revision: int, event_type: str, data: dict[str, Any]
) -> WriteResult:
    """Bump the revisions, append the event, rebuild the viewer row. Call once per write.

    ``execution_revision`` moves too unless ``event_type`` is presentation bookkeeping.
    """
    revision = old_revision + 1
    outside = event_type in OUTSIDE_EXECUTION_EVENTS
    moves = 0 if outside and not faults.flagged(RULE_OFF_FLAG) else 1
    cursor = tx.conn.execute(
        "UPDATE runs SET revision = ?, execution_revision = execution_revision + ?,"
        " updated_at = ? WHERE run_id = ? AND revision = ? RETURNING execution_revision",
        (revision, moves, tx.now, run_id, old_revision),
    )
    moved = cursor.fetchone()
    if moved is None:
        actual = read_run(tx.conn, run_id).revision
        raise RevisionConflictError(run_id, old_revision, actual)
    execution_revision = int(moved[0])
    view = expected_view(tx.conn, run_id)
    assert view is not None  # the UPDATE above found the run
    tx.conn.execute(
        "INSERT INTO events (run_id, revision, type, run_status, generation, data_json, at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            revision,
            event_type,
            view["run_status"],
            view["generation"] or None,
            jsoncol.dumps(data),
            tx.now,
        ),
    )
    write_view(tx.conn, view)
    return WriteResult(
        run_id, revision, RunStatus(view["run_status"]), event_type, execution_revision
    )


def write_run(
    db: Database,
    run_id: str,
    *,
    name: str,
    event_type: str,
    event_data: dict[str, Any] | None = None,
    claim: Claim | None,
    expected_revision: int | None = None,
    apply: Callable[[Transaction, RunRow], object],
) -> WriteResult:
    """Change one run in one transaction; fenced by ``claim`` when one is given.

    Order inside the transaction: read the run, check and renew the claim, check the
    expected revision (a runner's: the *execution* revision it last read), apply the domain
    change, bump the revisions, append the event, rebuild the viewer row, commit. Any
    failure rolls everything back. A presentation write (``PRESENTATION_EVENTS``) takes no
    claim and must leave what a runner reads as it was (``PresentationWriteError``).
    """
    presentation = event_type in PRESENTATION_EVENTS
    if presentation and (claim is not None or expected_revision is not None):
        raise PresentationWriteError(run_id, event_type, "it cannot be fenced by a runner")
    with db.atomic(name) as tx:
        run = read_run(tx.conn, run_id)
        if claim is not None:
            check_and_renew(tx, claim, db.lease_ms)
        if expected_revision is not None and run.execution_revision != expected_revision:
            raise RevisionConflictError(run_id, expected_revision, run.execution_revision)
        checked = presentation or event_type in (
            PROGRESS_EVENTS | SETTINGS_EVENTS | FOLLOW_UP_EVENTS | PUBLISHED_EVENTS
        )
        facts = _execution_facts(tx.conn, run_id) if checked else None
        apply(tx, run)
        if facts is not None and _execution_facts(tx.conn, run_id) != facts:
            raise PresentationWriteError(run_id, event_type, "it changed what a runner reads")
        return finish_change(tx, run_id, run.revision, event_type, event_data or {})


def _execution_facts(conn: sqlite3.Connection, run_id: str) -> tuple[Any, ...]:
    """What a runner reads of a run, as one comparable tuple: the run row's execution
    columns, its unfinished attempt, its open request and submissions, its effects."""
    row = conn.execute(
        "SELECT status, park_reason, current_node, step_count, round, unrouted_attempt,"
        " output_json, output_ref, error FROM runs WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    attempt = conn.execute(
        "SELECT attempt_id, status FROM node_attempts WHERE run_id = ?"
        " AND status IN ('running', 'waiting')",
        (run_id,),
    ).fetchone()
    requests = conn.execute(
        "SELECT q.request_id, q.status, q.deadline_at, (SELECT s.submission_id FROM"
        " interactive_submissions s WHERE s.request_id = q.request_id AND s.status ="
        " 'validating') FROM interactive_requests q WHERE q.run_id = ?"
        " AND q.status IN ('pending', 'validating')",
        (run_id,),
    ).fetchall()
    effects = conn.execute(
        "SELECT effect_id, status FROM effects WHERE run_id = ? AND status IN"
        " ('pending', 'applying', 'ambiguous')",
        (run_id,),
    ).fetchall()
    wait = conn.execute(
        "SELECT wait_id, status, due_at FROM run_waits WHERE run_id = ? AND status = 'pending'",
        (run_id,),
    ).fetchone()
    return (tuple(row), attempt and tuple(attempt), [tuple(r) for r in requests],
            [tuple(e) for e in effects], wait and tuple(wait))  # fmt: skip
