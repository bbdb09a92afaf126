"""Retention removes ended runs with all their rows, keeps everything else, and leaves a
state that diagnose finds clean; attempt logs keep their documented tail."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from pi_workflows.store import attempt_logs, lifecycle, retention, signals, takeover
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.effect_writes import reserve_effect
from pi_workflows.store.lifecycle import Finish, GoTo
from pi_workflows.store.states import AttemptStatus, RunStatus

from support import crash_states as st
from support.store import count, new_run, open_test_db, problems

pytestmark = pytest.mark.timeout(60)

DAY = 86_400_000
BIG = "z" * 20_000  # stored once as a blob


def _ended(db: Database, value: object = None) -> str:
    """A run that printed something and completed with `value` as its input and output."""
    claim = lifecycle.claim(db, lifecycle.reserve(db, new_run(value=value)).run_id, "r1").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt
    attempt_logs.record(db, claim, attempt.attempt_id, "hello\n", 6, None)
    output = {"v": value}
    lifecycle.finish_node(
        db,
        claim,
        attempt.attempt_id,
        AttemptStatus.COMPLETED,
        Finish(RunStatus.COMPLETED, output),
        output=output,
    )
    return claim.run_id


@pytest.fixture
def db(tmp_path: Path) -> Database:
    """A state database on a fake clock."""
    return open_test_db(tmp_path, FakeClock())


def _rows_of(db: Database, run_id: str) -> int:
    tables = ("runs", "events", "node_attempts", "attempt_logs", "viewer_runs", "run_queue",
              "leases", "run_sources")  # fmt: skip
    return sum(count(db, table, "run_id = ?", run_id) for table in tables)


def test_only_runs_that_ended_before_the_cutoff_go(db: Database) -> None:
    """An old ended run is removed whole; a newer one and a running one stay; diagnose is clean."""
    old = _ended(db, BIG)
    db.clock.advance(2 * DAY)  # type: ignore[attr-defined]
    recent = _ended(db, BIG)
    live = lifecycle.claim(db, lifecycle.reserve(db, new_run()).run_id, "r2").claim
    report = retention.prune(db, db.clock.now_ms() - DAY)
    assert (report.runs, report.attempts, report.more) == (1, 1, False)
    assert report.events == 5  # reserved, claimed, node started, its logs, completed
    assert _rows_of(db, old) == 0
    assert count(db, "pruned_runs", "run_id = ? AND status = 'completed'", old) == 1
    assert _rows_of(db, recent) > 0
    assert count(db, "runs", "run_id = ?", live.run_id) == 1
    assert count(db, "blobs", "size > 20000") == 2  # the input and output `recent` uses
    assert problems(db) == []


def test_shared_blobs_go_with_the_last_run_that_used_them(db: Database) -> None:
    """A content-addressed value is deleted only once no remaining row references it."""
    first, second = _ended(db, BIG), _ended(db, BIG)
    db.clock.advance(DAY)  # type: ignore[attr-defined]
    limited = retention.prune(db, db.clock.now_ms(), limit=1)
    assert (limited.runs, limited.blobs, limited.more) == (1, 0, True)
    rest = retention.prune(db, db.clock.now_ms())
    assert rest.runs == 1
    assert rest.blobs == 3  # the large input, the large output and the definition
    assert count(db, "blobs") == 0
    assert _rows_of(db, first) == _rows_of(db, second) == 0
    assert problems(db) == []


def test_a_run_with_an_ambiguous_effect_is_kept_however_old(db: Database) -> None:
    """A cancelled run whose effect may have been applied waits for `effect resolve`."""
    claim = lifecycle.claim(db, lifecycle.reserve(db, new_run()).run_id, "r1").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt
    reserve_effect(
        db, claim, attempt_id=attempt.attempt_id, effect_type="send", effect_kind="manual",
        fingerprint="f",
    )  # fmt: skip
    lifecycle.cancel(db, claim.run_id, claim=claim)
    assert count(db, "effects", "status = 'ambiguous'") == 1
    db.clock.advance(90 * DAY)  # type: ignore[attr-defined]
    assert retention.prune(db, db.clock.now_ms()).runs == 0
    assert count(db, "runs", "run_id = ?", claim.run_id) == 1


def test_events_stay_immutable_except_for_a_pruned_run(db: Database) -> None:
    """Deleting events of a run not recorded as pruned, or updating any event, is refused;
    a run that has not ended cannot be recorded as pruned."""
    live = lifecycle.reserve(db, new_run()).run_id
    with pytest.raises(sqlite3.IntegrityError, match="events are immutable"):
        db.conn.execute("DELETE FROM events WHERE run_id = ?", (live,))
    with pytest.raises(sqlite3.IntegrityError, match="only an ended run can be pruned"):
        db.conn.execute(
            "INSERT INTO pruned_runs VALUES (?, 'sample', 'completed', 0, 0, 1, 0)", (live,)
        )
    with pytest.raises(sqlite3.IntegrityError, match="events are immutable"):
        db.conn.execute("UPDATE events SET type = 'x' WHERE run_id = ?", (live,))


def test_attempt_logs_keep_the_newest_64_kib_and_count_every_byte(db: Database) -> None:
    """Appends beyond the bound keep the tail; the total counts what was dropped; a long
    traceback keeps its end."""
    claim = lifecycle.claim(db, lifecycle.reserve(db, new_run()).run_id, "r1").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt
    chunk = "".join(f"{i:07d}\n" for i in range(6000))  # 48,000 bytes
    for _ in range(3):
        attempt_logs.record(db, claim, attempt.attempt_id, chunk, len(chunk), None)
    trace = "Traceback (most recent call last):\n" + "  frame\n" * 2000 + "ValueError: end\n"
    attempt_logs.record(db, claim, attempt.attempt_id, "", 0, trace)
    with db.read() as conn:
        (log,) = attempt_logs.page(conn, claim.run_id)["logs"]
    assert log["totalBytes"] == 3 * len(chunk)
    assert log["keptBytes"] == attempt_logs.LOG_TAIL_BYTES
    assert log["truncated"] is True
    assert log["text"].endswith("0005999\n")
    assert len(log["traceback"]) <= attempt_logs.TRACEBACK_CHARS
    assert log["traceback"].endswith("ValueError: end\n")
    assert "earlier characters not kept" in log["traceback"]


def _finish(db: Database, claim: object, attempt_id: str, **extra: object) -> None:
    lifecycle.finish_node(
        db, claim, attempt_id, AttemptStatus.COMPLETED,  # type: ignore[arg-type]
        Finish(RunStatus.COMPLETED, {"ok": 1}), output={"ok": 1}, **extra,  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_run_that_slept_and_took_an_event_is_pruned_with_its_waits_and_events(
    db: Database,
) -> None:
    """Durable waits and events sent to a run are its rows too (a foreign key held them)."""
    claim = lifecycle.claim(db, lifecycle.reserve(db, new_run()).run_id, "r1").claim
    run_id = claim.run_id
    attempt = lifecycle.start_node(db, claim, "nap").attempt
    lifecycle.sleep(db, claim, attempt.attempt_id, delay_ms=10)
    db.clock.advance(100)  # type: ignore[attr-defined]
    takeover.fire_due_waits(db)
    claim = lifecycle.claim(db, run_id, "r2").claim
    lifecycle.finish_node(
        db, claim, attempt.attempt_id, AttemptStatus.COMPLETED, GoTo("go"), output={}
    )
    signals.send(db, run_id, "go", {"big": BIG}, idempotency_key="k", sent_by="test")
    waiting = lifecycle.start_node(db, claim, "go").attempt
    event = signals.next_pending(db.conn, run_id, "go")
    assert event is not None
    _finish(db, claim, waiting.attempt_id, signal_id=event.signal_id)
    db.clock.advance(2 * DAY)  # type: ignore[attr-defined]
    report = retention.prune(db, db.clock.now_ms() - DAY)
    assert report.runs == 1
    assert count(db, "run_waits") == count(db, "run_signals") == count(db, "runs") == 0
    assert count(db, "blobs", "size > 20000") == 0
    assert problems(db) == []


def test_a_tree_goes_whole_and_only_once_every_run_of_it_ended(db: Database) -> None:
    """A child is never pruned alone; the root goes with every run below it, and the blobs
    of a join that is still running (its waiting children's inputs) are kept."""
    parent = st.in_node(db, db.clock)  # type: ignore[arg-type]
    lifecycle.spawn(
        db, parent["claim"], parent["attempt_id"], kind="fan_out", child=st.child_workflow(),
        inputs=[{"big": BIG, "i": i} for i in range(3)], concurrency=1, fail_fast=False,
        detached=False,
    )  # fmt: skip
    (first,) = [
        row[0] for row in db.conn.execute("SELECT run_id FROM runs WHERE parent_run_id IS NOT NULL")
    ]
    claim = lifecycle.claim(db, first, "child").claim
    _finish(db, claim, lifecycle.start_node(db, claim, "a").attempt.attempt_id)
    db.clock.advance(2 * DAY)  # type: ignore[attr-defined]
    kept = retention.prune(db, db.clock.now_ms() - DAY)
    assert kept.runs == 0, "an ended child waits for its tree"
    assert count(db, "runs") == 3
    assert count(db, "blobs", "size > 20000") >= 1, "the waiting children's input stays"
    lifecycle.cancel(db, parent["run_id"])
    db.clock.advance(2 * DAY)  # type: ignore[attr-defined]
    report = retention.prune(db, db.clock.now_ms() - DAY)
    assert report.runs == 3
    assert count(db, "runs") == count(db, "run_joins") == count(db, "run_children") == 0
    assert count(db, "pruned_runs") == 3
    assert count(db, "blobs", "size > 20000") == 0
    assert problems(db) == []


def test_a_tree_with_a_live_run_below_an_ended_root_is_never_deleted(db: Database) -> None:
    """Contradictory rows (a bug, or a foreign writer): the root ended while a grandchild
    still runs, and the grandchild's ``root_run_id`` does not even name the root. Prune walks
    the parent links, keeps that tree whole (``state diagnose`` reports it) and still prunes
    the rest of its batch; no deletion of any kind removes a run that has not ended."""
    other = st.completed(db, db.clock)  # type: ignore[arg-type]
    ctx = st.in_node(db, db.clock)  # type: ignore[arg-type]
    lifecycle.spawn(
        db, ctx["claim"], ctx["attempt_id"], kind="subworkflow", child=st.child_workflow(),
        inputs=[{"i": 0}], concurrency=1, fail_fast=False, detached=False,
    )  # fmt: skip
    (mid,) = db.conn.execute(
        "SELECT run_id FROM runs WHERE parent_run_id = ?", (ctx["run_id"],)
    ).fetchone()
    mid_claim = lifecycle.claim(db, mid, "runner-mid").claim
    mid_attempt = lifecycle.start_node(db, mid_claim, "a").attempt.attempt_id
    lifecycle.spawn(
        db, mid_claim, mid_attempt, kind="subworkflow", child=st.child_workflow(),
        inputs=[{"i": 1}], concurrency=1, fail_fast=False, detached=False,
    )  # fmt: skip
    (leaf,) = db.conn.execute("SELECT run_id FROM runs WHERE parent_run_id = ?", (mid,)).fetchone()
    lifecycle.cancel(db, ctx["run_id"], claims={mid: mid_claim})  # ends the whole tree...
    with db.atomic("repair.run"):  # ...which a buggy writer then contradicts by hand
        db.conn.execute(
            "UPDATE runs SET status = 'running', finished_at = NULL, root_run_id = ?"
            " WHERE run_id = ?",
            (leaf, leaf),
        )
    assert f"liveChildOfEndedParent:{mid}" in problems(db) or any(
        p.startswith("liveChildOfEndedParent") for p in problems(db)
    )
    db.clock.advance(2 * DAY)  # type: ignore[attr-defined]
    report = retention.prune(db, db.clock.now_ms() - DAY)
    assert report.runs == 1, "only the other, consistent run goes"
    assert count(db, "runs", "run_id = ?", other["run_id"]) == 0
    assert count(db, "runs", "run_id IN (?, ?, ?)", ctx["run_id"], mid, leaf) == 3
    with pytest.raises(sqlite3.IntegrityError, match="has not ended"), db.atomic("repair.run"):
        db.conn.execute("DELETE FROM runs WHERE run_id = ?", (leaf,))
    assert count(db, "runs", "run_id = ?", leaf) == 1
