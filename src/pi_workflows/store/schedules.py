"""Durable schedules: their rows, their one state machine, and the transactions that fire them.

Owns ``schedules`` and ``schedule_fires`` (``schema.sql`` states each invariant). A schedule
is ``active``, ``paused`` or ``deleted`` (``STATUS_TRANSITIONS``); a fire time it acted on
is one ``schedule_fires`` row keyed by (schedule, fire time) whose outcome is ``started``,
``skipped``, ``queued``, ``failed`` or ``missed`` (only a ``queued`` one changes again,
``QUEUED_SETTLES``).

The guarantee: a fire time starts at most one run and is never fired twice. ``fire`` records
the fire row, reserves its run (``lifecycle.reserve``, which joins this transaction) and moves
the schedule's ``next_fire_at`` past the fire time, all in one transaction that is fenced by
the fire time it expects: a crash before the commit leaves the schedule due at the same fire
time (fired again, with the same key), a crash after it leaves the fire recorded and the next
fire time moved (never fired again). A unique index on the runs' provenance (schedule id,
fire time) refuses a second run for one fire time whatever happens.

Runs in the server only; the server decides when (``server/schedules.py``), never workflow
code. Every function here is short and never waits on a child.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from pi_workflows.store import faults, jsoncol
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import (
    InvalidScheduleError,
    ScheduleLimitError,
    ScheduleNameTakenError,
    ScheduleNotFoundError,
)
from pi_workflows.store.ids import new_id
from pi_workflows.store.reservations import NewRun, RunEnvironment, reserve
from pi_workflows.store.schedule_times import Cadence, format_every
from pi_workflows.store.states import RunStatus

MAX_SCHEDULES: Final = 1_000
"""Most schedules that are not deleted; ``schedule add`` refuses more (``limitReached``)."""
MAX_INPUT_BYTES: Final = 64 * 1024
"""Largest input (canonical JSON) a schedule keeps for its runs."""
MAX_QUEUED: Final = 10
"""Most fires an ``overlap queue`` schedule keeps queued; a fire beyond them is skipped."""
MAX_CATCHUP: Final = 100
"""Most missed fire times ``catchup all`` fires after downtime (the newest ones)."""
LATE_GRACE_MS: Final = 60_000
"""A due fire time at most this old is on time; older ones count as missed (``catchup none``)."""
FIRE_HISTORY: Final = 1_000
"""Settled fire rows kept per schedule (the newest); queued ones are always kept."""

faults.declare("schedules.change", "a schedule is added, paused, resumed or deleted")
faults.declare(
    "schedules.catch_up", "a due schedule's missed fire times are recorded and its next fire moved"
)
faults.declare(
    "schedules.fire",
    "a fire is recorded with the run it starts and the schedule's next fire time moved past it",
)
faults.declare(
    "schedules.start_queued", "a queued fire starts its run (or fails) once the previous run ended"
)


class ScheduleStatus(StrEnum):
    """Where a schedule is. The invariant of each status is in its comment."""

    ACTIVE = "active"  # fires; next_fire_at is set
    PAUSED = "paused"  # fires nothing (queued fires wait); next_fire_at is NULL
    DELETED = "deleted"  # kept as provenance only; no name, no queued fires, never active again


class ScheduleAction(StrEnum):
    """What a person does to a schedule (``schedule pause|resume|delete``)."""

    PAUSE = "pause"
    RESUME = "resume"
    DELETE = "delete"


STATUS_TRANSITIONS: Final[dict[ScheduleAction, dict[ScheduleStatus, ScheduleStatus]]] = {
    ScheduleAction.PAUSE: {
        ScheduleStatus.ACTIVE: ScheduleStatus.PAUSED,
        ScheduleStatus.PAUSED: ScheduleStatus.PAUSED,
    },
    ScheduleAction.RESUME: {
        ScheduleStatus.PAUSED: ScheduleStatus.ACTIVE,
        ScheduleStatus.ACTIVE: ScheduleStatus.ACTIVE,
    },
    ScheduleAction.DELETE: {
        ScheduleStatus.ACTIVE: ScheduleStatus.DELETED,
        ScheduleStatus.PAUSED: ScheduleStatus.DELETED,
    },
}
"""Every status change of a schedule; an action on a status it does not list is impossible
(a deleted schedule cannot be found by name to begin with). Pausing a paused schedule and
resuming an active one change nothing."""


class Overlap(StrEnum):
    """What a fire does while the schedule's previous run has not ended."""

    SKIP = "skip"  # record the fire skipped
    QUEUE = "queue"  # record it queued; start it when the previous run ends (MAX_QUEUED)
    ALLOW = "allow"  # start it anyway


class Catchup(StrEnum):
    """What happens to fire times that passed while no fire could be made (downtime)."""

    LATEST = "latest"  # one fire, for the most recent of them
    ALL = "all"  # every one, oldest first (at most MAX_CATCHUP, the newest)
    NONE = "none"  # none; the next fire is the next time still on time


class FireOutcome(StrEnum):
    """What one fire time did; only ``QUEUED`` changes again (``QUEUED_SETTLES``)."""

    STARTED = "started"  # run_id is the run it started
    SKIPPED = "skipped"  # overlap skip (or a full queue, or the schedule deleted); detail says
    QUEUED = "queued"  # waits for the previous run to end; settled_at NULL
    FAILED = "failed"  # the workflow did not resolve; detail is the one-line error
    MISSED = "missed"  # stands for `missed` fire times dropped by the catch-up rule


QUEUED_SETTLES: Final = frozenset({FireOutcome.STARTED, FireOutcome.FAILED, FireOutcome.SKIPPED})
"""The outcomes a queued fire may settle as."""

_COLUMNS = (
    "schedule_id, name, workflow_spec, workflow_name, project_dir, input_json, every_ms, cron,"
    " timezone, anchor_at, overlap, catchup, status, next_fire_at, last_fire_at, origin,"
    " created_at, updated_at, deleted_at, working_dir, environment_json"
)


@dataclass(frozen=True)
class ScheduleRow:
    """A ``schedules`` row as stored (see ``schema.sql`` for each column's invariant)."""

    schedule_id: str
    name: str
    workflow_spec: str
    workflow_name: str
    project_dir: str | None
    input_json: str
    every_ms: int | None
    cron: str | None
    timezone: str
    anchor_at: int
    overlap: Overlap
    catchup: Catchup
    status: ScheduleStatus
    next_fire_at: int | None
    last_fire_at: int | None
    origin: str | None
    created_at: int
    updated_at: int
    deleted_at: int | None
    working_dir: str | None
    environment_json: str

    @property
    def cadence(self) -> Cadence:
        """When it fires."""
        return Cadence(self.every_ms, self.cron, self.timezone, self.anchor_at)

    @property
    def input(self) -> Any:
        """The input each of its runs starts with."""
        return jsoncol.loads(self.input_json)

    @property
    def environment(self) -> RunEnvironment:
        """The environment each of its runs gets (recorded from the client that added it)."""
        return RunEnvironment(self.working_dir, dict(jsoncol.loads(self.environment_json)))


def _row(row: sqlite3.Row) -> ScheduleRow:
    values = list(row)
    values[10], values[11], values[12] = (
        Overlap(values[10]), Catchup(values[11]), ScheduleStatus(values[12])
    )  # fmt: skip
    return ScheduleRow(*values)


@dataclass(frozen=True)
class ScheduleDraft:
    """Everything ``add`` needs: checked by the caller except the name and the input size."""

    name: str
    workflow_spec: str
    workflow_name: str
    project_dir: str | None
    input: Any
    every_ms: int | None
    cron: str | None
    timezone: str
    overlap: Overlap
    catchup: Catchup
    environment: RunEnvironment  # what its runs run with (the adding client's)
    origin: str | None = None


def check_input(value: Any) -> str:
    """The input as canonical JSON, refused (``InvalidScheduleError``) over MAX_INPUT_BYTES."""
    text = jsoncol.dumps({} if value is None else value)
    size = len(text.encode("utf-8"))
    if size > MAX_INPUT_BYTES:
        raise InvalidScheduleError(
            "input",
            f"--input is {size} bytes of JSON; a schedule keeps at most {MAX_INPUT_BYTES}"
            " (read large data from a file in the workflow instead)",
        )
    return text


# --- reads ---------------------------------------------------------------------------------


def read(conn: sqlite3.Connection, schedule_id: str) -> ScheduleRow:
    """One schedule by id, deleted or not; ``ScheduleNotFoundError`` when there is none."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM schedules WHERE schedule_id = ?", (schedule_id,)
    ).fetchone()
    if row is None:
        raise ScheduleNotFoundError(schedule_id)
    return _row(row)


def find(conn: sqlite3.Connection, name: str) -> ScheduleRow:
    """The schedule that is not deleted with this name, or any schedule with this id."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM schedules WHERE name = ? AND status != 'deleted'", (name,)
    ).fetchone()
    if row is None:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM schedules WHERE schedule_id = ?", (name,)
        ).fetchone()
    if row is None:
        raise ScheduleNotFoundError(name)
    return _row(row)


def listed(conn: sqlite3.Connection, *, include_deleted: bool = False) -> list[ScheduleRow]:
    """Schedules by name (the deleted ones too when asked; at most 1,000)."""
    where = "" if include_deleted else " WHERE status != 'deleted'"
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM schedules{where} ORDER BY name LIMIT ?", (MAX_SCHEDULES,)
    ).fetchall()
    return [_row(row) for row in rows]


def due(conn: sqlite3.Connection, now: int, limit: int) -> list[tuple[str, int]]:
    """``(schedule id, fire time)`` of active schedules due at ``now``, earliest first."""
    rows = conn.execute(
        "SELECT schedule_id, next_fire_at FROM schedules WHERE status = 'active'"
        " AND next_fire_at <= ? ORDER BY next_fire_at LIMIT ?",
        (now, limit),
    ).fetchall()
    return [(row[0], int(row[1])) for row in rows]


def next_due(conn: sqlite3.Connection, busy: set[str]) -> int | None:
    """The earliest next fire time of an active schedule not in ``busy`` (None: none)."""
    for schedule_id, fire_at in conn.execute(
        "SELECT schedule_id, next_fire_at FROM schedules WHERE status = 'active'"
        " ORDER BY next_fire_at LIMIT ?",
        (len(busy) + 1,),
    ):
        if schedule_id not in busy:
            return int(fire_at)
    return None


def any_active(conn: sqlite3.Connection) -> bool:
    """Whether any schedule is active (a server with one never exits idle)."""
    return (
        conn.execute(
            "SELECT 1 FROM schedules WHERE status = 'active' AND next_fire_at IS NOT NULL LIMIT 1"
        ).fetchone()
        is not None
    )


def queued_heads(conn: sqlite3.Connection, limit: int) -> list[tuple[str, int]]:
    """The oldest queued fire of each schedule that has one: ``(schedule id, fire time)``."""
    rows = conn.execute(
        "SELECT schedule_id, MIN(fire_at) FROM schedule_fires WHERE outcome = 'queued'"
        " GROUP BY schedule_id LIMIT ?",
        (limit,),
    ).fetchall()
    return [(row[0], int(row[1])) for row in rows]


def active_run(conn: sqlite3.Connection, schedule_id: str) -> tuple[str, RunStatus] | None:
    """An unfinished run of the schedule (queued, running, waiting or paused), the one of
    its oldest fire, with its status; None when every run it started has ended. Any run
    counts, not only the newest fire's: a person may have restarted an older one, and
    ``skip`` and ``queue`` promise that no two runs of the schedule are active at once."""
    row = conn.execute(
        "SELECT run_id, status FROM runs WHERE schedule_id = ?"
        " AND status IN ('queued', 'running', 'waiting', 'paused')"  # runs_schedule_active
        " ORDER BY schedule_fire_at LIMIT 1",
        (schedule_id,),
    ).fetchone()
    return None if row is None else (row[0], RunStatus(row[1]))


def _queued_count(conn: sqlite3.Connection, schedule_id: str) -> int:
    return int(
        conn.execute(
            "SELECT COUNT(*) FROM schedule_fires WHERE schedule_id = ? AND outcome = 'queued'",
            (schedule_id,),
        ).fetchone()[0]
    )


def verdict(
    conn: sqlite3.Connection, row: ScheduleRow, *, queue_limit: int = MAX_QUEUED
) -> tuple[FireOutcome, str | None]:
    """What a fire of ``row`` does now by its overlap policy: ``STARTED`` (start a run),
    ``SKIPPED`` with why, or ``QUEUED`` (while fewer than ``queue_limit`` fires wait)."""
    if row.overlap is Overlap.ALLOW:
        return FireOutcome.STARTED, None
    running = active_run(conn, row.schedule_id)
    active = running is not None
    why = None if running is None else f"the run {running[0]} is still {running[1]}"
    if row.overlap is Overlap.SKIP:
        return (FireOutcome.SKIPPED, why) if active else (FireOutcome.STARTED, None)
    queued = _queued_count(conn, row.schedule_id)
    if not active and not queued:
        return FireOutcome.STARTED, None
    if queued >= queue_limit:
        return FireOutcome.SKIPPED, f"{queued} fires are already queued (the limit); {why}"
    return FireOutcome.QUEUED, why


# --- changes by people ---------------------------------------------------------------------


def _second_up(ms: int) -> int:
    return -(-ms // 1000) * 1000


def add(db: Database, draft: ScheduleDraft) -> ScheduleRow:
    """Store a new active schedule; its first fire is its cadence's first time after now.

    Refused (nothing stored) when the name is taken by a schedule that is not deleted
    (``ScheduleNameTakenError``), there are ``MAX_SCHEDULES`` already, or the input is too
    large.
    """
    input_json = check_input(draft.input)
    with db.atomic("schedules.change") as tx:
        taken = tx.conn.execute(
            "SELECT 1 FROM schedules WHERE name = ? AND status != 'deleted'", (draft.name,)
        ).fetchone()
        if taken is not None:
            raise ScheduleNameTakenError(draft.name)
        live = tx.conn.execute(
            "SELECT COUNT(*) FROM schedules WHERE status != 'deleted'"
        ).fetchone()[0]
        if live >= MAX_SCHEDULES:
            raise ScheduleLimitError(MAX_SCHEDULES)
        anchor = _second_up(tx.now)  # whole-second fire times for an `every` cadence
        cadence = Cadence(draft.every_ms, draft.cron, draft.timezone, anchor)
        first = cadence.next_after(tx.now)
        if first is None:
            raise InvalidScheduleError("cron", f"--cron {draft.cron!r} never fires")
        schedule_id = new_id("sch")
        tx.conn.execute(
            f"INSERT INTO schedules ({_COLUMNS}) VALUES"
            " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', ?, NULL, ?, ?, ?, NULL, ?, ?)",
            (
                schedule_id, draft.name, draft.workflow_spec, draft.workflow_name,
                draft.project_dir, input_json, draft.every_ms, draft.cron, draft.timezone,
                anchor, draft.overlap.value, draft.catchup.value, first, draft.origin,
                tx.now, tx.now, draft.environment.working_dir,
                jsoncol.dumps(draft.environment.variables),
            ),
        )  # fmt: skip
        return read(tx.conn, schedule_id)


def change(
    db: Database, name: str, action: ScheduleAction, *, as_of: int | None = None
) -> ScheduleRow:
    """Pause, resume or delete the schedule ``name`` (or id) by ``STATUS_TRANSITIONS``.

    A resumed schedule fires next at its first time after now: the fire times that passed
    while it was paused are not caught up. A deleted one keeps its row as the provenance of
    its runs (they go on), and its queued fires are settled ``skipped``. The server fires
    what was due before a pause or delete first (``ScheduleFirer.fire_due``); fire times
    due at ``as_of`` (the moment the command was handled; default now) that still have no
    fire are recorded as one ``missed`` row, so every fire time before it stopped is
    accounted for. Later ones came after the person's change and are not its fires.
    """
    with db.atomic("schedules.change") as tx:
        row = find(tx.conn, name)
        target = STATUS_TRANSITIONS[action].get(row.status)
        if target is None:  # only a deleted schedule, found by its id
            raise ScheduleNotFoundError(name)
        if target is row.status:
            return row
        if row.status is ScheduleStatus.ACTIVE:
            how = "deleted" if target is ScheduleStatus.DELETED else "paused"
            _record_overdue(tx, row, how, tx.now if as_of is None else min(as_of, tx.now))
        next_fire = None
        if target is ScheduleStatus.ACTIVE:
            next_fire = row.cadence.next_after(tx.now)
            if next_fire is None:
                raise InvalidScheduleError("cron", f"--cron {row.cron!r} never fires again")
        tx.conn.execute(
            "UPDATE schedules SET status = ?, next_fire_at = ?, updated_at = ?,"
            " deleted_at = ? WHERE schedule_id = ?",
            (
                target.value,
                next_fire,
                tx.now,
                tx.now if target is ScheduleStatus.DELETED else None,
                row.schedule_id,
            ),
        )
        if target is ScheduleStatus.DELETED:
            tx.conn.execute(
                "UPDATE schedule_fires SET outcome = 'skipped', settled_at = ?,"
                " detail = 'the schedule was deleted' WHERE schedule_id = ? AND outcome = 'queued'",
                (tx.now, row.schedule_id),
            )
        return read(tx.conn, row.schedule_id)


# --- firing --------------------------------------------------------------------------------


def _record_missed(
    tx: Transaction, row: ScheduleRow, first: int, until: int, count: int, exact: bool
) -> None:
    many = f"{count}" if exact else f"at least {count}"
    detail = (
        f"{many} fire time(s) passed while no fire could be made (the server was down or"
        f" busy); catchup {row.catchup.value} dropped them"
    )
    tx.conn.execute(
        "INSERT INTO schedule_fires (schedule_id, fire_at, outcome, detail, missed,"
        " missed_until, recorded_at, settled_at) VALUES (?, ?, 'missed', ?, ?, ?, ?, ?)",
        (row.schedule_id, first, detail, count, until, tx.now, tx.now),
    )


def _record_overdue(tx: Transaction, row: ScheduleRow, how: str, as_of: int) -> None:
    """Record as missed the fire times of an active schedule that were due at ``as_of``
    but not fired yet, because it is being ``how`` (paused or deleted) now."""
    first = row.next_fire_at
    if first is None or first > as_of:
        return
    until = row.cadence.latest_until(as_of, 1)
    last = until[0] if until else first
    count, exact = row.cadence.count_due(first, last)
    many = f"{count}" if exact else f"at least {count}"
    tx.conn.execute(
        "INSERT INTO schedule_fires (schedule_id, fire_at, outcome, detail, missed,"
        " missed_until, recorded_at, settled_at) VALUES (?, ?, 'missed', ?, ?, ?, ?, ?)"
        " ON CONFLICT DO NOTHING",
        (
            row.schedule_id, first,
            f"{many} fire time(s) were due but not fired yet when the schedule was {how}",
            count, last, tx.now, tx.now,
        ),
    )  # fmt: skip


def catch_up(
    db: Database, schedule_id: str, now: int, *, down_until: int | None = None
) -> int | None:
    """Apply the catch-up rule to a due schedule; the fire time to fire now (None: none).

    Normally that is its ``next_fire_at``. Fire times count as missed when a later one is
    due too (they passed while no server ran, or while it could not fire), or, for
    ``catchup none``, when they are at or before ``down_until`` (the moment this server
    started: they passed while no server ran) or older than ``LATE_GRACE_MS``. Then
    ``catchup`` decides: ``latest`` fires only the newest due time, ``all`` fires each (the
    newest ``MAX_CATCHUP``), ``none`` fires only a due time that is not missed. Dropped fire
    times are recorded as one ``missed`` fire row and ``next_fire_at`` moves to the time
    fired now (or to the next future time), in one transaction; when nothing is dropped
    nothing is written.
    """
    row = read(db.conn, schedule_id)
    first = row.next_fire_at
    if row.status is not ScheduleStatus.ACTIVE or first is None or first > now:
        return None
    cadence = row.cadence
    following = cadence.next_after(first)
    behind = following is not None and following <= now
    newest = cadence.latest_until(now, 1)[0] if behind else first
    if row.catchup is Catchup.ALL:
        kept = cadence.latest_until(now, MAX_CATCHUP) if behind else [first]
        fire_at = kept[0] if kept else first
    elif row.catchup is Catchup.LATEST:
        fire_at = newest
    else:
        cutoff = now - LATE_GRACE_MS
        if down_until is not None and first <= down_until:
            cutoff = max(cutoff, down_until)
        # Nothing due is on time: every due time goes, and the next fire is in the future.
        fire_at = newest if newest > cutoff else cadence.next_after(now) or first
    if fire_at <= first:
        return first
    with db.atomic("schedules.catch_up") as tx:
        current = read(tx.conn, schedule_id)
        if current.status is not ScheduleStatus.ACTIVE or current.next_fire_at != first:
            return None  # changed meanwhile: the next tick looks again
        dropped_until = cadence.latest_until(fire_at - 1, 1)
        until = dropped_until[0] if dropped_until else first
        count, exact = cadence.count_due(first, until)
        _record_missed(tx, current, first, until, count, exact)
        tx.conn.execute(
            "UPDATE schedules SET next_fire_at = ?, updated_at = ? WHERE schedule_id = ?",
            (fire_at, tx.now, schedule_id),
        )
    return fire_at if fire_at <= now else None


@dataclass(frozen=True)
class FireResult:
    """What ``fire`` or ``start_queued`` did.

    ``outcome`` None: nothing was recorded, because the schedule moved on meanwhile (paused,
    deleted, fired) or, with ``needs_run``, because the fire must start a run and was given
    no description of it: describe the workflow and call again with the same fire time.
    """

    outcome: FireOutcome | None
    run_id: str | None = None
    detail: str | None = None
    needs_run: bool = False


def started_run(db: Database, row: ScheduleRow, fire_at: int, new_run: NewRun) -> str:
    """Reserve the fire's run with its provenance; called inside the fire's transaction,
    which ``reserve`` joins."""
    assert db.in_transaction, "a fire's run is reserved inside the fire's own transaction"
    run = dataclasses.replace(
        new_run,
        input=row.input,
        origin=f"schedule:{row.schedule_id}",
        origin_session=None,
        detached=False,
        schedule_id=row.schedule_id,
        schedule_fire_at=fire_at,
        environment=row.environment,
    )
    return reserve(db, run).run_id


def _advance(tx: Transaction, row: ScheduleRow, fire_at: int) -> None:
    """Move ``next_fire_at`` past ``fire_at`` and keep the newest FIRE_HISTORY settled rows."""
    following = row.cadence.next_after(fire_at)
    status = ScheduleStatus.ACTIVE if following is not None else ScheduleStatus.PAUSED
    tx.conn.execute(
        "UPDATE schedules SET next_fire_at = ?, last_fire_at = ?, status = ?, updated_at = ?"
        " WHERE schedule_id = ?",
        (following, fire_at, status.value, tx.now, row.schedule_id),
    )
    tx.conn.execute(
        "DELETE FROM schedule_fires WHERE schedule_id = ? AND outcome != 'queued' AND fire_at <"
        " (SELECT fire_at FROM schedule_fires WHERE schedule_id = ? AND outcome != 'queued'"
        " ORDER BY fire_at DESC LIMIT 1 OFFSET ?)",
        (row.schedule_id, row.schedule_id, FIRE_HISTORY - 1),
    )


def fire(
    db: Database,
    schedule_id: str,
    fire_at: int,
    *,
    new_run: NewRun | None,
    error: str | None = None,
) -> FireResult:
    """Fire ``schedule_id`` at ``fire_at``: record the fire row, start its run when the
    overlap policy says so (with ``new_run``, the workflow as described now; or record it
    ``failed`` with ``error`` when it would not resolve), and move the next fire time past
    ``fire_at``, in one transaction.

    Fenced by the fire time: unless the schedule is active with ``next_fire_at == fire_at``
    nothing is written (a repeated fire after its commit is a no-op).
    """
    with db.atomic("schedules.fire") as tx:
        row = read(tx.conn, schedule_id)
        if row.status is not ScheduleStatus.ACTIVE or row.next_fire_at != fire_at:
            return FireResult(None)
        outcome, detail = verdict(tx.conn, row)
        run_id = None
        if outcome is FireOutcome.STARTED:
            if error is not None:
                outcome, detail = FireOutcome.FAILED, error
            elif new_run is None:
                return FireResult(None, needs_run=True)
            else:
                run_id = started_run(db, row, fire_at, new_run)
        tx.conn.execute(
            "INSERT INTO schedule_fires (schedule_id, fire_at, outcome, run_id, detail,"
            " recorded_at, settled_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                schedule_id,
                fire_at,
                outcome.value,
                run_id,
                detail,
                tx.now,
                None if outcome is FireOutcome.QUEUED else tx.now,
            ),
        )
        _advance(tx, row, fire_at)
        return FireResult(outcome, run_id, detail)


def queue_ready(conn: sqlite3.Connection, schedule_id: str) -> int | None:
    """The fire time of the schedule's oldest queued fire when it may start now: the
    schedule is active and every run it started has ended (None otherwise)."""
    row = conn.execute(
        "SELECT f.fire_at FROM schedule_fires f JOIN schedules s USING (schedule_id)"
        " WHERE f.schedule_id = ? AND f.outcome = 'queued' AND s.status = 'active'"
        " ORDER BY f.fire_at LIMIT 1",
        (schedule_id,),
    ).fetchone()
    if row is None:
        return None
    if active_run(conn, schedule_id) is not None:
        return None
    return int(row[0])


def start_queued(
    db: Database,
    schedule_id: str,
    fire_at: int,
    *,
    new_run: NewRun | None,
    error: str | None = None,
) -> FireResult:
    """Start the queued fire ``fire_at`` of ``schedule_id`` (its run keeps that fire time as
    provenance), or settle it ``failed`` with ``error``, in one transaction; nothing is
    written unless it is still the oldest queued fire and may start now (``queue_ready``)."""
    with db.atomic("schedules.start_queued") as tx:
        if queue_ready(tx.conn, schedule_id) != fire_at:
            return FireResult(None)
        row = read(tx.conn, schedule_id)
        outcome, detail, run_id = FireOutcome.FAILED, error, None
        if error is None:
            if new_run is None:
                return FireResult(None, needs_run=True)
            run_id = started_run(db, row, fire_at, new_run)
            outcome = FireOutcome.STARTED
        assert outcome in QUEUED_SETTLES
        tx.conn.execute(
            "UPDATE schedule_fires SET outcome = ?, run_id = ?, detail = ?, settled_at = ?"
            " WHERE schedule_id = ? AND fire_at = ? AND outcome = 'queued'",
            (outcome.value, run_id, detail, tx.now, schedule_id, fire_at),
        )
        return FireResult(outcome, run_id, detail)


# --- views ---------------------------------------------------------------------------------


def view(conn: sqlite3.Connection, row: ScheduleRow, *, with_input: bool = False) -> dict[str, Any]:
    """The wire form of a schedule (``Schedule`` in docs/protocol.md)."""
    last = conn.execute(
        "SELECT fire_at, outcome, run_id, detail FROM schedule_fires WHERE schedule_id = ?"
        " ORDER BY fire_at DESC LIMIT 1",
        (row.schedule_id,),
    ).fetchone()
    shown: dict[str, Any] = {
        "scheduleId": row.schedule_id,
        "name": row.name,
        "workflow": row.workflow_name,
        "workflowSpec": row.workflow_spec,
        "projectDir": row.project_dir,
        "every": None if row.every_ms is None else format_every(row.every_ms),
        "everyMs": row.every_ms,
        "cron": row.cron,
        "timezone": row.timezone,
        "cadence": row.cadence.describe(),
        "overlap": row.overlap.value,
        "catchup": row.catchup.value,
        "status": row.status.value,
        "nextFireAt": row.next_fire_at,
        "lastFireAt": row.last_fire_at,
        "lastFire": None if last is None else _fire_json(conn, tuple(last)),
        "queued": _queued_count(conn, row.schedule_id),
        "origin": row.origin,
        "createdAt": row.created_at,
        "updatedAt": row.updated_at,
        "deletedAt": row.deleted_at,
    }
    if with_input:
        shown["input"] = row.input
    return shown


def _fire_json(conn: sqlite3.Connection, fire: tuple[Any, ...]) -> dict[str, Any]:
    fire_at, outcome, run_id, detail = fire[:4]
    status = None
    if run_id is not None:
        found = conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        status = None if found is None else found[0]
    return {
        "fireAt": fire_at,
        "outcome": outcome,
        "runId": run_id,
        "runStatus": status,
        "detail": detail,
    }


def fires(conn: sqlite3.Connection, schedule_id: str, limit: int) -> list[dict[str, Any]]:
    """The schedule's newest ``limit`` fires, newest first (``ScheduleFire`` in
    docs/protocol.md), each with its run's status (null once the run was pruned)."""
    rows = conn.execute(
        "SELECT fire_at, outcome, run_id, detail, missed, missed_until, recorded_at, settled_at,"
        " source FROM schedule_fires WHERE schedule_id = ? ORDER BY fire_at DESC LIMIT ?",
        (schedule_id, limit),
    ).fetchall()
    return [
        {
            **_fire_json(conn, tuple(row)),
            "missed": row[4],
            "missedUntil": row[5],
            "recordedAt": row[6],
            "settledAt": row[7],
            "source": row[8],  # cadence | trigger | backfill (store/schedule_manual.py)
        }
        for row in rows
    ]


def provenance(conn: sqlite3.Connection, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{runId: {scheduleId, name, fireAt}}`` for those of ``run_ids`` a schedule started."""
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(run_ids), 500):
        batch = run_ids[start : start + 500]
        marks = ", ".join("?" for _ in batch)
        for run_id, schedule_id, fire_at, name in conn.execute(
            "SELECT r.run_id, r.schedule_id, r.schedule_fire_at, s.name FROM runs r"
            f" JOIN schedules s USING (schedule_id) WHERE r.run_id IN ({marks})",
            batch,
        ):
            found[run_id] = {"scheduleId": schedule_id, "name": name, "fireAt": fire_at}
    return found


def ids_named(conn: sqlite3.Connection, name: str) -> list[str]:
    """Every schedule id with this name (deleted ones too), or the id itself."""
    rows = conn.execute(
        "SELECT schedule_id FROM schedules WHERE name = ? UNION"
        " SELECT schedule_id FROM schedules WHERE schedule_id = ?",
        (name, name),
    ).fetchall()
    return [row[0] for row in rows]
