"""An event and its wait's timeout in the same millisecond: exactly one wins, whichever
commits first, and the loser leaves no trace of winning. The timeout first: the wait
fired, the run's next proposal hears ``timed_out``, and the event is kept (pending) for a
later wait of its name. The event first: the wait ended ``signalled``, the timeout finds
nothing to fire, and the run's next proposal gets the event to validate and consume."""

from __future__ import annotations

import pytest

from pi_workflows.store import lifecycle, signals, takeover
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database

from support.store import problems, running

pytestmark = pytest.mark.timeout(60)

TIMEOUT_MS = 1_000


def _waiting(db: Database, clock: FakeClock) -> tuple[str, str]:
    claim = running(db)
    attempt = lifecycle.start_node(db, claim, "a").attempt
    waited = lifecycle.await_event(
        db, claim, attempt.attempt_id, "go", timeout_ms=TIMEOUT_MS, validates=False
    )
    assert waited.waited
    clock.advance(TIMEOUT_MS)  # the due millisecond itself
    return claim.run_id, attempt.attempt_id


def _ask_again(db: Database, run_id: str, attempt_id: str) -> lifecycle.Awaited:
    claim = lifecycle.claim(db, run_id, "runner-2").claim
    return lifecycle.await_event(
        db, claim, attempt_id, "go", timeout_ms=TIMEOUT_MS, validates=False
    )


def _wait_status(db: Database, run_id: str) -> list[str]:
    rows = db.conn.execute("SELECT status FROM run_waits WHERE run_id = ?", (run_id,))
    return [str(row[0]) for row in rows]


def test_the_timeout_first_times_out_and_keeps_the_event(db: Database, clock: FakeClock) -> None:
    run_id, attempt_id = _waiting(db, clock)
    assert takeover.fire_due_waits(db) == [run_id]
    sent = signals.send(db, run_id, "go", {"n": 1}, idempotency_key=None, sent_by=None)
    assert not sent.woke
    assert _wait_status(db, run_id) == ["fired"]
    answer = _ask_again(db, run_id, attempt_id)
    assert answer.timed_out
    assert answer.signal is None
    kept = signals.read_signal(db.conn, sent.signal.signal_id)
    assert kept is not None
    assert kept.status == "pending"
    assert problems(db, timed=False) == []


def test_the_event_first_wins_and_the_timeout_fires_nothing(db: Database, clock: FakeClock) -> None:
    run_id, attempt_id = _waiting(db, clock)
    sent = signals.send(db, run_id, "go", {"n": 1}, idempotency_key=None, sent_by=None)
    assert sent.woke
    assert takeover.fire_due_waits(db) == []
    assert _wait_status(db, run_id) == ["signalled"]
    answer = _ask_again(db, run_id, attempt_id)
    assert not answer.timed_out
    assert answer.signal is not None
    assert answer.signal.signal_id == sent.signal.signal_id
    assert problems(db, timed=False) == []
