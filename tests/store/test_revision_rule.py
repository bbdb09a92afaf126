"""The revision rule: session and presentation bookkeeping never moves the revision a
runner's proposals are fenced by, and the store refuses bookkeeping that would change what a
runner reads (``store/runs.py``)."""

from __future__ import annotations

import msgspec
import pytest

import pi_workflows.server.app  # noqa: F401 - declares the command transactions
from pi_workflows.server.runner_messages import answer
from pi_workflows.store import faults, lifecycle, sessions
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.effect_writes import keep_receipt, settle_effect
from pi_workflows.store.effects import EffectStatus
from pi_workflows.store.errors import PresentationWriteError, RevisionConflictError
from pi_workflows.store.runs import PRESENTATION_EVENTS, RULE_OFF_FLAG, read_run, write_run
from pi_workflows.store.states import AttemptStatus, RunStatus

from support import crash_states as st
from support.crash_states import SESSION


def _update(db: Database, run_id: str, request_id: str = "req") -> None:
    write_run(
        db, run_id, name="command.interaction.update", event_type="interaction.update",
        event_data={"requestId": request_id, "body": {"pct": 1}}, claim=None,
        apply=lambda tx, run: None,
    )  # fmt: skip


def test_presentation_writes_move_the_revision_but_not_the_execution_revision(
    db: Database, clock: FakeClock
) -> None:
    """A message marked sent and a progress update append their events and move
    ``revision``; ``execution_revision`` stays where the runner read it."""
    ctx = st.session_step(db, clock)
    before = read_run(db.conn, ctx["run_id"])
    sessions.report_messages(db, SESSION, ctx["epoch"], [(ctx["message_id"], "e-1")], idle=False)
    _update(db, ctx["run_id"], ctx["request_id"])
    after = read_run(db.conn, ctx["run_id"])
    assert after.revision == before.revision + 2
    assert after.execution_revision == before.execution_revision
    types = [
        row[0]
        for row in db.conn.execute(
            "SELECT type FROM events WHERE run_id = ? AND revision > ? ORDER BY revision",
            (ctx["run_id"], before.revision),
        )
    ]
    assert types == ["message.sent", "interaction.update"]


def test_a_runner_fenced_at_its_execution_revision_is_not_stopped_by_bookkeeping(
    db: Database, clock: FakeClock
) -> None:
    """A runner that read execution revision N settles its effect at N although session
    bookkeeping committed in between; any execution change still makes it conflict."""
    ctx = st.applying(db, clock)
    read_at = read_run(db.conn, ctx["run_id"]).execution_revision
    _update(db, ctx["run_id"])
    settled = settle_effect(
        db, ctx["claim"], ctx["effect_id"], EffectStatus.APPLIED, result={"ok": 1},
        expected_revision=read_at,
    )  # fmt: skip
    assert settled.execution_revision == read_at + 1
    with pytest.raises(RevisionConflictError):
        lifecycle.finish_node(
            db, ctx["claim"], ctx["attempt_id"], AttemptStatus.COMPLETED,
            lifecycle.Finish(RunStatus.COMPLETED, {"ok": 1}), expected_revision=read_at,
        )  # fmt: skip


@pytest.mark.parametrize("event_type", sorted(PRESENTATION_EVENTS))
def test_bookkeeping_that_changes_execution_state_is_refused(
    db: Database, clock: FakeClock, event_type: str
) -> None:
    """A write declared as presentation that would change the run's status, attempt or
    effects rolls back with ``PresentationWriteError``; so does one fenced by a claim."""
    ctx = st.applying(db, clock)
    before = read_run(db.conn, ctx["run_id"])

    def sneaky(tx: object, run: object) -> None:
        db.conn.execute(
            "UPDATE effects SET status = 'pending' WHERE effect_id = ?", (ctx["effect_id"],)
        )

    with pytest.raises(PresentationWriteError):
        write_run(db, ctx["run_id"], name="command.interaction.update", event_type=event_type,
                  claim=None, apply=sneaky)  # fmt: skip
    with pytest.raises(PresentationWriteError):
        write_run(db, ctx["run_id"], name="command.interaction.update", event_type=event_type,
                  claim=ctx["claim"], apply=lambda tx, run: None)  # fmt: skip
    assert read_run(db.conn, ctx["run_id"]) == before
    status = db.conn.execute(
        "SELECT status FROM effects WHERE effect_id = ?", (ctx["effect_id"],)
    ).fetchone()[0]
    assert status == "applying"


def test_the_rule_off_flag_lets_bookkeeping_move_the_execution_revision(
    db: Database, clock: FakeClock
) -> None:
    """With ``runs.presentation_moves_execution`` flagged (the campaign's proof that its
    oracle sees a broken rule) bookkeeping moves the execution revision again."""
    ctx = st.applying(db, clock)
    before = read_run(db.conn, ctx["run_id"]).execution_revision
    faults.arm(RULE_OFF_FLAG, "flag")
    _update(db, ctx["run_id"])
    assert read_run(db.conn, ctx["run_id"]).execution_revision == before + 1


def test_a_refused_settle_keeps_the_receipt_it_carried(db: Database, clock: FakeClock) -> None:
    """The server refuses a runner's ``effect.settle`` (its revision is stale): the reply is
    ``conflict``, and the effect is settled anyway from the receipt the runner sent, so its
    exit can neither make the effect ambiguous nor run its body again."""
    ctx = st.runner_applying(db, clock)
    stale = read_run(db.conn, ctx["run_id"]).execution_revision - 1
    message = msgspec.structs.replace(
        st.runner_message(
            ctx,
            "effect.settle",
            {"effectId": ctx["effect_id"], "status": "applied", "result": {"ok": 7},
             "receipt": {"durationMs": 3}},
            "m-settle",
        ),
        expected_revision=stale,
    )  # fmt: skip
    reply = answer(db, ctx["runner"], message)
    assert reply.outcome.value == "conflict"
    row = db.conn.execute(
        "SELECT e.status, e.result_json, a.status, a.receipt_json FROM effects e JOIN"
        " effect_attempts a USING (effect_id) WHERE effect_id = ?",
        (ctx["effect_id"],),
    ).fetchone()
    assert tuple(row) == ("applied", '{"ok":7}', "applied", '{"durationMs":3}')
    events = [r[0] for r in db.conn.execute(
        "SELECT type FROM events WHERE run_id = ? ORDER BY revision DESC LIMIT 1",
        (ctx["run_id"],),
    )]  # fmt: skip
    assert events == ["effect.kept"]


def test_a_receipt_is_kept_only_for_the_generation_that_applied_it(
    db: Database, clock: FakeClock
) -> None:
    """A receipt from an older generation than the effect's newest attempt, or for an effect
    already settled, changes nothing."""
    ctx = st.applying(db, clock)
    generation = ctx["claim"].generation
    run_id, effect_id = ctx["run_id"], ctx["effect_id"]
    applied, rejected = EffectStatus.APPLIED, EffectStatus.REJECTED
    assert keep_receipt(db, run_id, generation + 1, effect_id, applied, refused="t") is None
    assert keep_receipt(db, run_id, generation, effect_id, applied, refused="t") is not None
    assert keep_receipt(db, run_id, generation, effect_id, rejected, refused="t") is None
    status = db.conn.execute(
        "SELECT status FROM effects WHERE effect_id = ?", (ctx["effect_id"],)
    ).fetchone()[0]
    assert status == "applied"
