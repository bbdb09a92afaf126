"""A ``fan_out(rate=...)`` join in a real state database with a fake clock: starts bounded
per window as well as by concurrency, the join's wait due when the window next allows a
start, ``waits.fire`` starting what it then allows, and the bound read from the recorded
start times (so a reopened database, like a restarted server, keeps it).

The store's own operations build every state; ``diagnose`` is the oracle after each.
"""

from __future__ import annotations

from typing import Any

import pytest

from pi_workflows.store import lifecycle, takeover
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.lifecycle import Finish
from pi_workflows.store.states import AttemptStatus, RunStatus

from support import crash_states as st
from support.store import problems, run_status

pytestmark = pytest.mark.timeout(60)

MINUTE = 60_000


def _spawn(db: Database, clock: FakeClock, items: int, rate: tuple[int, int], **kw: Any) -> str:
    ctx = st.in_node(db, clock)
    lifecycle.spawn(
        db, ctx["claim"], ctx["attempt_id"], kind="fan_out", child=st.child_workflow(),
        inputs=[{"item": i} for i in range(items)], concurrency=kw.get("concurrency", 10),
        fail_fast=False, detached=False, rate=rate,
    )  # fmt: skip
    return str(ctx["run_id"])


def _starts(db: Database) -> list[int]:
    return [
        int(row[0])
        for row in db.conn.execute(
            "SELECT started_at FROM run_children WHERE started_at IS NOT NULL ORDER BY item"
        )
    ]


def _due(db: Database) -> int | None:
    row = db.conn.execute("SELECT due_at FROM run_waits WHERE kind = 'children'").fetchone()
    return None if row[0] is None else int(row[0])


def _end_started(db: Database) -> None:
    for (run_id,) in db.conn.execute(
        "SELECT child_run_id FROM run_children WHERE status = 'started'"
    ).fetchall():
        claim = lifecycle.claim(db, run_id, f"runner-{run_id}").claim
        attempt = lifecycle.start_node(db, claim, "a").attempt
        lifecycle.finish_node(
            db, claim, attempt.attempt_id, AttemptStatus.COMPLETED,
            Finish(RunStatus.COMPLETED, {"ok": 1}), output={"ok": 1},
        )  # fmt: skip


def _window_holds(starts: list[int], count: int, period: int) -> bool:
    """No window of ``period`` ms holds more than ``count`` starts."""
    ordered = sorted(starts)
    return all(ordered[i + count] - ordered[i] >= period for i in range(len(ordered) - count))


def test_a_rate_starts_at_most_its_count_and_dues_the_join_when_the_window_allows(
    db: Database, clock: FakeClock
) -> None:
    """5 items at 2/min with room for 10: two start now, the join's wait is due a minute
    after them, firing it early starts nothing, firing it on time starts two more."""
    parent = _spawn(db, clock, 5, (2, MINUTE))
    start = clock.now_ms()
    assert _starts(db) == [start, start]
    assert _due(db) == start + MINUTE
    assert run_status(db, parent) == "waiting"
    clock.advance(MINUTE - 1)
    assert takeover.fire_due_waits(db) == []
    assert len(_starts(db)) == 2
    clock.advance(1)
    takeover.fire_due_waits(db)
    assert _starts(db) == [start, start, start + MINUTE, start + MINUTE]
    assert _due(db) == start + 2 * MINUTE
    assert run_status(db, parent) == "waiting"  # the parent waits on; children are queued
    assert problems(db) == []


def test_a_child_ending_inside_the_window_does_not_start_another(
    db: Database, clock: FakeClock
) -> None:
    """Concurrency frees a slot when a child ends, but the window still holds two starts:
    nothing starts before the due time."""
    _spawn(db, clock, 4, (2, MINUTE), concurrency=2)
    start = clock.now_ms()
    assert _due(db) is None  # the concurrency (2) is full: a child's end paces it
    clock.advance(1_000)
    _end_started(db)
    assert len(_starts(db)) == 2
    assert _due(db) == start + MINUTE
    clock.advance(MINUTE)
    takeover.fire_due_waits(db)
    assert _starts(db) == [start, start, start + MINUTE + 1_000, start + MINUTE + 1_000]
    assert problems(db) == []


def test_the_bound_is_read_from_recorded_starts_in_any_window(
    db: Database, clock: FakeClock
) -> None:
    """Firing late and often (as a restarted server would) never puts more than the rate
    in any window: the starts are what the database recorded."""
    _spawn(db, clock, 12, (3, MINUTE), concurrency=12)
    for _ in range(40):
        clock.advance(7_000)
        takeover.fire_due_waits(db)
    starts = _starts(db)
    assert len(starts) == 12
    assert _window_holds(starts, 3, MINUTE)
    assert problems(db) == []


def test_a_paused_parent_starts_nothing_and_its_resume_paces_again(
    db: Database, clock: FakeClock
) -> None:
    """A due join under a paused parent fires without starting a child and clears its due
    time (no busy loop); the resume starts what the window allows and paces again."""
    parent = _spawn(db, clock, 5, (2, MINUTE))
    lifecycle.pause(db, parent)
    clock.advance(MINUTE)
    takeover.fire_due_waits(db)
    assert len(_starts(db)) == 2
    assert _due(db) is None
    lifecycle.resume(db, parent)
    lifecycle.refill(db, parent)
    assert len(_starts(db)) == 4
    assert _due(db) == clock.now_ms() + MINUTE
    assert problems(db) == []


def test_diagnose_reports_a_rate_join_that_nothing_would_start_again(
    db: Database, clock: FakeClock
) -> None:
    """A rate-limited join with children held back, none active and no due time on its
    wait would never start the next one: ``joinStalled``."""
    parent = _spawn(db, clock, 4, (2, MINUTE))
    _end_started(db)
    assert _due(db) == clock.now_ms() + MINUTE
    assert problems(db) == []
    db.conn.execute("UPDATE run_waits SET due_at = NULL WHERE kind = 'children'")  # a bug
    assert f"joinStalled:{parent}" in problems(db)
