"""Upgrades in a real state database: a parked run continues on new code when the new graph
carries it, its open request is re-created, and every refusal changes nothing.

The store's own operations build every state; ``diagnose`` is the oracle after each.
"""

from __future__ import annotations

import pytest

from pi_workflows.store import interactions, lifecycle, upgrades, views, wait_steps
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database
from pi_workflows.store.effect_writes import reserve_effect
from pi_workflows.store.errors import EffectConflictError, GraphCarryError, InvalidTransitionError
from pi_workflows.store.interactions import InteractionDraft
from pi_workflows.store.lifecycle import GoTo, NewRun
from pi_workflows.store.states import AttemptStatus, ParkReason

from support.store import chain_run, count, problems, run_status, snapshot, walk

pytestmark = pytest.mark.timeout(60)

KINDS = {"a": "compute", "b": "checkpoint", "c": "compute"}


def _old() -> NewRun:
    return chain_run(kinds=KINDS, effect_on=None)


def _new(kinds: dict[str, str] | None = None) -> NewRun:
    return chain_run(kinds=kinds or KINDS, effect_on=None, revision="test-2")


def _at_b(db: Database) -> tuple[str, Claim, str]:
    """A run that settled a and runs its first attempt of b."""
    run_id = lifecycle.reserve(db, _old()).run_id
    claim = lifecycle.claim(db, run_id, "runner-1").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt
    nxt = lifecycle.finish_node(
        db, claim, attempt.attempt_id, AttemptStatus.COMPLETED, GoTo("b"),
        output={"node": "a"}, start_next=True,
    ).next_attempt  # fmt: skip
    assert nxt is not None
    return run_id, claim, nxt.attempt_id


def _waiting_at_b(db: Database) -> tuple[str, str]:
    run_id, claim, attempt_id = _at_b(db)
    _, request_id = lifecycle.wait(db, claim, attempt_id, InteractionDraft("checkpoint", {"q": 1}))
    return run_id, request_id


def test_a_waiting_run_gets_its_request_again_from_the_new_code(db: Database) -> None:
    """Upgrading a run waiting on a request: the source identity is replaced, the request is
    cancelled, its attempt closed as parked (upgraded) and the run queued, so the next
    runner opens the same visit again; the event records both identities."""
    run_id, request_id = _waiting_at_b(db)
    result, plan = upgrades.upgrade(db, run_id, _new())
    assert plan.recreate == {"requestId": request_id, "nodeId": "b", "kind": "checkpoint"}
    assert run_status(db, run_id) == "queued"
    assert interactions.open_request_of(db.conn, run_id) is None
    closed = db.conn.execute(
        "SELECT status, error FROM node_attempts WHERE run_id = ? AND node_id = 'b'", (run_id,)
    ).fetchone()
    assert tuple(closed) == ("interrupted", "parked (upgraded)")
    source = db.conn.execute(
        "SELECT source_revision FROM run_sources WHERE run_id = ?", (run_id,)
    ).fetchone()
    assert source[0] == "test-2"
    event = db.conn.execute(
        "SELECT type, data_json FROM events WHERE run_id = ? AND revision = ?",
        (run_id, result.revision),
    ).fetchone()
    assert event[0] == "run.upgraded"
    assert '"revision":"test-1"' in event[1]
    assert '"revision":"test-2"' in event[1]
    claim = lifecycle.claim(db, run_id, "runner-2").claim
    again = lifecycle.start_node(db, claim, "b").attempt
    assert (again.visit, again.attempt_no) == (1, 2)
    assert problems(db) == []


def test_a_run_parked_on_changed_code_continues_after_the_upgrade(db: Database) -> None:
    """A run parked workflowSourceChanged at a node boundary is queued by its upgrade."""
    run_id, claim, _ = _at_b(db)
    lifecycle.park(db, claim, ParkReason.WORKFLOW_SOURCE_CHANGED, "b.py changed")
    upgrades.upgrade(db, run_id, _new())
    assert run_status(db, run_id) == "queued"
    assert problems(db) == []


def test_a_run_paused_by_a_person_stays_paused_on_the_new_code(db: Database) -> None:
    """A userPaused run is upgraded but stays paused (run resume continues it)."""
    run_id, claim, _ = _at_b(db)
    lifecycle.park(db, claim, ParkReason.USER_PAUSED)
    _, plan = upgrades.upgrade(db, run_id, _new())
    assert not plan.continues
    assert run_status(db, run_id) == "paused"
    lifecycle.resume(db, run_id)
    assert run_status(db, run_id) == "queued"
    assert problems(db) == []


def test_upgrade_is_refused_for_a_removed_or_changed_node_and_changes_nothing(
    db: Database,
) -> None:
    """The node the run waits at removed, or a recorded node's kind changed: refused with
    each reason, and no row changes."""
    run_id, _ = _waiting_at_b(db)
    rows = snapshot(db)
    with pytest.raises(GraphCarryError) as refused:
        upgrades.upgrade(db, run_id, _new({"a": "compute", "c": "compute"}))
    assert refused.value.reasons == ["the run waits at node b, which the new code removed"]
    with pytest.raises(GraphCarryError) as changed:
        upgrades.upgrade(db, run_id, _new({"a": "agent", "b": "checkpoint", "c": "compute"}))
    assert changed.value.reasons == ["node a has a recorded result as compute but is now agent"]
    assert snapshot(db) == rows


def test_upgrade_is_refused_for_running_ended_and_unchanged_runs(db: Database) -> None:
    """A running run (pause it first), an ended one (fork or restart) and one already on
    the current code are refused in one line each."""
    run_id, claim, _ = _at_b(db)
    with pytest.raises(InvalidTransitionError, match="pause it first"):
        upgrades.upgrade(db, run_id, _new())
    lifecycle.park(db, claim, ParkReason.USER_PAUSED)
    with pytest.raises(InvalidTransitionError, match="already runs the workflow's current"):
        upgrades.upgrade(db, run_id, _old())
    ended = lifecycle.reserve(db, _old()).run_id
    walk(db, lifecycle.claim(db, ended, "runner-2").claim, ["a", "b", "c"], effect_on=None)
    with pytest.raises(InvalidTransitionError, match="run fork"):
        upgrades.upgrade(db, ended, _new())
    assert count(db, "events", "type = 'run.upgraded'") == 0


def test_a_sleeping_run_keeps_its_wait_after_the_upgrade(db: Database) -> None:
    """A run in a durable wait stays waiting on the same wait, on the new code."""
    run_id, claim, attempt_id = _at_b(db)
    lifecycle.sleep(db, claim, attempt_id, delay_ms=60_000)
    upgrades.upgrade(db, run_id, _new())
    assert run_status(db, run_id) == "waiting"
    assert views.run_view(db.conn, run_id)["wait"]["kind"] == "sleep"
    assert problems(db) == []


def test_the_plan_says_what_would_change_and_writes_nothing(db: Database) -> None:
    """A dry run lists the graph changes and the request it would re-create, read only."""
    run_id, request_id = _waiting_at_b(db)
    rows = snapshot(db)
    found = upgrades.plan(
        db.conn, run_id, _new({"a": "compute", "b": "checkpoint", "c": "compute", "d": "notify"})
    )
    assert found.to_json()["possible"] is True
    assert found.changes == ["nodes added: d", "routes changed"]
    assert found.recreate is not None
    assert found.recreate["requestId"] == request_id
    assert snapshot(db) == rows


def _paused_with_pending_effect(db: Database) -> str:
    """A chain run (b: an action with an idempotent effect) parked while b's effect was
    applying: the effect is pending, its body must run again."""
    run_id = lifecycle.reserve(db, chain_run()).run_id
    claim = lifecycle.claim(db, run_id, "runner-1").claim
    first = lifecycle.start_node(db, claim, "a").attempt
    b = lifecycle.finish_node(
        db, claim, first.attempt_id, AttemptStatus.COMPLETED, GoTo("b"),
        output={"node": "a"}, start_next=True,
    ).next_attempt  # fmt: skip
    assert b is not None
    reserve_effect(
        db, claim, attempt_id=b.attempt_id, effect_type="ledger", effect_kind="idempotent",
        fingerprint="old-request",
    )  # fmt: skip
    lifecycle.park(db, claim, ParkReason.SERVER_STOPPED)
    assert count(db, "effects", "run_id = ? AND status = 'pending'", run_id) == 1
    return run_id


def _reserve_again(db: Database, run_id: str, fingerprint: str) -> str:
    lifecycle.resume(db, run_id)
    claim = lifecycle.claim(db, run_id, "runner-2").claim
    attempt = lifecycle.start_node(db, claim, "b").attempt
    reservation, _ = reserve_effect(
        db, claim, attempt_id=attempt.attempt_id, effect_type="ledger",
        effect_kind="idempotent", fingerprint=fingerprint,
    )  # fmt: skip
    return str(reservation.status)


def test_an_upgraded_run_reserves_its_pending_effect_with_the_new_codes_request(
    db: Database,
) -> None:
    """The new code of an upgraded run asks for the same key with another request: it takes
    the key over (the body runs again under it) instead of conflicting; without an upgrade
    another request for the key is still a conflict."""
    upgraded = _paused_with_pending_effect(db)
    upgrades.upgrade(db, upgraded, chain_run(revision="test-2"))
    assert _reserve_again(db, upgraded, "new-request") == "applying"
    [(stored, attempts_made)] = db.conn.execute(
        "SELECT fingerprint, attempt_count FROM effects WHERE run_id = ?", (upgraded,)
    ).fetchall()
    assert (stored, attempts_made) == ("new-request", 2)
    plain = _paused_with_pending_effect(db)
    with pytest.raises(EffectConflictError):
        _reserve_again(db, plain, "new-request")


def test_a_node_waiting_out_a_retry_delay_keeps_its_kind(db: Database) -> None:
    """A run waiting on a retry delay of b (its try settled ``retried``, no attempt open):
    the next try continues b's visit, so new code that changed b's kind is refused."""
    run_id, claim, attempt_id = _at_b(db)
    wait_steps.retry(db, claim, attempt_id, AttemptStatus.FAILED, "flaky", delay_ms=60_000)
    assert run_status(db, run_id) == "waiting"
    rows = snapshot(db)
    with pytest.raises(GraphCarryError) as changed:
        upgrades.upgrade(db, run_id, _new({"a": "compute", "b": "compute", "c": "compute"}))
    assert changed.value.reasons == [
        "node b has a recorded result as checkpoint but is now compute"
    ]
    assert snapshot(db) == rows
