"""Interactive requests, their submissions, and human decisions (one resolution each).

Owns ``interactive_requests``, ``interactive_submissions``, ``human_decisions`` and
``human_decision_resolutions``. A request is ``pending`` until a submission is recorded
(``validating``: a runner checks it with the node's ``validate``); an accepted submission
answers the request, a rejected one makes it ``pending`` again. Opening a request records
the message that presents it, and closing one cancels that message if it was never sent.
Functions here run inside a run write's transaction and never bump revisions or append
events themselves.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from pi_workflows.protocol import REQUEST_ID_PLACEHOLDER
from pi_workflows.store import jsoncol, messages, values
from pi_workflows.store.database import Transaction
from pi_workflows.store.errors import DecisionResolvedError, InvalidTransitionError
from pi_workflows.store.ids import new_id


@dataclass(frozen=True)
class InteractionDraft:
    """What a runner asks for when a node needs an answer from outside.

    ``kind`` is ``checkpoint``, ``agent``, ``assistant`` or ``decision``; a decision carries its
    ``choices`` (ids) and optional ``timeout_choice``. ``timeout_ms`` is measured from the
    commit by the store clock and becomes the durable deadline. ``for_person`` makes a
    checkpoint a person's question (a decision always is one).
    """

    kind: str
    request: dict[str, Any]
    timeout_ms: int | None = None
    choices: list[str] = field(default_factory=list)
    timeout_choice: str | None = None
    for_person: bool = False


@dataclass(frozen=True)
class Interaction:
    """An ``interactive_requests`` row."""

    request_id: str
    run_id: str
    attempt_id: str
    node_id: str
    kind: str
    status: str
    request: Any
    answer: Any
    deadline_at: int | None
    origin_session: str | None = None
    created_at: int = 0
    for_person: bool = False
    """Only a person answers it (the ``for_person`` column): a human decision, or a
    ``checkpoint(for_person=True)``. No model turn presents it, no headless agent waits for
    it, and ``interaction.submit`` (the model's way to answer) refuses it."""


@dataclass(frozen=True)
class Submission:
    """An ``interactive_submissions`` row: one submitted answer and its validation."""

    submission_id: str
    request_id: str
    status: str  # validating | accepted | rejected
    value: Any
    error: str | None


_COLUMNS = (
    "request_id, run_id, attempt_id, node_id, kind, status, request_json, answer_json, deadline_at,"
    " answer_ref, origin_session, created_at, for_person"
)


def _interaction(conn: sqlite3.Connection, row: sqlite3.Row) -> Interaction:
    return Interaction(
        request_id=row[0],
        run_id=row[1],
        attempt_id=row[2],
        node_id=row[3],
        kind=row[4],
        status=row[5],
        request=jsoncol.loads(row[6]),
        answer=values.load(conn, row[7], row[9]),
        deadline_at=row[8],
        origin_session=row[10],
        created_at=row[11],
        for_person=bool(row[12]),
    )


def read_request(conn: sqlite3.Connection, request_id: str) -> Interaction | None:
    """One request by id."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM interactive_requests WHERE request_id = ?", (request_id,)
    ).fetchone()
    return None if row is None else _interaction(conn, row)


def request_for_clients(request: Any, request_id: str) -> Any:
    """The stored ``request`` as clients see it: an agent step's ``contract`` was rendered
    by the runner before the id existed, so its ``REQUEST_ID_PLACEHOLDER`` is filled in."""
    contract = request.get("contract") if isinstance(request, dict) else None
    if not isinstance(contract, str) or REQUEST_ID_PLACEHOLDER not in contract:
        return request
    return {**request, "contract": contract.replace(REQUEST_ID_PLACEHOLDER, request_id)}


def open_request_of(conn: sqlite3.Connection, run_id: str) -> Interaction | None:
    """The run's open (pending or validating) request, if any."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM interactive_requests WHERE run_id = ?"
        " AND status IN ('pending', 'validating')",
        (run_id,),
    ).fetchone()
    return None if row is None else _interaction(conn, row)


def open_request(
    tx: Transaction,
    run_id: str,
    attempt_id: str,
    node_id: str,
    draft: InteractionDraft,
    *,
    workflow: str,
    origin_session: str | None,
) -> str:
    """Record a pending request (its decision row, and the message that presents it to the
    run's origin session) and return the request id.

    A run waits on at most one open request: while one is pending or validating, opening
    another is ``InvalidTransitionError`` naming it (the unique index is only the backstop).
    """
    existing = open_request_of(tx.conn, run_id)
    if existing is not None:
        raise InvalidTransitionError(
            run_id,
            f"open a {draft.kind} request for node {node_id} of",
            "waiting",
            f"request {existing.request_id} of node {existing.node_id} is still"
            f" {existing.status}; a run waits on at most one request at a time",
        )
    request_id = new_id("req")
    deadline_at = None if draft.timeout_ms is None else tx.now + draft.timeout_ms
    for_person = draft.for_person or draft.kind == "decision"
    tx.conn.execute(
        "INSERT INTO interactive_requests (request_id, run_id, attempt_id, node_id, kind, status,"
        " request_json, for_person, deadline_at, origin_session, created_at)"
        " VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?)",
        (
            request_id,
            run_id,
            attempt_id,
            node_id,
            draft.kind,
            jsoncol.dumps(draft.request),
            int(for_person),
            deadline_at,
            origin_session,
            tx.now,
        ),
    )
    if draft.kind == "decision":
        tx.conn.execute(
            "INSERT INTO human_decisions (decision_id, run_id, choices_json, timeout_choice,"
            " status, created_at) VALUES (?, ?, ?, ?, 'pending', ?)",
            (request_id, run_id, jsoncol.dumps(draft.choices), draft.timeout_choice, tx.now),
        )
    messages.record_request(
        tx,
        run_id=run_id,
        workflow=workflow,
        request_id=request_id,
        node_id=node_id,
        kind=draft.kind,
        request=draft.request,
        deadline_at=deadline_at,
        origin_session=origin_session,
        for_person=for_person,
    )
    return request_id


def present_again(
    tx: Transaction, request: Interaction, workflow: str, *, reason: str | None = None
) -> str:
    """Record a ``resumed`` message presenting the open ``request`` once more; ``reason``
    (``store/delivery.py``) makes its text open with why."""
    return messages.record_request(
        tx,
        run_id=request.run_id,
        workflow=workflow,
        request_id=request.request_id,
        node_id=request.node_id,
        kind=request.kind,
        request=request.request,
        deadline_at=request.deadline_at,
        origin_session=request.origin_session,
        resumed=True,
        again=reason,
        for_person=request.for_person,
    )


def active_for_session(conn: sqlite3.Connection, session_id: str) -> Interaction | None:
    """A session's one active request: the oldest open request of its runs that wait or
    work on it (a paused run's request waits until the run is resumed)."""
    row = conn.execute(
        "SELECT q.request_id FROM interactive_requests q JOIN runs r USING (run_id)"
        " WHERE q.origin_session = ? AND q.status IN ('pending', 'validating')"
        " AND r.status IN ('waiting', 'queued', 'running') ORDER BY q.created_at, q.rowid LIMIT 1",
        (session_id,),
    ).fetchone()
    return None if row is None else read_request(conn, row[0])


def reset_delivery(tx: Transaction, request_id: str) -> None:
    """A person resumed the request's run: its provider errors and headless-agent nudges
    start over, and no earlier presentation timer is due any more (``store/delivery.py``)."""
    tx.conn.execute(
        "UPDATE interactive_requests SET turn_errors = 0, agent_nudges = 0, present_at = NULL,"
        " present_reason = NULL WHERE request_id = ?",
        (request_id,),
    )


def settle_request(
    tx: Transaction,
    request_id: str,
    status: str,
    answer: Any = None,
    *,
    submission_error: str = "the request was closed before the submission was validated",
) -> bool:
    """Close an open request as ``answered``, ``timed_out`` or ``cancelled``.

    A submission still validating is rejected with ``submission_error``, and the request's
    unsent messages are cancelled. Returns False when it was already closed (the first
    settlement wins).
    """
    cursor = tx.conn.execute(
        "UPDATE interactive_requests SET status = ?, answer_json = ?, answer_ref = ?,"
        " settled_at = ?, present_at = NULL, present_reason = NULL"
        " WHERE request_id = ? AND status IN ('pending', 'validating')",
        (status, *values.store(tx, answer), tx.now, request_id),
    )
    if cursor.rowcount != 1:
        return False
    tx.conn.execute(
        "UPDATE interactive_submissions SET status = 'rejected', error = ?, settled_at = ?,"
        " closed = 1 WHERE request_id = ? AND status = 'validating'",
        (submission_error, tx.now, request_id),
    )
    messages.cancel_for_request(tx, request_id)
    return True


def submit(tx: Transaction, request_id: str, value: Any, submitted_by: str | None) -> str:
    """Record a submission for validation; the pending request becomes ``validating``.

    Raises ``InvalidTransitionError`` unless the request is pending (one submission is
    validated at a time). Returns the submission id.
    """
    cursor = tx.conn.execute(
        "UPDATE interactive_requests SET status = 'validating', present_at = NULL,"
        " present_reason = NULL WHERE request_id = ? AND status = 'pending'",
        (request_id,),
    )
    if cursor.rowcount != 1:
        row = tx.conn.execute(
            "SELECT run_id, status FROM interactive_requests WHERE request_id = ?", (request_id,)
        ).fetchone()
        raise InvalidTransitionError(
            row[0] if row else request_id,
            f"submit to request {request_id}",
            "waiting",
            f"the request is {row[1] if row else 'unknown'}",
        )
    submission_id = new_id("sub")
    tx.conn.execute(
        "INSERT INTO interactive_submissions (submission_id, request_id, status, value_json,"
        " value_ref, submitted_by, submitted_at) VALUES (?, ?, 'validating', ?, ?, ?, ?)",
        (submission_id, request_id, *values.store(tx, value), submitted_by, tx.now),
    )
    return submission_id


def read_submission(conn: sqlite3.Connection, submission_id: str) -> Submission | None:
    """One submission by id."""
    row = conn.execute(
        "SELECT submission_id, request_id, status, value_json, value_ref, error"
        " FROM interactive_submissions WHERE submission_id = ?",
        (submission_id,),
    ).fetchone()
    if row is None:
        return None
    return Submission(row[0], row[1], row[2], values.load(conn, row[3], row[4]), row[5])


def was_closed(conn: sqlite3.Connection, submission_id: str) -> bool:
    """Whether a rejected submission was turned away because its request closed or its run
    was paused (or its step's deadline had passed when it was rejected), rather than refused
    by the workflow's ``validate``. Decided from the stored rows alone, so a retry of the
    submit command hears the same answer whatever happened to the request since."""
    row = conn.execute(
        "SELECT s.closed, s.settled_at, q.deadline_at FROM interactive_submissions s"
        " JOIN interactive_requests q USING (request_id) WHERE s.submission_id = ?",
        (submission_id,),
    ).fetchone()
    if row is None:
        return False
    closed, settled_at, deadline_at = row
    late = deadline_at is not None and settled_at is not None and settled_at >= deadline_at
    return bool(closed) or late


def validating_of(conn: sqlite3.Connection, run_id: str) -> Submission | None:
    """The submission of the run's open request that is being validated, if any."""
    row = conn.execute(
        "SELECT s.submission_id FROM interactive_submissions s JOIN interactive_requests r"
        " USING (request_id) WHERE r.run_id = ? AND s.status = 'validating'",
        (run_id,),
    ).fetchone()
    return None if row is None else read_submission(conn, row[0])


def accept(tx: Transaction, submission_id: str, attempt_id: str) -> Submission:
    """A runner's validation accepted the submission: it answers its request (whose
    attempt must be ``attempt_id``)."""
    submission = read_submission(tx.conn, submission_id)
    request = None if submission is None else read_request(tx.conn, submission.request_id)
    if (
        submission is None
        or submission.status != "validating"
        or request is None
        or request.attempt_id != attempt_id
    ):
        raise InvalidTransitionError(
            request.run_id if request else submission_id,
            f"accept submission {submission_id}",
            submission.status if submission else "unknown",
            "it is not the validating submission of this attempt",
        )
    tx.conn.execute(
        "UPDATE interactive_submissions SET status = 'accepted', settled_at = ?"
        " WHERE submission_id = ?",
        (tx.now, submission_id),
    )
    settle_request(tx, submission.request_id, "answered", submission.value)
    return submission


def reject(tx: Transaction, submission_id: str, error: str, *, closed: bool = False) -> Submission:
    """The submission failed validation (or validation did not finish): it is rejected with
    ``error`` and its request is ``pending`` again, ready for a corrected submission.
    ``closed``: rejected because its run was paused, not by validation (``was_closed``)."""
    submission = read_submission(tx.conn, submission_id)
    if submission is None or submission.status != "validating":
        raise InvalidTransitionError(
            submission_id,
            f"reject submission {submission_id}",
            submission.status if submission else "unknown",
            "it is not being validated",
        )
    tx.conn.execute(
        "UPDATE interactive_submissions SET status = 'rejected', error = ?, settled_at = ?,"
        " closed = ? WHERE submission_id = ?",
        (error, tx.now, int(closed), submission_id),
    )
    tx.conn.execute(
        "UPDATE interactive_requests SET status = 'pending' WHERE request_id = ?"
        " AND status = 'validating'",
        (submission.request_id,),
    )
    return submission


def resolve_decision(
    tx: Transaction,
    decision_id: str,
    resolution: str,
    choice_id: str | None,
    resolved_by: str | None,
) -> bool:
    """Write the one resolution of a pending decision; False if it was already resolved."""
    cursor = tx.conn.execute(
        "UPDATE human_decisions SET status = 'resolved' WHERE decision_id = ?"
        " AND status = 'pending'",
        (decision_id,),
    )
    if cursor.rowcount != 1:
        return False
    tx.conn.execute(
        "INSERT INTO human_decision_resolutions (decision_id, resolution, choice_id,"
        " resolved_by, resolved_at) VALUES (?, ?, ?, ?, ?)",
        (decision_id, resolution, choice_id, resolved_by, tx.now),
    )
    return True


def latest_decision_of(conn: sqlite3.Connection, run_id: str) -> str | None:
    """The run's open decision, else its most recent one (so a late answer learns the
    winner), else None."""
    row = conn.execute(
        "SELECT request_id FROM interactive_requests WHERE run_id = ? AND kind = 'decision'"
        " ORDER BY status IN ('pending', 'validating') DESC, created_at DESC, rowid DESC LIMIT 1",
        (run_id,),
    ).fetchone()
    return None if row is None else str(row[0])


def raise_if_resolved(conn: sqlite3.Connection, decision_id: str) -> None:
    """``DecisionResolvedError`` naming the winner if the decision already has its one
    resolution."""
    row = conn.execute(
        "SELECT resolution, choice_id, resolved_by FROM human_decision_resolutions"
        " WHERE decision_id = ?",
        (decision_id,),
    ).fetchone()
    if row is not None:
        raise DecisionResolvedError(decision_id, row[0], row[1], row[2])


def cancel_open(tx: Transaction, run_id: str) -> list[str]:
    """Cancel the run's open requests (rejecting a validating submission, cancelling unsent
    messages) and resolve its pending decisions as cancelled."""
    rows = tx.conn.execute(
        "SELECT request_id, kind FROM interactive_requests WHERE run_id = ?"
        " AND status IN ('pending', 'validating')",
        (run_id,),
    ).fetchall()
    cancelled: list[str] = []
    for request_id, kind in rows:
        settle_request(tx, request_id, "cancelled", submission_error="the run was cancelled")
        if kind == "decision":
            resolve_decision(tx, request_id, "cancelled", None, None)
        cancelled.append(request_id)
    return cancelled


def due_requests(conn: sqlite3.Connection, now: int) -> list[str]:
    """Open requests whose deadline has passed at ``now``, oldest deadline first."""
    rows = conn.execute(
        "SELECT request_id FROM interactive_requests WHERE status IN ('pending', 'validating')"
        " AND deadline_at IS NOT NULL AND deadline_at <= ? ORDER BY deadline_at",
        (now,),
    ).fetchall()
    return [row[0] for row in rows]


def next_deadline(conn: sqlite3.Connection) -> int | None:
    """The earliest deadline of any open request."""
    row = conn.execute(
        "SELECT MIN(deadline_at) FROM interactive_requests WHERE status IN ('pending',"
        " 'validating') AND deadline_at IS NOT NULL"
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def timeout_choice(conn: sqlite3.Connection, decision_id: str) -> str | None:
    """The default choice of a decision, if it has one."""
    row = conn.execute(
        "SELECT timeout_choice FROM human_decisions WHERE decision_id = ?", (decision_id,)
    ).fetchone()
    return None if row is None else row[0]
