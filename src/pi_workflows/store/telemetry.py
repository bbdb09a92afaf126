"""What the OpenTelemetry exporter reads: committed events, the rows they settled, a cursor.

Owns ``telemetry_cursors`` and the read-only queries the server's exporter
(``server/telemetry.py``) runs in its worker thread on a reader connection, inside one
snapshot per batch. Every read here is an index search: events by id, a run's rows by run
id, an attempt's effects and requests by attempt id. Nothing here knows OpenTelemetry, and
nothing here writes except ``save_cursor``, which the exporter calls on the server's loop
after a batch was exported, in its own transaction (never inside another write).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from pi_workflows.store import jsoncol, values
from pi_workflows.store.database import Database


@dataclass(frozen=True)
class EventRow:
    """One committed event."""

    event_id: int
    run_id: str
    revision: int
    type: str
    run_status: str  # the run's status right after the event
    generation: int | None
    data: dict[str, Any]
    at: int


_EVENT_COLUMNS = "event_id, run_id, revision, type, run_status, generation, data_json, at"


def _event(row: sqlite3.Row | tuple[Any, ...]) -> EventRow:
    data = jsoncol.loads(row[6])
    return EventRow(
        event_id=int(row[0]),
        run_id=str(row[1]),
        revision=int(row[2]),
        type=str(row[3]),
        run_status=str(row[4]),
        generation=None if row[5] is None else int(row[5]),
        data=data if isinstance(data, dict) else {},
        at=int(row[7]),
    )


def read_cursor(conn: sqlite3.Connection, name: str) -> int | None:
    """The event id after which exporter ``name`` reads next; None if it never ran."""
    row = conn.execute("SELECT event_id FROM telemetry_cursors WHERE name = ?", (name,)).fetchone()
    return None if row is None else int(row[0])


def last_event_id(conn: sqlite3.Connection) -> int:
    """The newest committed event id (0 for none)."""
    row = conn.execute("SELECT MAX(event_id) FROM events").fetchone()
    return int(row[0] or 0)


def save_cursor(db: Database, name: str, event_id: int) -> None:
    """Record that exporter ``name`` has exported every event up to ``event_id``."""
    with db.atomic("telemetry.cursor") as tx:
        tx.conn.execute(
            "INSERT INTO telemetry_cursors (name, event_id, updated_at) VALUES (?, ?, ?)"
            " ON CONFLICT (name) DO UPDATE SET event_id = excluded.event_id,"
            " updated_at = excluded.updated_at",
            (name, event_id, tx.now),
        )


def events_after(conn: sqlite3.Connection, after: int, limit: int) -> list[EventRow]:
    """At most ``limit`` events with ids above ``after``, in commit order."""
    rows = conn.execute(
        f"SELECT {_EVENT_COLUMNS} FROM events WHERE event_id > ? ORDER BY event_id LIMIT ?",
        (after, limit),
    ).fetchall()
    return [_event(row) for row in rows]


def event_at(conn: sqlite3.Connection, run_id: str, revision: int) -> EventRow | None:
    """The event of ``run_id`` at ``revision``."""
    row = conn.execute(
        f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = ? AND revision = ?",
        (run_id, revision),
    ).fetchone()
    return None if row is None else _event(row)


def run_events(conn: sqlite3.Connection, run_id: str, first: int, last: int) -> list[EventRow]:
    """The events of ``run_id`` from revision ``first`` to ``last``, in order."""
    rows = conn.execute(
        f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = ? AND revision BETWEEN ? AND ?"
        " ORDER BY revision",
        (run_id, first, last),
    ).fetchall()
    return [_event(row) for row in rows]


def round_start(conn: sqlite3.Connection, run_id: str, round_no: int) -> tuple[int, int] | None:
    """The (revision, time) at which round ``round_no`` of a run began: its first event for
    round 0, else the ``round_no``-th ``run.restarted`` event."""
    if round_no == 0:
        row = conn.execute(
            "SELECT revision, at FROM events WHERE run_id = ? AND revision = 1", (run_id,)
        ).fetchone()
    else:
        row = conn.execute(
            "SELECT revision, at FROM events WHERE run_id = ? AND type = 'run.restarted'"
            " ORDER BY revision LIMIT 1 OFFSET ?",
            (run_id, round_no - 1),
        ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


@dataclass(frozen=True)
class RunFacts:
    """A run as its spans describe it."""

    run_id: str
    workflow_name: str
    definition_digest: str
    status: str
    round: int
    step_count: int
    error: str | None
    created_at: int
    parent_run_id: str | None
    root_run_id: str | None
    detached: bool
    origin_session: str | None
    schedule_id: str | None
    input_json: str | None
    output_json: str | None
    parent_attempt_id: str | None  # the subworkflow or fan_out attempt that started it


def run_facts(conn: sqlite3.Connection, run_id: str) -> RunFacts | None:
    """The run's facts, or None when it is gone (retention removed it)."""
    row = conn.execute(
        "SELECT run_id, workflow_name, definition_digest, status, round, step_count, error,"
        " created_at, parent_run_id, root_run_id, execution_mode, origin_session, schedule_id,"
        " input_json, output_json FROM runs WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    if row is None:
        return None
    parent_attempt = None
    if row[8] is not None:
        found = conn.execute(
            "SELECT w.attempt_id FROM run_children c JOIN run_waits w ON w.wait_id = c.wait_id"
            " WHERE c.child_run_id = ?",
            (run_id,),
        ).fetchone()
        parent_attempt = None if found is None else str(found[0])
    return RunFacts(
        run_id=row[0],
        workflow_name=row[1],
        definition_digest=row[2],
        status=row[3],
        round=int(row[4]),
        step_count=int(row[5]),
        error=row[6],
        created_at=int(row[7]),
        parent_run_id=row[8],
        root_run_id=row[9],
        detached=row[10] == "detached",
        origin_session=row[11],
        schedule_id=row[12],
        input_json=row[13],
        output_json=row[14],
        parent_attempt_id=parent_attempt,
    )


def definition_nodes(conn: sqlite3.Connection, digest: str) -> dict[str, dict[str, Any]]:
    """The node map of a stored definition snapshot (kind, effect, ...), by node id."""
    try:
        snapshot = values.load(conn, None, digest)
    except LookupError:
        return {}
    nodes = snapshot.get("nodes") if isinstance(snapshot, dict) else None
    return {str(k): v for k, v in nodes.items() if isinstance(v, dict)} if nodes else {}


@dataclass(frozen=True)
class AttemptFacts:
    """A settled node attempt."""

    attempt_id: str
    round: int
    node_id: str
    visit: int
    attempt_no: int
    try_no: int
    generation: int
    status: str
    retry_outcome: str | None
    error: str | None
    started_at: int
    finished_at: int
    finished_revision: int
    output_json: str | None


def settled_attempts(
    conn: sqlite3.Connection, run_id: str, first: int, last: int
) -> list[AttemptFacts]:
    """The attempts of ``run_id`` settled by its events ``first`` to ``last`` (revisions)."""
    rows = conn.execute(
        "SELECT attempt_id, round, node_id, visit, attempt_no, try_no, generation, status,"
        " retry_outcome, error, started_at, finished_at, finished_revision, output_json"
        " FROM node_attempts WHERE run_id = ? AND finished_revision BETWEEN ? AND ?"
        " ORDER BY finished_revision, started_at",
        (run_id, first, last),
    ).fetchall()
    return [
        AttemptFacts(
            attempt_id=row[0],
            round=int(row[1]),
            node_id=row[2],
            visit=int(row[3]),
            attempt_no=int(row[4]),
            try_no=int(row[5]),
            generation=int(row[6]),
            status=row[7],
            retry_outcome=row[8],
            error=row[9],
            started_at=int(row[10]),
            finished_at=int(row[11]),
            finished_revision=int(row[12]),
            output_json=row[13],
        )
        for row in rows
    ]


@dataclass(frozen=True)
class EffectFacts:
    """A managed effect of an attempt (never its result or receipt)."""

    effect_key: str
    effect_type: str
    effect_kind: str
    status: str
    attempt_count: int
    error: str | None


def attempt_effects(conn: sqlite3.Connection, attempt_id: str) -> list[EffectFacts]:
    """The effects an attempt reserved."""
    rows = conn.execute(
        "SELECT effect_key, effect_type, effect_kind, status, attempt_count, error FROM effects"
        " WHERE node_attempt_id = ? ORDER BY created_at",
        (attempt_id,),
    ).fetchall()
    return [EffectFacts(r[0], r[1], r[2], r[3], int(r[4]), r[5]) for r in rows]


def effect_kind(conn: sqlite3.Connection, effect_id: str) -> tuple[str, str] | None:
    """(kind, type) of one effect."""
    row = conn.execute(
        "SELECT effect_kind, effect_type FROM effects WHERE effect_id = ?", (effect_id,)
    ).fetchone()
    return None if row is None else (str(row[0]), str(row[1]))


@dataclass(frozen=True)
class TurnFacts:
    """A model turn a session reported for a request's step."""

    started_at: int
    ended_at: int | None
    stop_reason: str | None


@dataclass(frozen=True)
class RequestFacts:
    """An interactive request of an attempt and how its wait went."""

    request_id: str
    kind: str
    status: str
    created_at: int
    settled_at: int | None
    deadline_at: int | None
    origin_session: str | None
    reminders: int
    submissions: int
    rejections: int
    accepted_at: int | None  # when the accepted answer was submitted
    submitted_by: str | None
    answer_json: str | None
    turns: tuple[TurnFacts, ...]


def attempt_requests(conn: sqlite3.Connection, attempt_id: str) -> list[RequestFacts]:
    """The interactive requests of an attempt, with their submissions and model turns."""
    rows = conn.execute(
        "SELECT request_id, kind, status, created_at, settled_at, deadline_at, origin_session,"
        " reminders, answer_json FROM interactive_requests WHERE attempt_id = ?"
        " ORDER BY created_at",
        (attempt_id,),
    ).fetchall()
    found: list[RequestFacts] = []
    for row in rows:
        request_id = str(row[0])
        subs = conn.execute(
            "SELECT status, submitted_at, submitted_by FROM interactive_submissions"
            " WHERE request_id = ? ORDER BY submitted_at",
            (request_id,),
        ).fetchall()
        accepted = next((s for s in subs if s[0] == "accepted"), None)
        turns = conn.execute(
            "SELECT t.started_at, t.ended_at, t.stop_reason FROM workflow_messages m"
            " JOIN workflow_turns t ON t.message_id = m.message_id WHERE m.request_id = ?"
            " ORDER BY t.started_at",
            (request_id,),
        ).fetchall()
        found.append(
            RequestFacts(
                request_id=request_id,
                kind=str(row[1]),
                status=str(row[2]),
                created_at=int(row[3]),
                settled_at=None if row[4] is None else int(row[4]),
                deadline_at=None if row[5] is None else int(row[5]),
                origin_session=row[6],
                reminders=int(row[7]),
                submissions=len(subs),
                rejections=sum(1 for s in subs if s[0] == "rejected"),
                accepted_at=None if accepted is None else int(accepted[1]),
                submitted_by=None if accepted is None else accepted[2],
                answer_json=row[8],
                turns=tuple(TurnFacts(int(t[0]), t[1], t[2]) for t in turns),
            )
        )
    return found


@dataclass(frozen=True)
class Gauges:
    """Counts the metrics report as they are now."""

    runners_live: int
    parked: dict[str, int]  # park reason -> runs


def gauges(conn: sqlite3.Connection) -> Gauges:
    """Live runners and parked runs by reason."""
    live = conn.execute("SELECT COUNT(*) FROM run_runners WHERE status != 'exited'").fetchone()
    parked = conn.execute(
        "SELECT COALESCE(park_reason, 'unknown'), COUNT(*) FROM viewer_runs"
        " WHERE status IN ('paused', 'ambiguous') GROUP BY 1"
    ).fetchall()
    return Gauges(int(live[0]), {str(r[0]): int(r[1]) for r in parked})


def submission_kind(conn: sqlite3.Connection, submission_id: str) -> str | None:
    """The kind of the request a submission answered (agent, checkpoint, ...)."""
    row = conn.execute(
        "SELECT q.kind FROM interactive_submissions s JOIN interactive_requests q"
        " ON q.request_id = s.request_id WHERE s.submission_id = ?",
        (submission_id,),
    ).fetchone()
    return None if row is None else str(row[0])


def restarts_before(conn: sqlite3.Connection, run_id: str, revision: int) -> int:
    """How many times the run was restarted before ``revision``: the round it was in."""
    row = conn.execute(
        "SELECT COUNT(*) FROM events WHERE run_id = ? AND revision < ? AND type = 'run.restarted'",
        (run_id, revision),
    ).fetchone()
    return int(row[0])
