"""A person's fires of a schedule (``store/schedule_manual.py``) on a real database with a
fake clock: a trigger fires once now (a key adopts), a backfill fires each past fire time
of its window once (twice starts nothing new), both by the overlap rule, every fire time
stays accounted for once, and ``diagnose`` stays clean."""

from __future__ import annotations

import pytest

from pi_workflows.store import schedule_manual, schedules
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.errors import InvalidScheduleError, ScheduleNotFoundError
from pi_workflows.store.schedules import FireOutcome, Overlap, ScheduleAction

from support.crash_states import schedule_added
from support.store import count, new_run, problems, snapshot

pytestmark = pytest.mark.timeout(60)


def _sources(db: Database, schedule_id: str) -> list[tuple[int, str, str]]:
    return [
        (int(r[0]), str(r[1]), str(r[2]))
        for r in db.conn.execute(
            "SELECT fire_at, outcome, source FROM schedule_fires WHERE schedule_id = ?"
            " ORDER BY fire_at",
            (schedule_id,),
        )
    ]


def test_a_trigger_fires_once_now_and_its_key_adopts_it(db: Database, clock: FakeClock) -> None:
    """An ``allow`` schedule triggered twice with one key starts one run, at the moment of
    the first trigger, with that fire time as its provenance; a trigger without a key starts
    another; the cadence's next fire time does not move."""
    ctx = schedule_added(db, clock, overlap=Overlap.ALLOW)
    before = schedules.read(db.conn, ctx["schedule_id"]).next_fire_at
    first = schedule_manual.trigger(db, ctx["name"], key="k-1", new_run=new_run())
    assert (first.outcome, first.fire_at, first.adopted) == (
        FireOutcome.STARTED,
        clock.now_ms(),
        False,
    )
    clock.advance(5)
    again = schedule_manual.trigger(db, ctx["name"], key="k-1", new_run=new_run())
    assert (again.run_id, again.fire_at, again.adopted) == (first.run_id, first.fire_at, True)
    other = schedule_manual.trigger(db, ctx["name"], key=None, new_run=new_run())
    assert other.run_id not in (None, first.run_id)
    run = db.conn.execute(
        "SELECT schedule_id, schedule_fire_at FROM runs WHERE run_id = ?", (first.run_id,)
    ).fetchone()
    assert tuple(run) == (ctx["schedule_id"], first.fire_at)
    assert schedules.read(db.conn, ctx["schedule_id"]).next_fire_at == before
    assert [s for _, _, s in _sources(db, ctx["schedule_id"])] == ["trigger", "trigger"]
    assert problems(db) == []


def test_a_trigger_follows_the_overlap_rule(db: Database, clock: FakeClock) -> None:
    """``skip``: the second trigger while the first run is active is recorded skipped,
    naming that run; ``queue``: it is queued behind it; a failed description is a failed
    fire; a deleted schedule is not found."""
    skip = schedule_added(db, clock, overlap=Overlap.SKIP, name="skipper")
    started = schedule_manual.trigger(db, "skipper", key=None, new_run=new_run())
    clock.advance(1)
    skipped = schedule_manual.trigger(db, "skipper", key=None, new_run=new_run())
    assert skipped.outcome is FireOutcome.SKIPPED
    assert f"the run {started.run_id} is still queued" in (skipped.detail or "")
    schedule_added(db, clock, overlap=Overlap.QUEUE, name="queuer")
    schedule_manual.trigger(db, "queuer", key=None, new_run=new_run())
    clock.advance(1)
    queued = schedule_manual.trigger(db, "queuer", key=None, new_run=new_run())
    assert queued.outcome is FireOutcome.QUEUED
    schedule_added(db, clock, overlap=Overlap.ALLOW, name="broken")
    failed = schedule_manual.trigger(db, "broken", key=None, new_run=None, error="gone: no file")
    assert (failed.outcome, failed.detail, failed.run_id) == (
        FireOutcome.FAILED,
        "gone: no file",
        None,
    )
    schedules.change(db, "broken", ScheduleAction.DELETE)
    with pytest.raises(ScheduleNotFoundError):
        schedule_manual.trigger(db, "broken", key=None, new_run=new_run())
    assert count(db, "runs", "schedule_id = ?", skip["schedule_id"]) == 1
    assert problems(db) == []


def test_a_backfill_fires_each_past_time_once_and_twice_starts_nothing(
    db: Database, clock: FakeClock
) -> None:
    """A paused ``allow`` schedule, 10 s later: a backfill of 5 past fire times starts 5
    runs, each carrying its own fire time; the same backfill again records nothing and
    names the 5 times as fired before."""
    ctx = schedule_added(db, clock, overlap=Overlap.ALLOW)
    schedules.change(db, ctx["name"], ScheduleAction.PAUSE)
    first = ctx["fire_at"]
    clock.advance(first - clock.now_ms() + 10_000)
    times = schedule_manual.check_window(db, ctx["name"], first, first + 4_000)
    assert times == [first + n * 1000 for n in range(5)]
    done = schedule_manual.backfill(db, ctx["name"], times, new_run=new_run())
    assert [f.outcome for f in done.fires] == [FireOutcome.STARTED] * 5
    assert [f.fire_at for f in done.fires] == times
    carried = sorted(
        r[0] for r in db.conn.execute(
            "SELECT schedule_fire_at FROM runs WHERE schedule_id = ?", (ctx["schedule_id"],)
        )
    )  # fmt: skip
    assert carried == times
    rows = snapshot(db)
    again = schedule_manual.backfill(db, ctx["name"], times, new_run=new_run())
    assert (again.fires, again.already, again.total) == ([], times, 5)
    assert snapshot(db) == rows
    assert problems(db) == []


def test_a_backfill_under_skip_starts_the_first_and_skips_the_rest(
    db: Database, clock: FakeClock
) -> None:
    """``skip``: the oldest time starts a run, the others are recorded skipped (no two runs
    of the schedule at once), and a second backfill does not fire them again."""
    ctx = schedule_added(db, clock, overlap=Overlap.SKIP)
    schedules.change(db, ctx["name"], ScheduleAction.PAUSE)
    first = ctx["fire_at"]
    clock.advance(first - clock.now_ms() + 10_000)
    times = schedule_manual.check_window(db, ctx["name"], first, first + 2_000)
    done = schedule_manual.backfill(db, ctx["name"], times, new_run=new_run())
    assert [f.outcome for f in done.fires] == [
        FireOutcome.STARTED, FireOutcome.SKIPPED, FireOutcome.SKIPPED
    ]  # fmt: skip
    assert schedule_manual.backfill(db, ctx["name"], times, new_run=new_run()).fires == []


def test_a_backfill_takes_its_times_out_of_a_missed_range(db: Database, clock: FakeClock) -> None:
    """Ten fire times missed while no server ran (one ``missed`` row): backfilling the
    middle one splits the range in two around it, so each time is accounted once."""
    ctx = schedule_added(db, clock, overlap=Overlap.ALLOW)
    first = ctx["fire_at"]
    clock.advance(first - clock.now_ms() + 9_500)
    fire_at = schedules.catch_up(db, ctx["schedule_id"], clock.now_ms())
    assert fire_at == first + 9_000
    schedules.fire(db, ctx["schedule_id"], fire_at, new_run=new_run())
    middle = first + 4_000
    times = schedule_manual.check_window(db, ctx["name"], middle, middle)
    schedule_manual.backfill(db, ctx["name"], times, new_run=new_run())
    missed = db.conn.execute(
        "SELECT fire_at, missed_until, missed FROM schedule_fires WHERE schedule_id = ?"
        " AND outcome = 'missed' ORDER BY fire_at",
        (ctx["schedule_id"],),
    ).fetchall()
    assert [tuple(r) for r in missed] == [
        (first, first + 3_000, 4), (first + 5_000, first + 8_000, 4)
    ]  # fmt: skip
    assert (middle, "started", "backfill") in _sources(db, ctx["schedule_id"])
    assert problems(db) == []


def test_a_bad_window_is_refused_with_one_line_and_nothing_changes(
    db: Database, clock: FakeClock
) -> None:
    """A window in the future, one reaching the schedule's next fire time, one the wrong
    way round and one with more than ``MAX_BACKFILL`` fire times are each refused."""
    ctx = schedule_added(db, clock, overlap=Overlap.ALLOW)
    clock.advance(300_000)  # the schedule is due: its next fire time is in the past
    now = clock.now_ms()
    rows = snapshot(db)
    cases = [
        (now - 10, now + 10, "--to is in the future"),
        (ctx["fire_at"], now, "reaches the schedule's next fire time"),
        (now - 10, now - 20, "--from is after --to"),
        (ctx["fire_at"] - 200_000, ctx["fire_at"] - 1, "more than 100 fire times"),
    ]
    for start, end, why in cases:
        with pytest.raises(InvalidScheduleError, match=why) as refused:
            schedule_manual.check_window(db, ctx["name"], start, end)
        assert "\n" not in str(refused.value)
    assert snapshot(db) == rows
