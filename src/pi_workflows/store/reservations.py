"""Creating a run, and starting it over: its definition snapshot, input and source identity.

``reserve`` creates a queued run (revision 1, its ``run.reserved`` event) with its
definition snapshot, input and the source identity it must execute; ``restart`` queues an
ended or paused run to run again from its start in a new round, optionally on its
re-resolved source. Each is one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pi_workflows.store import attempts, interactions, jsoncol, signals, values
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.ids import new_id
from pi_workflows.store.projection import project_run
from pi_workflows.store.runs import RunRow, WriteResult, write_run
from pi_workflows.store.states import AttemptStatus, NextCommand, Operation, RunStatus
from pi_workflows.store.transitions import apply_transition


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
    # Provenance of a run a schedule starts (store/schedules.py): both set, or neither.
    schedule_id: str | None = None
    schedule_fire_at: int | None = None


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
            " updated_at, schedule_id, schedule_fire_at)"
            " VALUES (?, ?, ?, ?, ?, ?, 'queued', 1, ?, ?, ?, ?, ?, ?, ?)",
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
                new_run.schedule_id,
                new_run.schedule_fire_at,
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


def restart(
    db: Database,
    run_id: str,
    *,
    new_source: tuple[NewRun, str] | None = None,
    expected_revision: int | None = None,
) -> WriteResult:
    """Queue a paused, waiting, failed, timed-out or cancelled run to run again from its
    start.

    Starts a new round: earlier attempts stay as history, but the next runner sees no
    outputs, results or steps, and events the old round never took are discarded (a wait,
    a request or a sleep of the old round is cancelled). Refused while any effect of the
    run is ambiguous (an operator resolves those first); idempotent effects left pending by
    a lost runner are cancelled.
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
        signals.discard_pending(tx, run_id)  # events of the old round are not the new one's
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
