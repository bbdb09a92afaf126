"""The delivery rule in a real state database: a pending step is always inside a live turn
of a live seat, or due to be presented again.

Seats attach, report turns and their branches through ``store.sessions`` as the extension
(or a headless agent's extension) does; ``store.delivery`` says where each step stands, and
``diagnose`` is clean after each.
"""

from __future__ import annotations

from typing import Any

import pytest

from pi_workflows.store import (
    agents,
    delivery,
    interaction_writes,
    interactions,
    lifecycle,
    sessions,
)
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database

from support import crash_states as st
from support.store import problems, run_status

pytestmark = pytest.mark.timeout(60)

S = st.SESSION
RETRY = sessions.TurnRetry(retries=2, backoff_ms=1_000)


def _step(db: Database, clock: FakeClock, kind: str = "agent") -> dict[str, Any]:
    """A run of ``S`` waiting on a ``kind`` step, presented to seat ``A`` and being worked
    on by a turn of it."""
    ctx = st.waiting(db, clock, kind=kind, session=S)
    ctx["epoch"] = sessions.attach(db, S, "seat-A").coordinator_epoch
    ctx["message_id"] = _latest(db, ctx)
    sessions.report_turn(db, S, ctx["epoch"], event="started", stop_reason=None,
                         workflow_message_id=ctx["message_id"])  # fmt: skip
    sessions.report_messages(db, S, ctx["epoch"], [(ctx["message_id"], "e1")], idle=False)
    return ctx


def _latest(db: Database, ctx: dict[str, Any]) -> str:
    row = db.conn.execute(
        "SELECT message_id FROM workflow_messages WHERE request_id = ?"
        " AND status IN ('pending', 'sent') ORDER BY created_at DESC, rowid DESC LIMIT 1",
        (ctx["request_id"],),
    ).fetchone()
    return str(row[0])


def _state(db: Database, ctx: dict[str, Any]) -> str | None:
    found = delivery.of_request(db.conn, ctx["request_id"])
    return None if found is None else found.state


def _messages(db: Database, ctx: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(status, reason presented again) of the step's messages, oldest first."""
    rows = db.conn.execute(
        "SELECT status, json_extract(body_json, '$.again') FROM workflow_messages"
        " WHERE request_id = ? ORDER BY created_at, rowid",
        (ctx["request_id"],),
    ).fetchall()
    return [(row[0], row[1]) for row in rows]


def _end(db: Database, epoch: int, reason: str, error: str | None = None) -> dict[str, Any]:
    return sessions.report_turn(
        db, S, epoch, event="ended", stop_reason=reason, workflow_message_id=None,
        error_message=error, retry=RETRY,
    )  # fmt: skip


def test_a_step_whose_turn_died_with_its_seat_is_presented_again_once_at_the_next_attach(
    db: Database, clock: FakeClock
) -> None:
    """Pi killed mid-turn: the step is in the old branch, but that is no presentation. The
    next seat's attach ends the dead turn ``lost`` and presents the step again, once."""
    ctx = _step(db, clock)
    assert _state(db, ctx) == "working"
    attached = sessions.attach(db, S, "seat-B")
    assert len(attached.presented_again) == 1
    assert _messages(db, ctx) == [("sent", None), ("pending", delivery.TURN_LOST)]
    turn = db.conn.execute("SELECT status, stop_reason FROM workflow_turns").fetchone()
    assert tuple(turn) == ("ended", "lost")
    assert (
        db.conn.execute(
            "SELECT turns_lost FROM interactive_requests WHERE request_id = ?", (ctx["request_id"],)
        ).fetchone()[0]
        == 1
    )
    assert _state(db, ctx) == "presenting"
    epoch = attached.coordinator_epoch
    assert (
        sessions.report_messages(db, S, epoch, [(ctx["message_id"], "e1")], idle=True)["resumed"]
        == []
    ), "the new seat's idle report presents nothing twice"
    assert len(_messages(db, ctx)) == 2
    again = _latest(db, ctx)
    sessions.report_turn(db, S, epoch, event="started", stop_reason=None,
                         workflow_message_id=again)  # fmt: skip
    sessions.report_messages(db, S, epoch, [(again, "e9")], idle=False)
    assert _state(db, ctx) == "working"
    assert problems(db) == []


def test_the_same_seat_reattaching_after_a_server_restart_keeps_its_turn(
    db: Database, clock: FakeClock
) -> None:
    """The server restarted under a live Pi: its coordinator attaches again as the same
    seat, its turn goes on, and nothing is presented again."""
    ctx = _step(db, clock)
    attached = sessions.attach(db, S, "seat-A")
    assert attached.presented_again == ()
    assert _state(db, ctx) == "working"
    sessions.report_messages(db, S, attached.coordinator_epoch, [(ctx["message_id"], "e1")],
                             idle=False)  # fmt: skip
    assert _messages(db, ctx) == [("sent", None)]
    assert problems(db) == []


def test_an_idle_seat_whose_turn_report_never_came_has_the_step_presented_again(
    db: Database, clock: FakeClock
) -> None:
    """The seat says it is idle (after every turn report it made) while its turn is still
    open: that turn ended unreported, and the step is presented again."""
    ctx = _step(db, clock)
    answer = sessions.report_messages(db, S, ctx["epoch"], [(ctx["message_id"], "e1")], idle=True)
    assert len(answer["resumed"]) == 1
    assert _messages(db, ctx) == [("sent", None), ("pending", delivery.TURN_LOST)]
    assert problems(db) == []


def test_a_step_delivered_to_an_earlier_seat_without_a_turn_is_presented_to_the_next(
    db: Database, clock: FakeClock
) -> None:
    """A delivery is to one seat: one that never worked on the step and is gone leaves it
    to the next seat, which gets it presented again."""
    ctx = st.waiting(db, clock, kind="checkpoint", session=S)
    epoch = sessions.attach(db, S, "seat-A").coordinator_epoch
    message = _latest(db, ctx)
    sessions.report_messages(db, S, epoch, [(message, "e1")], idle=False)
    assert _state(db, ctx) == "stalled"
    assert sessions.attach(db, S, "seat-A").presented_again == (), "the same seat waits"
    assert len(sessions.attach(db, S, "seat-B").presented_again) == 1
    assert _messages(db, ctx)[-1] == ("pending", delivery.NOT_WORKED)
    assert problems(db) == []


def test_turns_that_end_normally_are_never_presented_again_by_the_rule(
    db: Database, clock: FakeClock
) -> None:
    """A completed turn of an agent step earns a reminder (not a presentation again); a
    completed turn of a checkpoint leaves it waiting for its answer, also when the seat
    reports itself idle or a new seat attaches."""
    agent = _step(db, clock, "agent")
    assert _end(db, agent["epoch"], "completed")["reminder"] == "reminded"
    assert [again for _, again in _messages(db, agent)] == [None, None]
    checkpoint = _step(db, FakeClock(), "checkpoint")
    _end(db, checkpoint["epoch"], "completed")
    assert _state(db, checkpoint) == "waitingForAnswer"
    sessions.report_messages(db, S, checkpoint["epoch"], [], idle=True)
    assert sessions.attach(db, S, "seat-C").presented_again == ()
    assert _messages(db, checkpoint) == [("sent", None)]
    assert problems(db) == []


def test_a_provider_error_presents_the_step_again_with_backoff_then_pauses_the_run(
    db: Database, clock: FakeClock
) -> None:
    """Each failed turn makes a presentation again due, a backoff later (doubling); the
    timer fires it; after the last retry the run pauses ``agentUnavailable`` with the
    provider's words, and a resume starts the count over."""
    ctx = _step(db, clock)
    first = _end(db, ctx["epoch"], "error", "500: upstream failed")
    assert (first["retry"]["retry"], first["retry"]["of"]) == (1, 2)
    assert first["retry"]["retryAt"] == clock.now_ms() + 1_000
    assert _state(db, ctx) == "presentDue"
    assert delivery.next_due(db.conn) == clock.now_ms() + 1_000
    assert delivery.fire_due(db) == [], "not before its time"
    clock.advance(1_000)
    assert delivery.fire_due(db) == [ctx["run_id"]]
    assert _messages(db, ctx)[-1] == ("pending", delivery.PROVIDER_ERROR)
    assert delivery.next_due(db.conn) is None
    again = _latest(db, ctx)
    sessions.report_turn(db, S, ctx["epoch"], event="started", stop_reason=None,
                         workflow_message_id=again)  # fmt: skip
    second = _end(db, ctx["epoch"], "error", "500: upstream failed")
    assert second["retry"]["retryAt"] == clock.now_ms() + 2_000
    clock.advance(2_000)
    delivery.fire_due(db)
    sessions.report_turn(db, S, ctx["epoch"], event="started", stop_reason=None,
                         workflow_message_id=_latest(db, ctx))  # fmt: skip
    third = _end(db, ctx["epoch"], "error", "500: upstream failed")
    assert third["paused"] == ctx["run_id"]
    assert "500: upstream failed" in third["detail"]
    assert "3 turns in a row" in third["detail"]
    row = db.conn.execute(
        "SELECT status, park_reason, park_detail FROM runs WHERE run_id = ?", (ctx["run_id"],)
    ).fetchone()
    assert tuple(row[:2]) == ("paused", "agentUnavailable")
    assert "500: upstream failed" in row[2]
    assert problems(db) == []
    lifecycle.resume(db, ctx["run_id"])
    assert tuple(
        db.conn.execute(
            "SELECT turn_errors, present_at FROM interactive_requests WHERE request_id = ?",
            (ctx["request_id"],),
        ).fetchone()
    ) == (0, None)
    assert _state(db, ctx) == "presenting"
    assert problems(db) == []


def test_a_missing_model_pauses_at_once_because_no_retry_can_mend_it(
    db: Database, clock: FakeClock
) -> None:
    ctx = _step(db, clock)
    failed = _end(db, ctx["epoch"], "error", "no model is configured: add a provider")
    assert failed["paused"] == ctx["run_id"]
    assert failed["retry"] is None
    assert run_status(db, ctx["run_id"]) == "paused"
    assert problems(db) == []


def test_a_due_presentation_of_a_paused_run_is_dropped_and_resume_presents_it(
    db: Database, clock: FakeClock
) -> None:
    ctx = _step(db, clock)
    _end(db, ctx["epoch"], "error", "500")
    lifecycle.pause(db, ctx["run_id"])
    clock.advance(5_000)
    assert delivery.fire_due(db) == []
    assert delivery.next_due(db.conn) is None
    lifecycle.resume(db, ctx["run_id"])
    assert _messages(db, ctx)[-1][0] == "pending"
    assert problems(db) == []


def test_where_a_step_stands_as_its_seat_comes_and_goes(db: Database, clock: FakeClock) -> None:
    """``of_request``: working while the seat is connected; its seat gone after the
    connection closed; presenting once a new seat's attach presented it again; a decision
    and a paused run's step are no seat's business."""
    ctx = _step(db, clock)
    assert _state(db, ctx) == "working"
    sessions.disconnected(db, S, ctx["epoch"])
    assert _state(db, ctx) == "seatGone"
    sessions.attach(db, S, "seat-B")
    assert _state(db, ctx) == "presenting"
    lifecycle.pause(db, ctx["run_id"])
    assert _state(db, ctx) is None
    decision = st.deciding(db, FakeClock())
    assert delivery.of_request(db.conn, decision["request_id"]) is None
    assert problems(db) == []


def test_a_headless_agent_that_works_on_no_turn_is_found_and_nudged(
    db: Database, clock: FakeClock
) -> None:
    """``agent_stall`` names a step no turn works on since the agent started; a nudge
    presents it again; a turn that starts on it starts the count over."""
    ctx = _step(db, clock)
    assert delivery.agent_stall(db.conn, ctx["run_id"], 0) is None, "a turn works on it"
    _end(db, ctx["epoch"], "lost")
    stall = delivery.agent_stall(db.conn, ctx["run_id"], clock.now_ms() + 5)
    assert stall is not None
    assert (stall.state, stall.since, stall.nudges) == ("stalled", clock.now_ms() + 5, 0)
    request = interactions.read_request(db.conn, ctx["request_id"])
    assert request is not None
    assert delivery.nudge(db, request, prompt=True) is not None
    stall = delivery.agent_stall(db.conn, ctx["run_id"], 0)
    assert stall is not None
    assert (stall.state, stall.nudges) == ("presenting", 1)
    sessions.report_turn(db, S, ctx["epoch"], event="started", stop_reason=None,
                         workflow_message_id=_latest(db, ctx))  # fmt: skip
    assert (
        db.conn.execute(
            "SELECT agent_nudges FROM interactive_requests WHERE request_id = ?",
            (ctx["request_id"],),
        ).fetchone()[0]
        == 0
    )
    assert problems(db) == []


def test_a_headless_agent_is_not_wanted_while_its_run_waits_for_a_person(
    db: Database, clock: FakeClock
) -> None:
    """A detached run waiting on a decision, or on a checkpoint its model had a turn on and
    left unanswered, holds no agent place; its pending step message wants one again."""
    ctx = st.waiting(db, clock, kind="checkpoint")
    db.conn.execute(
        "UPDATE runs SET execution_mode = 'detached', origin_session = ? WHERE run_id = ?",
        (f"detached-{ctx['run_id']}", ctx["run_id"]),
    )
    db.conn.execute(
        "UPDATE interactive_requests SET origin_session = ? WHERE run_id = ?",
        (f"detached-{ctx['run_id']}", ctx["run_id"]),
    )
    db.conn.execute(
        "UPDATE workflow_messages SET origin_session = ? WHERE run_id = ?",
        (f"detached-{ctx['run_id']}", ctx["run_id"]),
    )
    session = f"detached-{ctx['run_id']}"
    assert [w.run_id for w in agents.wanted(db.conn)] == [ctx["run_id"]]
    epoch = sessions.attach(db, session, "agent-1").coordinator_epoch
    message = _latest(db, ctx)
    sessions.report_turn(db, session, epoch, event="started", stop_reason=None,
                         workflow_message_id=message)  # fmt: skip
    sessions.report_messages(db, session, epoch, [(message, "e1")], idle=False)
    sessions.report_turn(db, session, epoch, event="ended", stop_reason="completed",
                         workflow_message_id=None)  # fmt: skip
    assert agents.wanted(db.conn) == []


@pytest.mark.parametrize("outcome", ["rejected", "cut short"])
def test_a_submission_rejected_after_its_turn_died_makes_the_step_due_at_once(
    db: Database, clock: FakeClock, outcome: str
) -> None:
    """The submitting seat died while its answer was validated (a server SIGKILL under a
    headless agent); the next seat attached while the step was validating, so nothing was
    presented then. The rejection (or a validation cut short) reopens the step with no turn
    on it: it is due to be presented again at once, never left stalled."""
    ctx = _step(db, clock)
    submitted = interaction_writes.submit(
        db, ctx["request_id"], {"score": 1}, kinds=frozenset({"agent"}), submitted_by="agent"
    )
    claim = lifecycle.claim(db, ctx["run_id"], "validator").claim
    attached = sessions.attach(db, S, "seat-B")
    assert attached.presented_again == (), "a validating step is not presented again"
    if outcome == "rejected":
        interaction_writes.reject(db, claim, submitted.submission_id, "score must be twice")
    else:
        interaction_writes.abandon(db, claim, "the runner exited")
    found = delivery.of_request(db.conn, ctx["request_id"])
    assert found is not None
    assert (found.state, found.reason) == ("presentDue", delivery.TURN_LOST)
    assert delivery.fire_due(db) == [ctx["run_id"]]
    assert _messages(db, ctx) == [("sent", None), ("pending", delivery.TURN_LOST)]
    assert _state(db, ctx) == "presenting"
    assert problems(db) == []


def test_a_submission_rejected_inside_a_live_turn_is_not_presented_again(
    db: Database, clock: FakeClock
) -> None:
    """The seat's turn that submitted still works on the step: the rejection reaches the
    model in that turn, so nothing is due and nothing is presented again."""
    ctx = _step(db, clock)
    submitted = interaction_writes.submit(
        db, ctx["request_id"], {"score": 1}, kinds=frozenset({"agent"}), submitted_by="agent"
    )
    claim = lifecycle.claim(db, ctx["run_id"], "validator").claim
    interaction_writes.reject(db, claim, submitted.submission_id, "score must be twice")
    assert _state(db, ctx) == "working"
    assert delivery.fire_due(db) == []
    assert _messages(db, ctx) == [("sent", None)]


def _detach(db: Database, ctx: dict[str, Any]) -> str:
    """Make ``ctx``'s run detached (its session ``detached-<run id>``); returns the session."""
    session = f"detached-{ctx['run_id']}"
    db.conn.execute(
        "UPDATE runs SET execution_mode = 'detached', origin_session = ? WHERE run_id = ?",
        (session, ctx["run_id"]),
    )
    for table in ("interactive_requests", "workflow_messages"):
        db.conn.execute(
            f"UPDATE {table} SET origin_session = ? WHERE run_id = ?", (session, ctx["run_id"])
        )
    return session


def test_a_checkpoint_for_the_person_is_a_question_no_turn_or_agent_is_expected_for(
    db: Database, clock: FakeClock
) -> None:
    """A ``checkpoint(for_person=True)`` is presented as a ``question`` (a card, no model
    turn): shown to a seat and left without a turn, it is never presented again (an idle
    report, a new seat, a rejected answer), has no delivery state, is no stalled step for
    ``diagnose`` however long it waits, and a detached run waiting on it wants no headless
    agent."""
    ctx = st.waiting(db, clock, kind="checkpoint", session=S, for_person=True)
    [(kind, for_person)] = db.conn.execute(
        "SELECT m.kind, q.for_person FROM workflow_messages m JOIN interactive_requests q"
        " USING (request_id) WHERE q.request_id = ?",
        (ctx["request_id"],),
    ).fetchall()
    assert (kind, for_person) == ("question", 1)
    epoch = sessions.attach(db, S, "seat-A").coordinator_epoch
    message = _latest(db, ctx)
    answer = sessions.report_messages(db, S, epoch, [(message, "e1")], idle=True)
    assert answer == {"sent": [message], "resumed": []}
    assert sessions.attach(db, S, "seat-B").presented_again == ()
    clock.advance(10 * 60_000)
    assert sessions.report_messages(db, S, epoch + 1, [(message, "e1")], idle=True) == {
        "sent": [],
        "resumed": [],
    }
    assert _messages(db, ctx) == [("sent", None)]
    assert _state(db, ctx) is None
    submitted = interaction_writes.submit(
        db, ctx["request_id"], {"a": 1}, kinds=frozenset({"checkpoint"}), submitted_by="person"
    )
    claim = lifecycle.claim(db, ctx["run_id"], "validator").claim
    interaction_writes.reject(db, claim, submitted.submission_id, "say please")
    assert delivery.fire_due(db) == []
    assert _messages(db, ctx) == [("sent", None)], "a rejected answer presents nothing again"
    assert problems(db) == []
    assert agents.wanted(db.conn) == []
    _detach(db, ctx)
    assert agents.wanted(db.conn) == []
    ordinary = st.waiting(db, FakeClock(), kind="checkpoint")
    _detach(db, ordinary)
    assert [w.run_id for w in agents.wanted(db.conn)] == [ordinary["run_id"]]
