"""Schedule rows and their transactions (``store/schedules.py``) on a real database with a
fake clock: each fire time starts at most one run, overlap and catch-up do what they say,
and ``diagnose`` stays clean."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest

from pi_workflows.store import lifecycle, schedules
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.errors import (
    InvalidScheduleError,
    ScheduleNameTakenError,
    ScheduleNotFoundError,
)
from pi_workflows.store.lifecycle import Finish
from pi_workflows.store.schedules import (
    Catchup,
    FireOutcome,
    Overlap,
    ScheduleAction,
    ScheduleStatus,
)
from pi_workflows.store.states import AttemptStatus, RunStatus

from support.crash_states import schedule_draft
from support.store import new_run, problems

pytestmark = pytest.mark.timeout(60)


def _add(db: Database, *, overlap: Overlap = Overlap.SKIP, catchup: Catchup = Catchup.LATEST,
         name: str = "nightly") -> schedules.ScheduleRow:  # fmt: skip
    draft = schedule_draft(name, overlap=overlap)
    return schedules.add(db, schedules.ScheduleDraft(**{**draft.__dict__, "catchup": catchup}))


def _due_fire(db: Database, clock: FakeClock, schedule_id: str) -> schedules.FireResult:
    """What the server does when the schedule is due: catch up, then fire what is due."""
    fire_at = schedules.catch_up(db, schedule_id, clock.now_ms())
    if fire_at is None:
        return schedules.FireResult(None)
    return schedules.fire(db, schedule_id, fire_at, new_run=new_run())


def _to(clock: FakeClock, ms: int) -> None:
    clock.advance(max(0, ms - clock.now_ms()))


def _complete(db: Database, run_id: str) -> None:
    claim = lifecycle.claim(db, run_id, "runner-1").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt
    lifecycle.finish_node(
        db, claim, attempt.attempt_id, AttemptStatus.COMPLETED, Finish(RunStatus.COMPLETED, 1)
    )


def _runs_per_fire(db: Database, schedule_id: str) -> dict[int, int]:
    rows = db.conn.execute(
        "SELECT schedule_fire_at, COUNT(*) FROM runs WHERE schedule_id = ?"
        " GROUP BY schedule_fire_at",
        (schedule_id,),
    ).fetchall()
    return {int(row[0]): int(row[1]) for row in rows}


def test_a_fire_starts_one_run_with_its_provenance_and_moves_the_next_fire(
    db: Database, clock: FakeClock
) -> None:
    """The fire row, the run (carrying the schedule, the fire time and its input) and the
    next fire time commit together; the same fire again writes nothing."""
    row = _add(db)
    assert row.next_fire_at == clock.now_ms() + 1000
    _to(clock, row.next_fire_at + 5)
    fired = _due_fire(db, clock, row.schedule_id)
    assert fired.outcome is FireOutcome.STARTED
    assert fired.run_id is not None
    run = db.conn.execute(
        "SELECT schedule_id, schedule_fire_at, origin, input_json FROM runs WHERE run_id = ?",
        (fired.run_id,),
    ).fetchone()
    assert tuple(run) == (
        row.schedule_id, row.next_fire_at, f"schedule:{row.schedule_id}", '{"from":"schedule"}'
    )  # fmt: skip
    after = schedules.read(db.conn, row.schedule_id)
    assert (after.next_fire_at, after.last_fire_at) == (row.next_fire_at + 1000, row.next_fire_at)
    again = schedules.fire(db, row.schedule_id, row.next_fire_at, new_run=new_run())
    assert again == schedules.FireResult(None)
    assert _runs_per_fire(db, row.schedule_id) == {row.next_fire_at: 1}
    assert problems(db) == []


def test_the_database_refuses_a_second_run_for_one_fire_time(
    db: Database, clock: FakeClock
) -> None:
    """The unique index on the runs' provenance holds even if a fire were repeated by hand."""
    row = _add(db)
    _to(clock, row.next_fire_at)
    _due_fire(db, clock, row.schedule_id)
    twin = dataclasses.replace(
        new_run(), schedule_id=row.schedule_id, schedule_fire_at=row.next_fire_at
    )
    with pytest.raises(sqlite3.IntegrityError):
        lifecycle.reserve(db, twin)


def test_overlap_skip_records_a_skip_while_the_previous_run_is_active(
    db: Database, clock: FakeClock
) -> None:
    """A fire while the schedule's run has not ended is recorded skipped, naming the run; once
    it ended the next fire starts a run again."""
    row = _add(db)
    _to(clock, row.next_fire_at)
    first = _due_fire(db, clock, row.schedule_id)
    clock.advance(1000)
    skipped = _due_fire(db, clock, row.schedule_id)
    assert skipped.outcome is FireOutcome.SKIPPED
    assert f"the run {first.run_id} is still queued" in str(skipped.detail)
    assert first.run_id is not None
    _complete(db, first.run_id)
    clock.advance(1000)
    assert _due_fire(db, clock, row.schedule_id).outcome is FireOutcome.STARTED
    assert problems(db) == []


@pytest.mark.parametrize("overlap", [Overlap.SKIP, Overlap.QUEUE])
def test_a_restarted_older_run_counts_as_active_for_skip_and_queue(
    db: Database, clock: FakeClock, overlap: Overlap
) -> None:
    """A person restarts an older run of the schedule while the newest one runs; once the
    newest ends, the next fire still sees the restarted one: ``skip`` skips it (naming that
    run) and ``queue`` queues it, so no two runs of the schedule are ever active at once."""
    row = _add(db, overlap=overlap)
    _to(clock, row.next_fire_at)
    older = _due_fire(db, clock, row.schedule_id).run_id
    assert older is not None
    _complete(db, older)
    clock.advance(1000)
    newest = _due_fire(db, clock, row.schedule_id).run_id
    assert newest is not None
    lifecycle.restart(db, older)
    _complete(db, newest)
    clock.advance(1000)
    held = _due_fire(db, clock, row.schedule_id)
    wanted = FireOutcome.SKIPPED if overlap is Overlap.SKIP else FireOutcome.QUEUED
    assert held.outcome is wanted
    assert f"the run {older} is still queued" in str(held.detail)
    assert schedules.queue_ready(db.conn, row.schedule_id) is None
    active = db.conn.execute(
        "SELECT COUNT(*) FROM runs WHERE schedule_id = ? AND status NOT IN"
        " ('completed', 'failed', 'timed_out', 'cancelled')",
        (row.schedule_id,),
    ).fetchone()[0]
    assert active == 1
    _complete(db, older)
    if overlap is Overlap.QUEUE:
        assert schedules.queue_ready(db.conn, row.schedule_id) is not None
    assert problems(db) == []


def test_overlap_allow_starts_a_run_at_every_fire(db: Database, clock: FakeClock) -> None:
    """``allow`` starts a run at each fire whatever the previous one is doing."""
    row = _add(db, overlap=Overlap.ALLOW)
    _to(clock, row.next_fire_at)
    for _ in range(3):
        assert _due_fire(db, clock, row.schedule_id).outcome is FireOutcome.STARTED
        clock.advance(1000)
    assert sorted(_runs_per_fire(db, row.schedule_id).values()) == [1, 1, 1]


def test_overlap_queue_starts_queued_fires_in_order_and_bounds_the_queue(
    db: Database, clock: FakeClock
) -> None:
    """Fires while a run is active are queued (at most ``MAX_QUEUED``, beyond it skipped);
    each starts when the run before it ended, keeping its own fire time."""
    row = _add(db, overlap=Overlap.QUEUE)
    _to(clock, row.next_fire_at)
    first = _due_fire(db, clock, row.schedule_id)
    outcomes = []
    for _ in range(schedules.MAX_QUEUED + 2):
        clock.advance(1000)
        outcomes.append(_due_fire(db, clock, row.schedule_id).outcome)
    assert outcomes == [FireOutcome.QUEUED] * schedules.MAX_QUEUED + [FireOutcome.SKIPPED] * 2
    assert schedules.queue_ready(db.conn, row.schedule_id) is None  # the first still runs
    assert first.run_id is not None
    _complete(db, first.run_id)
    head = schedules.queue_ready(db.conn, row.schedule_id)
    assert head == row.next_fire_at + 1000
    started = schedules.start_queued(db, row.schedule_id, head, new_run=new_run())
    assert started.outcome is FireOutcome.STARTED
    assert schedules.queue_ready(db.conn, row.schedule_id) is None  # behind the new run
    assert _runs_per_fire(db, row.schedule_id) == {row.next_fire_at: 1, head: 1}
    assert problems(db) == []


@pytest.mark.parametrize(
    ("catchup", "runs", "missed"),
    [(Catchup.LATEST, 1, 9), (Catchup.ALL, 10, 0), (Catchup.NONE, 0, 10)],
)
def test_catchup_decides_what_ten_fire_times_missed_while_down_start(
    db: Database, clock: FakeClock, catchup: Catchup, runs: int, missed: int
) -> None:
    """Ten fire times passed while no server ran (a server starts at ``now``): ``latest``
    starts one run, for the newest time; ``all`` one per time; ``none`` none, and fires
    next at the next future time. The dropped times are one ``missed`` row."""
    row = _add(db, overlap=Overlap.ALLOW, catchup=catchup)
    first = row.next_fire_at
    assert first is not None
    _to(clock, first + 9_500)
    started_at = clock.now_ms()
    started = []
    for _ in range(20):
        fire_at = schedules.catch_up(db, row.schedule_id, clock.now_ms(), down_until=started_at)
        if fire_at is None:
            break
        fired = schedules.fire(db, row.schedule_id, fire_at, new_run=new_run())
        started.append(fire_at)
        assert fired.outcome is FireOutcome.STARTED
    per_fire = _runs_per_fire(db, row.schedule_id)
    assert list(per_fire) == started
    assert set(per_fire.values()) <= {1}
    assert len(started) == runs
    if runs:
        assert started[-1] == first + 9_000  # the newest missed time is among them
    missed_rows = db.conn.execute("SELECT missed FROM schedule_fires WHERE outcome = 'missed'")
    assert sum(r[0] for r in missed_rows) == missed
    after = schedules.read(db.conn, row.schedule_id)
    assert after.next_fire_at == first + 10_000  # the first time after now
    assert problems(db) == []


def test_catchup_none_while_serving_drops_only_what_is_over_a_minute_late(
    db: Database, clock: FakeClock
) -> None:
    """Without downtime a due time is fired while it is at most ``LATE_GRACE_MS`` late; a
    daily time found two minutes late (a suspended machine) is dropped."""
    draft = schedules.ScheduleDraft(
        **{**schedule_draft("daily").__dict__, "every_ms": 86_400_000, "catchup": Catchup.NONE}
    )
    row = schedules.add(db, draft)
    assert row.next_fire_at is not None
    _to(clock, row.next_fire_at + 30_000)
    assert schedules.catch_up(db, row.schedule_id, clock.now_ms()) == row.next_fire_at
    clock.advance(90_000)
    assert schedules.catch_up(db, row.schedule_id, clock.now_ms()) is None
    after = schedules.read(db.conn, row.schedule_id)
    assert after.next_fire_at == row.next_fire_at + 86_400_000
    assert problems(db) == []


def test_catchup_all_fires_at_most_the_newest_hundred(db: Database, clock: FakeClock) -> None:
    """After 250 missed times ``all`` fires the newest ``MAX_CATCHUP`` and records the rest
    as missed."""
    row = _add(db, overlap=Overlap.ALLOW, catchup=Catchup.ALL)
    assert row.next_fire_at is not None
    _to(clock, row.next_fire_at + 249_000)
    while _due_fire(db, clock, row.schedule_id).outcome is not None:
        pass
    assert len(_runs_per_fire(db, row.schedule_id)) == schedules.MAX_CATCHUP
    [(missed,)] = db.conn.execute("SELECT missed FROM schedule_fires WHERE outcome = 'missed'")
    assert missed == 250 - schedules.MAX_CATCHUP


def test_a_fire_that_cannot_resolve_is_recorded_failed_and_the_schedule_goes_on(
    db: Database, clock: FakeClock
) -> None:
    """The fire row keeps the one-line error; the next fire time comes as usual."""
    row = _add(db)
    _to(clock, row.next_fire_at)
    failed = schedules.fire(
        db, row.schedule_id, row.next_fire_at, new_run=None, error="workflowNotFound: gone"
    )
    assert (failed.outcome, failed.detail) == (FireOutcome.FAILED, "workflowNotFound: gone")
    assert schedules.read(db.conn, row.schedule_id).next_fire_at == row.next_fire_at + 1000
    assert schedules.fire(db, row.schedule_id, row.next_fire_at + 1000, new_run=None).needs_run


def test_pause_resume_and_delete_follow_the_transition_table(
    db: Database, clock: FakeClock
) -> None:
    """A paused schedule is not due; resume fires next after now (no catch-up); delete frees
    the name, settles queued fires as skipped and keeps the runs' provenance."""
    row = _add(db, overlap=Overlap.QUEUE)
    _to(clock, row.next_fire_at)
    first = _due_fire(db, clock, row.schedule_id)
    clock.advance(1000)
    assert _due_fire(db, clock, row.schedule_id).outcome is FireOutcome.QUEUED
    paused = schedules.change(db, "nightly", ScheduleAction.PAUSE)
    assert (paused.status, paused.next_fire_at) == (ScheduleStatus.PAUSED, None)
    assert schedules.change(db, "nightly", ScheduleAction.PAUSE) == paused  # no change
    clock.advance(30_000)
    assert schedules.due(db.conn, clock.now_ms(), 10) == []
    resumed = schedules.change(db, "nightly", ScheduleAction.RESUME)
    assert resumed.next_fire_at is not None
    assert 0 < resumed.next_fire_at - clock.now_ms() <= 1000
    deleted = schedules.change(db, "nightly", ScheduleAction.DELETE)
    assert deleted.status is ScheduleStatus.DELETED
    outcomes = db.conn.execute("SELECT outcome FROM schedule_fires ORDER BY fire_at").fetchall()
    assert [o[0] for o in outcomes] == ["started", "skipped"]
    with pytest.raises(ScheduleNotFoundError):
        schedules.change(db, "nightly", ScheduleAction.RESUME)
    again = _add(db)  # the name is free
    assert again.schedule_id != row.schedule_id
    assert first.run_id is not None
    shown = schedules.provenance(db.conn, [first.run_id])[first.run_id]
    assert shown == {"scheduleId": row.schedule_id, "name": "nightly", "fireAt": row.next_fire_at}
    assert set(schedules.ids_named(db.conn, "nightly")) == {row.schedule_id, again.schedule_id}
    assert problems(db) == []


def test_a_taken_name_or_an_oversized_input_stores_nothing(db: Database) -> None:
    """``add`` refuses a live name and an input over ``MAX_INPUT_BYTES``; no row is added."""
    _add(db)
    with pytest.raises(ScheduleNameTakenError):
        _add(db)
    big = schedules.ScheduleDraft(
        **{**schedule_draft("big").__dict__, "input": {"x": "y" * schedules.MAX_INPUT_BYTES}}
    )
    with pytest.raises(InvalidScheduleError, match="at most 65536"):
        schedules.add(db, big)
    assert db.conn.execute("SELECT COUNT(*) FROM schedules").fetchone()[0] == 1


def test_only_the_newest_fires_are_kept(
    db: Database, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schedule keeps its newest ``FIRE_HISTORY`` settled fire rows; older ones go with the
    fire that pushes them out (the fire times are past ``next_fire_at`` either way)."""
    monkeypatch.setattr(schedules, "FIRE_HISTORY", 5)
    row = _add(db, overlap=Overlap.ALLOW)
    _to(clock, row.next_fire_at)
    for _ in range(8):
        _due_fire(db, clock, row.schedule_id)
        clock.advance(1000)
    kept = db.conn.execute("SELECT fire_at FROM schedule_fires ORDER BY fire_at").fetchall()
    assert [k[0] for k in kept] == [row.next_fire_at + 1000 * i for i in range(3, 8)]
    assert len(_runs_per_fire(db, row.schedule_id)) == 8
    assert problems(db) == []


@pytest.mark.parametrize("action", [ScheduleAction.DELETE, ScheduleAction.PAUSE])
def test_fire_times_due_but_not_fired_when_a_schedule_stops_are_recorded_missed(
    db: Database, clock: FakeClock, action: ScheduleAction
) -> None:
    """The first fire was made; then the server could not fire (frozen) while three more came
    due, and the schedule is deleted (or paused) before it could: those three are one
    ``missed`` row saying why, so every fire time before it stopped is accounted for."""
    row = _add(db, catchup=Catchup.ALL)
    first = row.next_fire_at
    assert first is not None
    _to(clock, first)
    assert _due_fire(db, clock, row.schedule_id).outcome is FireOutcome.STARTED
    _to(clock, first + 3500)
    schedules.change(db, "nightly", action)
    missed = db.conn.execute(
        "SELECT fire_at, missed, missed_until, detail FROM schedule_fires"
        " WHERE schedule_id = ? AND outcome = 'missed'",
        (row.schedule_id,),
    ).fetchall()
    how = "deleted" if action is ScheduleAction.DELETE else "paused"
    assert [tuple(m) for m in missed] == [
        (first + 1000, 3, first + 3000,
         f"3 fire time(s) were due but not fired yet when the schedule was {how}"),
    ]  # fmt: skip
    assert problems(db) == []
