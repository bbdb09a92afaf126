"""Fires a person asks for: ``schedule trigger`` (fire now) and ``schedule backfill`` (the
cadence's past fire times in a window).

Owns the ``trigger`` and ``backfill`` rows of ``schedule_fires`` (``source``); the rows'
table and the schedule's state machine are ``store/schedules.py``'s. Both follow the
schedule's overlap rule exactly as a cadence fire does (``schedules.verdict``): ``allow``
starts a run, ``skip`` records the fire ``skipped`` while a run of the schedule is active,
``queue`` queues it behind that run. Neither moves the schedule's next fire time: the
cadence goes on as it was.

The guarantees. A trigger records one fire at the moment it is handled (a millisecond no
fire of the schedule has and the cadence never fires at), with its run reserved in the same
transaction; a trigger with a key that a fire of the schedule already has records nothing
and returns that fire (the same key adopts, from any client). A backfill records, in one
transaction, one fire per fire time of the cadence in its window that has no fire yet,
oldest first: a time that has a fire row (whatever its outcome) or a run is left alone, so
running the same backfill twice starts nothing new. A time inside a ``missed`` row's range
is taken out of that range (the row is shortened or split), so every fire time stays
accounted for once. A window with more than ``MAX_BACKFILL`` fire times, one that reaches
the future, or one that reaches the schedule's own next fire time is refused with one line,
nothing written.

Runs in the server only. Short transactions; the caller describes the workflow first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pi_workflows.store import faults
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidScheduleError, ScheduleNotFoundError
from pi_workflows.store.reservations import NewRun
from pi_workflows.store.schedule_times import Cadence
from pi_workflows.store.schedules import (
    MAX_QUEUED,
    FireOutcome,
    ScheduleRow,
    ScheduleStatus,
    find,
    started_run,
    verdict,
)

MAX_BACKFILL: Final = 100
"""Most fire times one backfill may cover (its window is refused beyond them)."""

MAX_KEY_CHARS: Final = 200
"""Longest trigger key."""

faults.declare("schedules.trigger", "a person's fire of a schedule now, with the run it starts")
faults.declare("schedules.backfill", "one fire per past fire time of a window, with their runs")


@dataclass(frozen=True)
class ManualFire:
    """One fire a trigger or a backfill recorded (or, ``adopted``, found already there)."""

    fire_at: int
    outcome: FireOutcome
    run_id: str | None = None
    detail: str | None = None
    adopted: bool = False

    def to_json(self) -> dict[str, object]:
        """The wire shape (``schedule.trigger``, ``schedule.backfill``)."""
        return {
            "fireAt": self.fire_at,
            "outcome": self.outcome.value,
            "runId": self.run_id,
            "detail": self.detail,
            "adopted": self.adopted,
        }


@dataclass(frozen=True)
class Backfill:
    """What a backfill did: ``fires`` it recorded, and the fire times it left alone
    (``already``: they had a fire or a run)."""

    fires: list[ManualFire]
    already: list[int]
    total: int  # fire times of the cadence in the window


def _live(tx: Transaction, name: str) -> ScheduleRow:
    row = find(tx.conn, name)
    if row.status is ScheduleStatus.DELETED:
        raise ScheduleNotFoundError(name)
    return row


def _fired(tx: Transaction, schedule_id: str, fire_at: int) -> bool:
    """Whether ``fire_at`` has a fire row or a run of the schedule."""
    return (
        tx.conn.execute(
            "SELECT 1 FROM schedule_fires WHERE schedule_id = ?1 AND fire_at = ?2 UNION ALL"
            " SELECT 1 FROM runs WHERE schedule_id = ?1 AND schedule_fire_at = ?2 LIMIT 1",
            (schedule_id, fire_at),
        ).fetchone()
        is not None
    )


def _record(
    db: Database,
    tx: Transaction,
    row: ScheduleRow,
    fire_at: int,
    *,
    source: str,
    key: str | None,
    new_run: NewRun | None,
    error: str | None,
    queue_limit: int,
) -> ManualFire | None:
    """Record one fire of ``row`` at ``fire_at`` by its overlap rule; None when it must
    start a run and ``new_run`` is None (describe the workflow, then call again)."""
    outcome, detail = verdict(tx.conn, row, queue_limit=queue_limit)
    run_id = None
    if outcome is FireOutcome.STARTED:
        if error is not None:
            outcome, detail = FireOutcome.FAILED, error
        elif new_run is None:
            return None
        else:
            run_id = started_run(db, row, fire_at, new_run)
    tx.conn.execute(
        "INSERT INTO schedule_fires (schedule_id, fire_at, outcome, run_id, detail,"
        " recorded_at, settled_at, source, trigger_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            row.schedule_id, fire_at, outcome.value, run_id, detail, tx.now,
            None if outcome is FireOutcome.QUEUED else tx.now, source, key,
        ),
    )  # fmt: skip
    return ManualFire(fire_at, outcome, run_id, detail)


def trigger(
    db: Database,
    name: str,
    *,
    key: str | None,
    new_run: NewRun | None,
    error: str | None = None,
) -> ManualFire:
    """Fire schedule ``name`` now, by its overlap rule, with ``new_run`` (the workflow
    described now) or, when it did not resolve, recorded ``failed`` with ``error``; ``key``
    adopts an earlier trigger of the schedule with that key."""
    assert (new_run is None) != (error is None), "a trigger starts its run or says why not"
    if key is not None and not 1 <= len(key) <= MAX_KEY_CHARS:
        raise InvalidScheduleError("key", f"a trigger key is 1-{MAX_KEY_CHARS} characters")
    with db.atomic("schedules.trigger") as tx:
        row = _live(tx, name)
        if key is not None:
            found = tx.conn.execute(
                "SELECT fire_at, outcome, run_id, detail FROM schedule_fires"
                " WHERE schedule_id = ? AND trigger_key = ?",
                (row.schedule_id, key),
            ).fetchone()
            if found is not None:
                return ManualFire(found[0], FireOutcome(found[1]), found[2], found[3], True)
        fire_at = tx.now
        cadence = row.cadence
        while (  # a fire this very millisecond, or a time the cadence fires itself
            _fired(tx, row.schedule_id, fire_at) or cadence.next_after(fire_at - 1) == fire_at
        ):
            fire_at += 1
        fire = _record(
            db, tx, row, fire_at, source="trigger", key=key, new_run=new_run, error=error,
            queue_limit=MAX_QUEUED,
        )  # fmt: skip
        assert fire is not None  # new_run or error was given
        return fire


def window(cadence: Cadence, start: int, end: int) -> list[int]:
    """The cadence's fire times in ``[start, end]``, oldest first, at most
    ``MAX_BACKFILL + 1`` (one more says the window is too large). An ``every`` cadence's
    times are its grid, before the schedule was added too."""
    if cadence.every_ms is not None:
        every, anchor = cadence.every_ms, cadence.anchor_at
        first = anchor + -(-(start - anchor) // every) * every
        return list(range(first, end + 1, every))[: MAX_BACKFILL + 1]
    times: list[int] = []
    moment = cadence.next_after(start - 1)
    while moment is not None and moment <= end and len(times) <= MAX_BACKFILL:
        times.append(moment)
        moment = cadence.next_after(moment)
    return times


def check_window(db: Database, name: str, start: int, end: int) -> list[int]:
    """The fire times of schedule ``name`` a backfill of ``[start, end]`` covers; refused
    (``InvalidScheduleError``, one line) when the window is empty, reaches the future or
    the schedule's next fire time, or holds more than ``MAX_BACKFILL`` fire times."""
    row = find(db.conn, name)
    if row.status is ScheduleStatus.DELETED:
        raise ScheduleNotFoundError(name)
    now = db.clock.now_ms()
    if start > end:
        raise InvalidScheduleError("from", "--from is after --to; give an earlier --from")
    if end > now:
        raise InvalidScheduleError(
            "to",
            "--to is in the future; a backfill fires past times only (fire now with"
            f" 'pi-workflows schedule trigger {row.name}')",
        )
    if row.next_fire_at is not None and end >= row.next_fire_at:
        raise InvalidScheduleError(
            "to",
            f"--to reaches the schedule's next fire time ({row.next_fire_at} ms), which the"
            " cadence fires itself; give an earlier --to",
        )
    times = window(row.cadence, start, end)
    if len(times) > MAX_BACKFILL:
        raise InvalidScheduleError(
            "from",
            f"the window holds more than {MAX_BACKFILL} fire times of {row.cadence.describe()}"
            f" (the limit); backfill a shorter window, {MAX_BACKFILL} at a time",
        )
    return times


def _take_from_missed(tx: Transaction, row: ScheduleRow, fire_at: int) -> None:
    """Take ``fire_at`` out of the ``missed`` range that covers it (if any): the range is
    shortened at either end or split in two, so the time is accounted for once."""
    found = tx.conn.execute(
        "SELECT fire_at, missed_until FROM schedule_fires WHERE schedule_id = ?"
        " AND outcome = 'missed' AND fire_at <= ? AND missed_until >= ?",
        (row.schedule_id, fire_at, fire_at),
    ).fetchone()
    if found is None:
        return
    first, until = int(found[0]), int(found[1])
    cadence = row.cadence
    before = cadence.latest_until(fire_at - 1, 1)
    after = cadence.next_after(fire_at)
    tx.conn.execute(
        "DELETE FROM schedule_fires WHERE schedule_id = ? AND fire_at = ?",
        (row.schedule_id, first),
    )
    pieces = []
    if first < fire_at and before:
        pieces.append((first, before[0]))
    if after is not None and after <= until:
        pieces.append((after, until))
    for low, high in pieces:
        count = max(1, cadence.count_due(low, high)[0])
        tx.conn.execute(
            "INSERT INTO schedule_fires (schedule_id, fire_at, outcome, detail, missed,"
            " missed_until, recorded_at, settled_at) VALUES (?, ?, 'missed', ?, ?, ?, ?, ?)",
            (
                row.schedule_id, low,
                f"{count} fire time(s) passed while no fire could be made; a backfill fired"
                f" the fire time {fire_at} of this range",
                count, high, tx.now, tx.now,
            ),
        )  # fmt: skip


def backfill(
    db: Database,
    name: str,
    times: list[int],
    *,
    new_run: NewRun | None,
    error: str | None = None,
) -> Backfill:
    """Fire schedule ``name`` once at each of ``times`` (``check_window``'s) that has no
    fire or run yet, oldest first, each by the overlap rule, in one transaction. Give
    ``new_run`` (the workflow described now), or ``error`` when it did not resolve: the
    fires that would start a run are then recorded ``failed`` with it."""
    assert (new_run is None) != (error is None), "a backfill starts its runs or says why not"
    with db.atomic("schedules.backfill") as tx:
        row = _live(tx, name)
        recorded: list[ManualFire] = []
        already: list[int] = []
        for fire_at in times:
            if _fired(tx, row.schedule_id, fire_at):
                already.append(fire_at)
                continue
            _take_from_missed(tx, row, fire_at)
            fire = _record(
                db, tx, row, fire_at, source="backfill", key=None, new_run=new_run,
                error=error, queue_limit=MAX_QUEUED + MAX_BACKFILL,
            )  # fmt: skip
            assert fire is not None  # new_run or error was given
            recorded.append(fire)
        return Backfill(recorded, already, len(times))
