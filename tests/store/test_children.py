"""Child runs and their joins in a real state database: spawn, each child's end, the one
wake of the parent, fail_fast, and the tree moving together (cancel, restart, pause).

The store's own operations build every state; ``diagnose`` is the oracle after each.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest

from pi_workflows.store import children, lifecycle, tree
from pi_workflows.store.children import MAX_CHILDREN, MAX_DEPTH
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.lifecycle import Finish
from pi_workflows.store.states import AttemptStatus, RunStatus

from support import crash_states as st
from support.store import count, new_run, problems, run_status

pytestmark = pytest.mark.timeout(60)


def _spawn(db: Database, clock: FakeClock, items: int, **options: Any) -> dict[str, Any]:
    ctx = st.in_node(db, clock)
    lifecycle.spawn(
        db,
        ctx["claim"],
        ctx["attempt_id"],
        kind=options.get("kind", "fan_out"),
        child=st.child_workflow(),
        inputs=[{"item": i} for i in range(items)],
        concurrency=options.get("concurrency", 2),
        fail_fast=options.get("fail_fast", False),
        detached=False,
    )
    return ctx


def _rows(db: Database) -> list[tuple[int, str | None, str]]:
    return [
        (row[0], row[1], row[2])
        for row in db.conn.execute(
            "SELECT item, child_run_id, status FROM run_children ORDER BY item"
        )
    ]


def _end(db: Database, run_id: str, status: RunStatus = RunStatus.COMPLETED) -> None:
    """Run a queued child to its end as a runner would: one node, then ``status``."""
    claim = lifecycle.claim(db, run_id, f"runner-{run_id}").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt
    if status is RunStatus.COMPLETED:
        lifecycle.finish_node(
            db, claim, attempt.attempt_id, AttemptStatus.COMPLETED,
            Finish(RunStatus.COMPLETED, {"item": run_id}), output={"item": run_id},
        )  # fmt: skip
    elif status is RunStatus.FAILED:
        lifecycle.fail(db, claim, "the child failed")
    else:
        lifecycle.time_out(db, claim, "the child ran out of time")


def _started(db: Database) -> list[str]:
    return [child for _, child, status in _rows(db) if status == "started" and child]


def test_a_fan_out_starts_its_first_children_in_item_order_and_the_parent_holds_nothing(
    db: Database, clock: FakeClock
) -> None:
    ctx = _spawn(db, clock, 5, concurrency=2)
    parent = ctx["run_id"]
    assert run_status(db, parent) == "waiting"
    assert count(db, "leases", "run_id = ? AND status = 'held'", parent) == 0
    rows = _rows(db)
    assert [status for _, _, status in rows] == [
        "started",
        "started",
        "waiting",
        "waiting",
        "waiting",
    ]
    first = rows[0][1]
    assert first is not None
    tree_row = db.conn.execute(
        "SELECT parent_run_id, root_run_id, depth, origin, status FROM runs WHERE run_id = ?",
        (first,),
    ).fetchone()
    assert tuple(tree_row) == (parent, parent, 1, f"run:{parent}", "queued")
    assert children.read_join(db.conn, _wait_id(db)).progress()["started"] == 2
    assert problems(db) == []


def _wait_id(db: Database) -> str:
    return str(db.conn.execute("SELECT wait_id FROM run_joins").fetchone()[0])


def test_each_end_starts_the_next_child_and_the_last_wakes_the_parent_exactly_once(
    db: Database, clock: FakeClock
) -> None:
    ctx = _spawn(db, clock, 5, concurrency=2)
    parent = ctx["run_id"]
    ended = 0
    while _started(db):
        _end(db, _started(db)[0])
        ended += 1
        active = len(_started(db))
        assert active <= 2, "never more than concurrency children at once"
        if ended < 5:
            assert run_status(db, parent) == "waiting"
            assert problems(db) == []
    assert ended == 5
    assert run_status(db, parent) == "queued"
    assert count(db, "events", "run_id = ? AND type = 'children.joined'", parent) == 1
    assert count(db, "events", "run_id = ? AND type = 'child.ended'", parent) == 4
    page = children.results(db.conn, _wait_id(db), 0, 3)
    assert [item["item"] for item in page["items"]] == [0, 1, 2]
    assert page["next"] == 3
    assert all(item["status"] == "completed" for item in page["items"])
    rest = children.results(db.conn, _wait_id(db), 3, 3)
    assert ([item["item"] for item in rest["items"]], rest["next"]) == ([3, 4], None)
    assert problems(db) == []


def test_fail_fast_skips_the_waiting_children_and_joins_once_the_active_ones_end(
    db: Database, clock: FakeClock
) -> None:
    ctx = _spawn(db, clock, 4, concurrency=2, fail_fast=True)
    first, second = _started(db)
    _end(db, first, RunStatus.FAILED)
    join = children.read_join(db.conn, _wait_id(db))
    assert join is not None
    assert join.status == "failing"
    assert [j.wait_id for j in children.failing(db.conn)] == [join.wait_id]
    assert [status for _, _, status in _rows(db)] == ["failed", "started", "skipped", "skipped"]
    assert children.active_children(db.conn, join.wait_id) == [second]
    # What the server's sweep does for a failing join: cancel what is still active.
    lifecycle.cancel(db, second, reason="a sibling failed (fail_fast)")
    assert run_status(db, ctx["run_id"]) == "queued"
    assert children.failing(db.conn) == []
    assert [status for _, _, status in _rows(db)] == [
        "failed", "cancelled", "skipped", "skipped"
    ]  # fmt: skip
    assert problems(db) == []


def test_cancelling_a_parent_cancels_its_whole_tree_in_one_transaction(
    db: Database, clock: FakeClock
) -> None:
    ctx = _spawn(db, clock, 3, concurrency=2)
    child = _started(db)[0]
    # The child fans out in turn: a grandchild.
    claimed = lifecycle.claim(db, child, "runner-child").claim
    attempt = lifecycle.start_node(db, claimed, "a").attempt
    lifecycle.spawn(
        db, claimed, attempt.attempt_id, kind="subworkflow", child=st.child_workflow(),
        inputs=[{"deeper": True}], concurrency=1, fail_fast=False, detached=False,
    )  # fmt: skip
    grandchild = db.conn.execute(
        "SELECT run_id, root_run_id, depth FROM runs WHERE parent_run_id = ?", (child,)
    ).fetchone()
    assert tuple(grandchild[1:]) == (ctx["run_id"], 2)
    lifecycle.cancel(db, ctx["run_id"], reason="not needed")
    statuses = dict(db.conn.execute("SELECT run_id, status FROM runs").fetchall())
    assert set(statuses.values()) == {"cancelled"}
    assert len(statuses) == 4  # the parent, two started children, one grandchild
    assert count(db, "events", "type = 'run.cancelled'") == 4
    top = db.conn.execute(
        "SELECT c.status FROM run_children c JOIN run_joins j USING (wait_id)"
        " WHERE j.parent_run_id = ? ORDER BY c.item",
        (ctx["run_id"],),
    ).fetchall()
    assert [row[0] for row in top] == ["cancelled", "cancelled", "skipped"]
    assert problems(db) == []


def test_restarting_a_parent_cancels_the_old_children_and_a_child_cannot_restart_alone(
    db: Database, clock: FakeClock
) -> None:
    ctx = _spawn(db, clock, 2, concurrency=2)
    old = _started(db)
    _end(db, old[0], RunStatus.FAILED)
    with pytest.raises(InvalidTransitionError, match="restart the parent"):
        lifecycle.restart(db, old[0])
    lifecycle.restart(db, ctx["run_id"])
    assert run_status(db, ctx["run_id"]) == "queued"
    assert run_status(db, old[1]) == "cancelled"
    join = children.read_join(db.conn, _wait_id(db))
    assert join is not None
    assert join.status == "cancelled"
    assert problems(db) == []


def test_a_join_that_completes_while_its_parent_is_paused_waits_for_the_resume(
    db: Database, clock: FakeClock
) -> None:
    ctx = _spawn(db, clock, 1, kind="subworkflow", concurrency=1)
    lifecycle.pause(db, ctx["run_id"])
    _end(db, _started(db)[0])
    assert run_status(db, ctx["run_id"]) == "paused"
    assert problems(db) == []
    lifecycle.resume(db, ctx["run_id"])
    assert run_status(db, ctx["run_id"]) == "queued"
    assert problems(db) == []


def test_cancel_below_uses_the_live_claim_of_a_running_child(
    db: Database, clock: FakeClock
) -> None:
    ctx = _spawn(db, clock, 1, kind="subworkflow", concurrency=1)
    child = _started(db)[0]
    claimed = lifecycle.claim(db, child, "runner-child").claim
    lifecycle.start_node(db, claimed, "a")
    with db.atomic("lifecycle.cancel") as tx:
        cancelled = tree.cancel_below(db, tx, ctx["run_id"], {child: claimed}, "test")
    assert cancelled == [child]
    assert run_status(db, child) == "cancelled"


@pytest.mark.parametrize("items", [0, MAX_CHILDREN + 1])
def test_a_join_has_one_to_a_thousand_children(db: Database, clock: FakeClock, items: int) -> None:
    ctx = st.in_node(db, clock)
    with pytest.raises(InvalidTransitionError, match="1 to 1000 children"):
        lifecycle.spawn(
            db, ctx["claim"], ctx["attempt_id"], kind="fan_out", child=st.child_workflow(),
            inputs=[{"i": i} for i in range(items)], concurrency=4, fail_fast=False,
            detached=False,
        )  # fmt: skip
    assert run_status(db, ctx["run_id"]) == "running"
    assert count(db, "run_joins") == 0
    assert problems(db) == []


def test_runs_nest_at_most_max_depth_levels(db: Database, clock: FakeClock) -> None:
    ctx = st.in_node(db, clock)
    claim, attempt_id = ctx["claim"], ctx["attempt_id"]
    for depth in range(1, MAX_DEPTH + 2):
        spawn = functools.partial(
            lifecycle.spawn, db, claim, attempt_id, kind="subworkflow",
            child=st.child_workflow(), inputs=[{"depth": depth}], concurrency=1,
            fail_fast=False, detached=False,
        )  # fmt: skip
        if depth > MAX_DEPTH:
            with pytest.raises(InvalidTransitionError, match=f"at most {MAX_DEPTH} levels"):
                spawn()
            break
        spawn()
        (child,) = db.conn.execute(
            "SELECT run_id FROM runs WHERE parent_run_id = ?", (claim.run_id,)
        ).fetchone()
        claim = lifecycle.claim(db, child, f"runner-{depth}").claim
        attempt_id = lifecycle.start_node(db, claim, "a").attempt.attempt_id
    assert db.conn.execute("SELECT MAX(depth) FROM runs").fetchone()[0] == MAX_DEPTH
    assert run_status(db, claim.run_id) == "running"
    assert problems(db) == []


def test_a_paused_parent_starts_no_new_child_until_it_is_resumed(
    db: Database, clock: FakeClock
) -> None:
    ctx = _spawn(db, clock, 3, concurrency=1)
    lifecycle.pause(db, ctx["run_id"])
    _end(db, _started(db)[0])
    assert _started(db) == [], "the pause holds the next child back"
    assert [status for _, _, status in _rows(db)] == ["completed", "waiting", "waiting"]
    assert problems(db) == []
    lifecycle.resume(db, ctx["run_id"])
    assert run_status(db, ctx["run_id"]) == "waiting"
    assert [status for _, _, status in _rows(db)] == ["completed", "started", "waiting"]
    assert problems(db) == []


def test_no_child_starts_under_a_paused_grandparent_until_the_tree_is_resumed(
    db: Database, clock: FakeClock
) -> None:
    """Depth 3: the root is paused while its child still runs; the child's spawn then
    records its join but starts none, a grandchild's end starts no next one, and
    ``lifecycle.refill`` after the root's resume starts them."""
    ctx = _spawn(db, clock, 1, kind="subworkflow", concurrency=1)
    root = ctx["run_id"]
    (mid,) = _started(db)
    mid_claim = lifecycle.claim(db, mid, "runner-mid").claim
    mid_attempt = lifecycle.start_node(db, mid_claim, "a").attempt.attempt_id
    lifecycle.pause(db, root)
    assert children.paused_above(db.conn, mid) == root
    lifecycle.spawn(
        db, mid_claim, mid_attempt, kind="fan_out", child=st.child_workflow(),
        inputs=[{"i": i} for i in range(3)], concurrency=2, fail_fast=False, detached=False,
    )  # fmt: skip
    assert run_status(db, mid) == "waiting"
    below_mid = "SELECT COUNT(*) FROM runs WHERE parent_run_id = ?"
    assert db.conn.execute(below_mid, (mid,)).fetchone()[0] == 0, "none starts under a pause"
    assert problems(db) == []
    lifecycle.resume(db, root)
    assert lifecycle.refill(db, mid) == 2
    assert db.conn.execute(below_mid, (mid,)).fetchone()[0] == 2
    assert lifecycle.refill(db, mid) == 0, "a full join starts nothing more"
    first = db.conn.execute(
        "SELECT run_id FROM runs WHERE parent_run_id = ? ORDER BY created_at, run_id", (mid,)
    ).fetchone()[0]
    lifecycle.pause(db, root)
    _end(db, first)
    assert db.conn.execute(below_mid, (mid,)).fetchone()[0] == 2, "an end starts none either"
    assert problems(db) == []


def test_the_children_of_a_detached_parent_are_detached_too(db: Database) -> None:
    """A detached parent has no person's session to lend; its own headless agent does not
    live while it waits: each child gets a headless session of its own."""
    run_id = lifecycle.reserve(db, dataclasses.replace(new_run(), detached=True)).run_id
    claim = lifecycle.claim(db, run_id, "runner-1").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt
    lifecycle.spawn(
        db, claim, attempt.attempt_id, kind="fan_out", child=st.child_workflow(),
        inputs=[{"i": 0}, {"i": 1}], concurrency=2, fail_fast=False, detached=False,
    )  # fmt: skip
    rows = db.conn.execute(
        "SELECT run_id, execution_mode, origin_session FROM runs WHERE parent_run_id = ?",
        (run_id,),
    ).fetchall()
    assert len(rows) == 2
    assert {(mode, session) for _, mode, session in rows} == {
        ("detached", f"detached-{child}") for child, _, _ in rows
    }
    assert problems(db) == []
