"""The rows of a new run: its definition snapshot, input, sources and environment, queue row
and first event.

Owns how a run comes to exist, inside a caller's transaction: ``reservations.reserve`` (a
client's or a schedule's run), ``children`` (a parent's child runs) and ``forks`` (a fork of
a run) all insert through ``insert_run``, so every run starts the same way. Changes no
run's status afterwards.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from pi_workflows.store import deadlines, jsoncol, settings, values
from pi_workflows.store.database import Transaction
from pi_workflows.store.projection import project_run
from pi_workflows.store.runs import WriteResult
from pi_workflows.store.states import RunStatus


@dataclass(frozen=True)
class SourceRecord:
    """Which source a run executes: root identity plus every mounted module's sha256."""

    kind: str
    ref: str
    revision: str
    project_dir: str | None
    mounted: dict[str, str]


@dataclass(frozen=True)
class RunEnvironment:
    """What a run's processes run with (docs/authoring.md, "Environment"): the working
    directory (None: ``/``) and the variables, already checked by the caller."""

    working_dir: str | None
    variables: dict[str, str]


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
    # A child run (store/children.py): its parent, the root of its tree and its depth.
    parent_run_id: str | None = None
    root_run_id: str | None = None
    depth: int = 0
    # What its runners, shell commands and headless Pi run with; None only for a child run,
    # which gets its parent's.
    environment: RunEnvironment | None = None

    # A fork (store/forks.py): the source run and the node visit it starts at; a root run.
    forked_from: str | None = None
    fork_node: str | None = None
    fork_visit: int | None = None
    # The first settings a fork carries from its source (``settings.carried``); None: the
    # definition's defaults (store/settings.py).
    settings: Any = None
    # The run deadline in ms from its start (``run start --deadline``, a fork's source's);
    # None: the definition's ``deadlineMs``, if any (store/deadlines.py).
    deadline_ms: int | None = None


def _parent_environment(tx: Transaction, parent_run_id: str | None) -> RunEnvironment:
    """The environment a child run gets: its parent's, as recorded."""
    if parent_run_id is None:
        raise ValueError("a run that is not a child needs its environment")
    return read_environment(tx.conn, parent_run_id)


def read_environment(conn: sqlite3.Connection, run_id: str) -> RunEnvironment:
    """The recorded environment of run ``run_id`` (``LookupError`` when it has none)."""
    row = conn.execute(
        "SELECT working_dir, environment_json FROM run_sources WHERE run_id = ?", (run_id,)
    ).fetchone()
    if row is None:
        raise LookupError(f"run {run_id} has no recorded sources")
    variables = jsoncol.loads(row[1])
    return RunEnvironment(row[0], dict(variables) if isinstance(variables, dict) else {})


def input_columns(tx: Transaction, value: Any) -> tuple[str | None, str | None]:
    """The input's (inline, ref) columns; JSON ``null`` is stored inline as ``null``."""
    if value is None:
        return "null", None
    return values.store(tx, value)


def store_definition(tx: Transaction, new_run: NewRun) -> None:
    definition = jsoncol.dumps(new_run.definition).encode()
    tx.conn.execute(
        "INSERT OR IGNORE INTO blobs (digest, size, data, created_at) VALUES (?, ?, ?, ?)",
        (new_run.definition_digest, len(definition), definition, tx.now),
    )


def insert_run(tx: Transaction, new_run: NewRun, run_id: str) -> WriteResult:
    """Insert a queued run (its definition is already stored) inside ``tx``: the run, its
    sources, its queue row, its first event and its viewer row. ``reserve``, a parent's
    join (``children``) and a fork (``forks``) call it; nothing else creates runs."""
    tx.conn.execute(
        "INSERT INTO runs (run_id, workflow_name, definition_digest, input_json, input_ref,"
        " input_hash, status, revision, origin, origin_session, execution_mode, created_at,"
        " updated_at, schedule_id, schedule_fire_at, parent_run_id, root_run_id, depth,"
        " forked_from, fork_node, fork_visit, deadline_ms, deadline_at)"
        " VALUES (?, ?, ?, ?, ?, ?, 'queued', 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            new_run.workflow_name,
            new_run.definition_digest,
            *input_columns(tx, new_run.input),
            new_run.input_hash,
            new_run.origin,
            f"detached-{run_id}" if new_run.detached else new_run.origin_session,
            "detached" if new_run.detached else "attached",
            tx.now,
            tx.now,
            new_run.schedule_id,
            new_run.schedule_fire_at,
            new_run.parent_run_id,
            new_run.root_run_id,
            new_run.depth,
            new_run.forked_from,
            new_run.fork_node,
            new_run.fork_visit,
            *deadlines.armed(new_run.definition, new_run.deadline_ms, tx.now),
        ),
    )
    source = new_run.source
    environment = new_run.environment
    if environment is None:
        environment = _parent_environment(tx, new_run.parent_run_id)
    tx.conn.execute(
        "INSERT INTO run_sources (run_id, source_kind, source_ref, source_revision,"
        " project_dir, mounted_json, working_dir, environment_json)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            source.kind,
            source.ref,
            source.revision,
            source.project_dir,
            jsoncol.dumps(source.mounted),
            environment.working_dir,
            jsoncol.dumps(environment.variables),
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
    settings.initial(tx, run_id, new_run.definition, new_run.settings)
    project_run(tx.conn, run_id)
    return WriteResult(run_id, 1, RunStatus.QUEUED, "run.reserved")


def stored_definition(conn: sqlite3.Connection, digest: str) -> dict[str, Any]:
    """The definition snapshot stored under ``digest`` (``{}`` when there is none)."""
    row = conn.execute("SELECT data FROM blobs WHERE digest = ?", (digest,)).fetchone()
    if row is None:
        return {}
    value = jsoncol.loads(bytes(row[0]).decode("utf-8"))
    return value if isinstance(value, dict) else {}
