"""Forks in a real state database: what a fork carries from its source, where it starts,
what it refuses, how it restarts, and that it is never part of its source's tree.

The store's own operations build every state; ``diagnose`` is the oracle after each.
"""

from __future__ import annotations

import dataclasses

import pytest

from pi_workflows.protocol.effects import effect_key
from pi_workflows.store import forks, lifecycle, lineage, retention, views
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.effect_writes import reserve_effect, settle_effect
from pi_workflows.store.effects import EffectStatus
from pi_workflows.store.errors import ForkPointError, GraphCarryError, InvalidTransitionError
from pi_workflows.store.states import ParkReason

from support import crash_states as st
from support.store import chain_run, count, problems, run_status, snapshot, walk

pytestmark = pytest.mark.timeout(60)

NODES = ["a", "b", "c", "d"]


def _completed(db: Database, **kinds: str) -> str:
    """A run of the chain that settled every node and completed, the effect applied at b."""
    run_id = lifecycle.reserve(db, chain_run()).run_id
    walk(db, lifecycle.claim(db, run_id, "runner-1").claim, NODES)
    return run_id


def _source_rows(db: Database, run_id: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the tables a run owns, for ``run_id``."""
    tables = ("runs", "events", "node_attempts", "effects", "viewer_runs", "run_queue")
    return {
        table: [
            tuple(row)
            for row in db.conn.execute(f"SELECT * FROM {table} WHERE run_id = ?", (run_id,))
        ]
        for table in tables
    }


def test_a_fork_carries_what_its_source_settled_before_the_fork_point(db: Database) -> None:
    """A fork from c of a completed run is queued at c with the outputs of a and b, its
    step count 2, b's applied effect carried as a receipt under the fork's own key, and
    its own run.reserved and run.forked events; the source's rows are untouched."""
    source = _completed(db)
    before = _source_rows(db, source)
    forked = forks.fork(db, source, "c", chain_run())
    fork = forked.result.run_id
    assert (forked.visit, forked.carried_attempts, forked.carried_effects) == (1, 2, 1)
    assert forked.applied_again == []
    assert _source_rows(db, source) == before
    state = views.runner_state(db.conn, fork)
    assert state["outputs"] == {"a": {"node": "a"}, "b": {"node": "b"}}
    assert state["visits"] == {"a": 1, "b": 1}
    assert (state["currentNode"], state["stepCount"], state["round"]) == ("c", 2, 0)
    carried = db.conn.execute(
        "SELECT effect_key, status, carried_from FROM effects WHERE run_id = ?", (fork,)
    ).fetchone()
    assert carried[0] == effect_key(fork, 0, "b", 1, "ledger")
    assert carried[1] == "applied"
    assert (
        carried[2]
        == db.conn.execute("SELECT effect_id FROM effects WHERE run_id = ?", (source,)).fetchone()[
            0
        ]
    )
    events = db.conn.execute(
        "SELECT revision, type FROM events WHERE run_id = ? ORDER BY revision", (fork,)
    ).fetchall()
    assert [tuple(e) for e in events] == [(1, "run.reserved"), (2, "run.forked")]
    queue = db.conn.execute(
        "SELECT status, next_command FROM run_queue WHERE run_id = ?", (fork,)
    ).fetchone()
    assert tuple(queue) == ("ready", "start")
    assert problems(db) == []


def test_a_fork_runs_on_from_its_fork_point_and_counts_visits_from_there(db: Database) -> None:
    """The fork's runner starts c as visit 1 and completes; nothing before c runs again."""
    source = _completed(db)
    fork = forks.fork(db, source, "c", chain_run()).result.run_id
    claim = lifecycle.claim(db, fork, "runner-2").claim
    walk(db, claim, ["c", "d"], effect_on=None)
    assert run_status(db, fork) == "completed"
    rows = db.conn.execute(
        "SELECT node_id, visit, carried_from IS NOT NULL FROM node_attempts WHERE run_id = ?"
        " ORDER BY rowid",
        (fork,),
    ).fetchall()
    assert [tuple(r) for r in rows] == [("a", 1, 1), ("b", 1, 1), ("c", 1, 0), ("d", 1, 0)]
    assert count(db, "effect_attempts", "status = 'applied'") == 2  # the source's, and its copy
    assert problems(db) == []


def test_effects_at_or_after_the_fork_point_are_named_and_new_in_the_fork(db: Database) -> None:
    """A fork from b (where the effect was applied) carries only a; b's applied effect is
    reported as applied again ahead of the fork, and the fork reserves it anew."""
    source = _completed(db)
    forked = forks.fork(db, source, "b", chain_run())
    assert forked.carried_attempts == 1
    assert forked.carried_effects == 0
    assert [(e["nodeId"], e["type"]) for e in forked.applied_again] == [("b", "ledger")]
    fork = forked.result.run_id
    walk(db, lifecycle.claim(db, fork, "runner-2").claim, ["b", "c", "d"])
    keys = db.conn.execute(
        "SELECT effect_key FROM effects WHERE run_id = ? AND status = 'applied'", (fork,)
    ).fetchall()
    assert [k[0] for k in keys] == [effect_key(fork, 0, "b", 1, "ledger")]
    assert problems(db) == []


def test_the_fork_point_is_the_latest_visit_unless_one_is_named(
    db: Database, clock: FakeClock
) -> None:
    """A node run twice (a loop back) forks from its second visit by default and from its
    first with visit=1, each carrying what came before that visit."""
    run_id = lifecycle.reserve(db, chain_run()).run_id
    claim = lifecycle.claim(db, run_id, "runner-1").claim
    walk(db, claim, ["a", "c"], effect_on=None)  # completes after c
    lifecycle.restart(db, run_id)  # a new round: a, c, a, c
    claim = lifecycle.claim(db, run_id, "runner-2").claim
    walk(db, claim, ["a", "c", "a", "c"], effect_on=None)
    latest = forks.fork(db, run_id, "a", chain_run())
    first = forks.fork(db, run_id, "a", chain_run(), visit=1)
    assert (latest.visit, latest.carried_attempts) == (2, 2)
    assert (first.visit, first.carried_attempts) == (1, 0)
    assert views.runner_state(db.conn, latest.result.run_id)["visits"] == {"a": 1, "c": 1}
    assert problems(db) == []


def test_an_unknown_node_or_visit_is_refused_in_one_line_naming_what_exists(
    db: Database,
) -> None:
    """A node the source never reached, a visit it never made and a node the new code does
    not have are each refused with one line that names what exists; nothing is stored."""
    source = _completed(db)
    short = chain_run(kinds={"a": "compute", "b": "action", "x": "compute"})
    rows = snapshot(db)
    cases = [
        (lambda: forks.fork(db, source, "zz", chain_run()), "has no node zz (its nodes: a, b"),
        (lambda: forks.fork(db, source, "c", chain_run(), visit=3), "there is no visit 3"),
        (lambda: forks.fork(db, source, "x", short), "never reached node x"),
    ]
    for call, words in cases:
        with pytest.raises(ForkPointError) as refused:
            call()
        assert words in str(refused.value)
        assert "\n" not in str(refused.value)
    assert snapshot(db) == rows


def test_a_running_source_or_one_with_an_unsettled_effect_is_refused(
    db: Database, clock: FakeClock
) -> None:
    """A running run is refused with 'pause it first'; a paused run with an ambiguous
    effect is refused naming the effect id; nothing is stored."""
    running = st.in_node(db, clock)
    with pytest.raises(InvalidTransitionError, match="pause it first"):
        forks.fork(db, running["run_id"], "a", chain_run())
    ambiguous = st.ambiguous(db, clock)
    effect_id = db.conn.execute(
        "SELECT effect_id FROM effects WHERE run_id = ?", (ambiguous["run_id"],)
    ).fetchone()[0]
    rows = snapshot(db)
    with pytest.raises(InvalidTransitionError, match=effect_id):
        forks.fork(db, ambiguous["run_id"], "a", chain_run())
    assert snapshot(db) == rows


def test_new_code_that_cannot_carry_the_recorded_nodes_is_refused(db: Database) -> None:
    """A carried node the new code removed, or whose kind it changed, refuses the fork with
    each reason; nothing is stored."""
    source = _completed(db)
    changed = chain_run(kinds={"a": "agent", "c": "compute", "d": "compute"}, effect_on=None)
    rows = snapshot(db)
    with pytest.raises(GraphCarryError) as refused:
        forks.fork(db, source, "c", changed)
    assert refused.value.reasons == [
        "node a has a recorded result as compute but is now agent",
        "node b has a recorded result but the new code removed it",
    ]
    assert snapshot(db) == rows


def test_a_fork_is_not_part_of_its_sources_tree(db: Database, clock: FakeClock) -> None:
    """Cancelling a paused source leaves its fork queued; the fork has no parent, depth 0,
    its own root, and diagnose's tree invariants hold."""
    source = st.user_paused(db, clock)["run_id"]
    run_id = lifecycle.reserve(db, chain_run()).run_id
    claim = lifecycle.claim(db, run_id, "runner-1").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt
    lifecycle.finish_node(
        db, claim, attempt.attempt_id, st.AttemptStatus.COMPLETED, lifecycle.GoTo("b"),
        output={"node": "a"},
    )  # fmt: skip
    lifecycle.park(db, claim, ParkReason.USER_PAUSED)
    fork = forks.fork(db, run_id, "a", chain_run()).result.run_id
    lifecycle.cancel(db, run_id)
    lifecycle.cancel(db, source)
    assert run_status(db, fork) == "queued"
    row = db.conn.execute(
        "SELECT parent_run_id, root_run_id, depth, forked_from FROM runs WHERE run_id = ?",
        (fork,),
    ).fetchone()
    assert tuple(row) == (None, None, 0, run_id)
    assert problems(db) == []


def test_a_completed_run_restarts_and_a_fork_restarts_from_its_fork_point(
    db: Database,
) -> None:
    """Restart works from completed; a fork's restart starts its new round at its fork
    point with what it carried copied again (effects under the new round's keys)."""
    source = _completed(db)
    lifecycle.restart(db, source)
    assert run_status(db, source) == "queued"
    walk(db, lifecycle.claim(db, source, "runner-2").claim, NODES)
    fork = forks.fork(db, source, "c", chain_run()).result.run_id
    walk(db, lifecycle.claim(db, fork, "runner-3").claim, ["c", "d"], effect_on=None)
    lifecycle.restart(db, fork)
    state = views.runner_state(db.conn, fork)
    assert (state["round"], state["currentNode"], state["stepCount"]) == (1, "c", 2)
    assert state["outputs"] == {"a": {"node": "a"}, "b": {"node": "b"}}
    keys = db.conn.execute(
        "SELECT effect_key FROM effects WHERE run_id = ? ORDER BY rowid", (fork,)
    ).fetchall()
    assert [k[0] for k in keys] == [
        effect_key(fork, 0, "b", 1, "ledger"),
        effect_key(fork, 1, "b", 1, "ledger"),
    ]
    restarts = lineage.lineage_of(db.conn, source)["rounds"]
    assert [(r["round"], r["from"]) for r in restarts] == [(1, "completed")]
    assert problems(db) == []


def test_a_fork_takes_a_new_input_and_keeps_the_carried_outputs(db: Database) -> None:
    """With another input the fork's input is replaced and the carried outputs stay as they
    were (the documented rule)."""
    source = _completed(db)
    fork = forks.fork(db, source, "c", chain_run(value="other")).result.run_id
    state = views.runner_state(db.conn, fork)
    assert state["input"] == {"value": "other"}
    assert state["outputs"] == {"a": {"node": "a"}, "b": {"node": "b"}}


def test_lineage_is_read_both_ways_and_survives_pruning_the_source(
    db: Database, clock: FakeClock
) -> None:
    """The source lists its fork, the fork names its source and fork point, run list
    --lineage finds forks of forks; once retention removes the ended ones the queued fork
    still names its source (as gone) and diagnose stays clean."""
    source = _completed(db)
    fork = forks.fork(db, source, "c", chain_run()).result.run_id
    walk(db, lifecycle.claim(db, fork, "runner-2").claim, ["c", "d"], effect_on=None)
    grandchild = forks.fork(db, fork, "d", chain_run()).result.run_id
    mine = lineage.lineage_of(db.conn, fork)
    assert (mine["kind"], mine["parentRunId"], mine["carriedAttempts"]) == ("fork", source, 2)
    assert mine["forkedFrom"] == {"runId": source, "nodeId": "c", "visit": 1, "exists": True}
    assert [f["runId"] for f in mine["forks"]] == [grandchild]
    assert [f["runId"] for f in lineage.lineage_of(db.conn, source)["forks"]] == [fork]
    listed = views.list_lineage(db.conn, source)
    assert [(r["runId"], r["via"], r["from"], r["generation"]) for r in listed] == [
        (fork, "fork", source, 1),
        (grandchild, "fork", fork, 2),
    ]
    assert listed[0]["forkedFrom"] == source
    clock.advance(40 * 86_400_000)
    retention.prune(db, clock.now_ms() - 30 * 86_400_000)
    assert count(db, "runs", "run_id IN (?, ?)", source, fork) == 0  # both ended: pruned
    assert lineage.lineage_of(db.conn, grandchild)["forkedFrom"] == {
        "runId": fork, "nodeId": "d", "visit": 1, "exists": False,
    }  # fmt: skip
    assert problems(db) == []


def test_a_waiting_source_forks_at_the_node_it_waits_at(db: Database, clock: FakeClock) -> None:
    """A run waiting on a request at b forks from b with a carried; its request stays open
    and the fork starts b afresh."""
    run_id = lifecycle.reserve(db, chain_run()).run_id
    claim = lifecycle.claim(db, run_id, "runner-1").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt
    nxt = lifecycle.finish_node(
        db, claim, attempt.attempt_id, st.AttemptStatus.COMPLETED, lifecycle.GoTo("b"),
        output={"node": "a"}, start_next=True,
    ).next_attempt  # fmt: skip
    assert nxt is not None
    lifecycle.wait(db, claim, nxt.attempt_id, st.InteractionDraft("checkpoint", {"q": 1}))
    fork = forks.fork(db, run_id, "b", dataclasses.replace(chain_run())).result.run_id
    assert run_status(db, run_id) == "waiting"
    assert views.runner_state(db.conn, fork)["active"] is None
    assert views.runner_state(db.conn, fork)["currentNode"] == "b"
    assert problems(db) == []


@pytest.mark.parametrize("ending", ["failed", "timed_out", "cancelled"])
def test_a_run_that_ended_otherwise_forks_at_the_node_it_ended_in(
    db: Database, ending: str
) -> None:
    """A run that failed, timed out or was cancelled in c forks from c with a and b carried
    (b's applied effect as a receipt); the fork runs c afresh as its visit 1 and completes."""
    run_id = lifecycle.reserve(db, chain_run()).run_id
    claim = lifecycle.claim(db, run_id, "runner-1").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt
    for node, nxt in (("a", "b"), ("b", "c")):
        if node == "b":
            reservation, _ = reserve_effect(
                db, claim, attempt_id=attempt.attempt_id, effect_type="ledger",
                effect_kind="idempotent", fingerprint="fp-b",
            )  # fmt: skip
            settle_effect(db, claim, reservation.effect_id, EffectStatus.APPLIED, result={})
        finished = lifecycle.finish_node(
            db, claim, attempt.attempt_id, st.AttemptStatus.COMPLETED, lifecycle.GoTo(nxt),
            output={"node": node}, start_next=True,
        )  # fmt: skip
        assert finished.next_attempt is not None
        attempt = finished.next_attempt
    match ending:
        case "failed":
            lifecycle.fail(db, claim, "boom")
        case "timed_out":
            lifecycle.time_out(db, claim, "late")
        case _:
            lifecycle.cancel(db, run_id, claim=claim)
    assert run_status(db, run_id) == ending
    forked = forks.fork(db, run_id, "c", chain_run())
    assert (forked.visit, forked.carried_attempts, forked.carried_effects) == (1, 2, 1)
    fork = forked.result.run_id
    walk(db, lifecycle.claim(db, fork, "runner-2").claim, ["c", "d"], effect_on=None)
    assert run_status(db, fork) == "completed"
    assert problems(db) == []


def test_a_parent_whose_tree_works_or_has_an_unsettled_effect_is_neither_forked_nor_restarted(
    db: Database, clock: FakeClock
) -> None:
    """A waiting parent whose child still runs is refused ('pause it first'); once the child
    parked with its manual effect ambiguous, a fork and a restart of the parent are refused
    naming the child's effect (a restart would cancel the child and apply it again in a new
    one); nothing is stored."""
    ctx = st.last_child_running(db, clock)
    parent, child = ctx["run_id"], ctx["children"][0]
    reservation, _ = reserve_effect(
        db, ctx["child_claim"], attempt_id=ctx["child_attempt"], effect_type="charge",
        effect_kind="manual", fingerprint="f",
    )  # fmt: skip
    with pytest.raises(InvalidTransitionError, match=f"still working \\({child}\\)"):
        forks.fork(db, parent, "a", st.new_run())
    lifecycle.park(db, ctx["child_claim"], ParkReason.SERVER_STOPPED)
    assert count(db, "effects", "effect_id = ? AND status = 'ambiguous'", reservation.effect_id)
    rows = snapshot(db)
    with pytest.raises(InvalidTransitionError, match=reservation.effect_id):
        forks.fork(db, parent, "a", st.new_run())
    with pytest.raises(InvalidTransitionError, match=reservation.effect_id):
        lifecycle.restart(db, parent)
    assert snapshot(db) == rows
