"""Events one run sends another (``ctx.signal``, ``store/sent_signals.py``): the event and
the sender's settled effect commit together, a send again adopts instead of sending twice,
a refused send is settled rejected and stays so, and a stale runner sends nothing."""

from __future__ import annotations

import pytest

from pi_workflows.store import lifecycle, sent_signals, signals
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.effects import EffectStatus
from pi_workflows.store.errors import ClaimLostError, EffectConflictError, InvalidTransitionError
from pi_workflows.store.runs import read_run
from pi_workflows.store.states import RunStatus

from support import crash_states as st
from support.store import count, problems, snapshot

pytestmark = pytest.mark.timeout(60)


def test_a_sent_event_wakes_its_target_once_and_a_second_send_adopts_it(
    db: Database, clock: FakeClock
) -> None:
    """The target waiting for ``go`` is queued with the event; the sender's effect is
    applied with the event's id; the same send again (a runner killed after the commit)
    adopts that outcome and stores no second event; other data under the same key is a
    conflict."""
    ctx = st.in_node_and_target(db, clock)
    sent = sent_signals.send(db, ctx["claim"], ctx["attempt_id"], ctx["target"], "go", 1, "k")
    assert (sent.status, sent.adopted, sent.seq) == (EffectStatus.APPLIED, False, 1)
    assert read_run(db.conn, ctx["target"]).status is RunStatus.QUEUED
    again = sent_signals.send(db, ctx["claim"], ctx["attempt_id"], ctx["target"], "go", 1, "k")
    assert (again.status, again.adopted, again.signal_id) == (
        EffectStatus.APPLIED,
        True,
        sent.signal_id,
    )
    assert count(db, "run_signals", "run_id = ?", ctx["target"]) == 1
    with db.read() as conn:
        stored = signals.read_signal(conn, str(sent.signal_id))
    assert stored is not None
    assert stored.sent_by == f"run:{ctx['run_id']}"
    with pytest.raises(EffectConflictError):
        sent_signals.send(db, ctx["claim"], ctx["attempt_id"], ctx["target"], "go", 2, "k")
    assert problems(db) == []


def test_a_send_to_an_ended_run_is_settled_rejected_and_stays_so(
    db: Database, clock: FakeClock
) -> None:
    """The target was cancelled: the send stores no event and settles the effect
    ``rejected`` with the one-line reason; sending again returns the same refusal."""
    ctx = st.in_node_and_target(db, clock)
    lifecycle.cancel(db, ctx["target"], reason="done with it")
    sent = sent_signals.send(db, ctx["claim"], ctx["attempt_id"], ctx["target"], "go", 1, "k")
    assert sent.status is EffectStatus.REJECTED
    assert "a run that has ended takes no events" in (sent.error or "")
    again = sent_signals.send(db, ctx["claim"], ctx["attempt_id"], ctx["target"], "go", 1, "k")
    assert (again.status, again.adopted, again.error) == (EffectStatus.REJECTED, True, sent.error)
    missing = sent_signals.send(db, ctx["claim"], ctx["attempt_id"], "run_nope", "go", 1, "m")
    assert missing.status is EffectStatus.REJECTED
    assert count(db, "run_signals", "run_id = ?", ctx["target"]) == 0


def test_a_stale_runner_or_a_run_signalling_itself_sends_nothing(
    db: Database, clock: FakeClock
) -> None:
    """After the claim expired the send is ``ClaimLostError``; a run naming itself is
    refused; nothing is written either way."""
    ctx = st.in_node_and_target(db, clock)
    rows = snapshot(db)
    with pytest.raises(InvalidTransitionError, match="a run cannot signal itself"):
        sent_signals.send(db, ctx["claim"], ctx["attempt_id"], ctx["run_id"], "go", 1, "k")
    clock.advance(db.lease_ms + 1)
    with pytest.raises(ClaimLostError):
        sent_signals.send(db, ctx["claim"], ctx["attempt_id"], ctx["target"], "go", 1, "k")
    assert snapshot(db) == rows
