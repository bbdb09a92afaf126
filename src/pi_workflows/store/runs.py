"""Reading runs, and the one write path that changes a run: revision, event and projection.

Every change to a run, or to a record that belongs to it, goes through ``write_run`` (or,
for a brand-new run, ``finish_change`` after the insert), so each commit bumps the
revision exactly once, appends exactly one immutable event and rebuilds the viewer row.
When a claim is given the write is fenced: the claim is checked and renewed first.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pi_workflows.store import jsoncol
from pi_workflows.store.claims import Claim, check_and_renew
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import RevisionConflictError, RunNotFoundError
from pi_workflows.store.projection import expected_view, write_view
from pi_workflows.store.states import RunStatus

RUN_COLUMNS = (
    "run_id, workflow_name, definition_digest, status, park_reason, park_detail, current_node,"
    " step_count, revision, output_json, error, created_at, updated_at, finished_at, round,"
    " unrouted_attempt, origin, origin_session"
)


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


def finish_change(
    tx: Transaction, run_id: str, old_revision: int, event_type: str, data: dict[str, Any]
) -> WriteResult:
    """Bump the revision, append the event, rebuild the viewer row. Call once per write."""
    revision = old_revision + 1
    cursor = tx.conn.execute(
        "UPDATE runs SET revision = ?, updated_at = ? WHERE run_id = ? AND revision = ?",
        (revision, tx.now, run_id, old_revision),
    )
    if cursor.rowcount != 1:
        actual = read_run(tx.conn, run_id).revision
        raise RevisionConflictError(run_id, old_revision, actual)
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
    return WriteResult(run_id, revision, RunStatus(view["run_status"]), event_type)


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
    expected revision, apply the domain change, bump the revision, append the event,
    rebuild the viewer row, commit. Any failure rolls everything back.
    """
    with db.atomic(name) as tx:
        run = read_run(tx.conn, run_id)
        if claim is not None:
            check_and_renew(tx, claim, db.lease_ms)
        if expected_revision is not None and run.revision != expected_revision:
            raise RevisionConflictError(run_id, expected_revision, run.revision)
        apply(tx, run)
        return finish_change(tx, run_id, run.revision, event_type, event_data or {})
