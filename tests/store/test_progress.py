"""Progress values are an attempt's latest value, not history: history keeps a bounded
sample, a runner is never fenced by them, and only the attempt's live runner writes them."""

from __future__ import annotations

import pytest

import pi_workflows.server.app  # noqa: F401 - declares the runner's commit points
from pi_workflows.server.runner_messages import answer
from pi_workflows.store import history, lifecycle, progress, views
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.errors import ClaimLostError, InvalidTransitionError
from pi_workflows.store.runs import read_run
from pi_workflows.store.states import AttemptStatus, RunStatus

from support import crash_states as st

pytestmark = pytest.mark.timeout(60)


def _updates(db: Database, run_id: str) -> list[dict[str, object]]:
    with db.read() as conn:
        events = history.page(conn, run_id, limit=1000)["events"]
    return [e for e in events if e["type"] == "node.update"]


def test_a_thousand_values_keep_the_latest_and_a_bounded_sample_in_history(
    db: Database, clock: FakeClock
) -> None:
    """1,000 values, one every 100 ms (100 seconds): the run view shows the last one with
    its counts; history has the first, then one per ``SAMPLE_INTERVAL_MS``, never more than
    ``SAMPLES_PER_ATTEMPT``; each sample names its place in the sequence."""
    ctx = st.in_node(db, clock)
    sampled = []
    for done in range(1, 1001):
        if progress.record(db, ctx["claim"], ctx["attempt_id"], {"done": done}, done):
            sampled.append(done)
        clock.advance(100)
    assert sampled == [1, *range(101, 1001, 100)]  # the first, then one per 10 s
    updates = _updates(db, ctx["run_id"])
    assert len(updates) == len(sampled) <= progress.SAMPLES_PER_ATTEMPT
    assert [e["data"]["body"] for e in updates] == [{"done": n} for n in sampled]  # type: ignore[index]
    assert updates[0]["detail"] == 'progress 1: {"done":1}'
    assert {e["nodeId"] for e in updates} == {"a"}
    with db.read() as conn:
        view = views.run_view(conn, ctx["run_id"])
    latest = view["progress"]
    assert latest["value"] == {"done": 1000}
    assert latest["text"] == '{"done":1000}'
    assert (latest["nodeId"], latest["running"]) == ("a", True)
    assert (latest["updates"], latest["published"]) == (1000, 1000)
    assert latest["at"] == clock.now_ms() - 100
    (attempt,) = view["attempts"]
    assert attempt["progress"]["text"] == '{"done":1000}'


def test_history_stops_sampling_at_its_cap(db: Database, clock: FakeClock) -> None:
    """An attempt that publishes for hours adds at most ``SAMPLES_PER_ATTEMPT`` events."""
    ctx = st.in_node(db, clock)
    for done in range(progress.SAMPLES_PER_ATTEMPT * 3):
        progress.record(db, ctx["claim"], ctx["attempt_id"], done)
        clock.advance(progress.SAMPLE_INTERVAL_MS)
    assert len(_updates(db, ctx["run_id"])) == progress.SAMPLES_PER_ATTEMPT


def test_a_value_history_does_not_keep_moves_no_revision_and_none_moves_the_runners(
    db: Database, clock: FakeClock
) -> None:
    """A sampled value moves ``revision`` (its event) but never ``execution_revision``; an
    unsampled one moves neither, yet changes the progress mark viewers watch."""
    ctx = st.in_node(db, clock)
    before = read_run(db.conn, ctx["run_id"])
    assert progress.record(db, ctx["claim"], ctx["attempt_id"], "one")
    sampled = read_run(db.conn, ctx["run_id"])
    assert (sampled.revision, sampled.execution_revision) == (
        before.revision + 1,
        before.execution_revision,
    )
    with db.read() as conn:
        mark = progress.mark(conn, ctx["run_id"])
    assert not progress.record(db, ctx["claim"], ctx["attempt_id"], "two")
    after = read_run(db.conn, ctx["run_id"])
    assert (after.revision, after.execution_revision) == (
        sampled.revision,
        before.execution_revision,
    )
    with db.read() as conn:
        assert progress.mark(conn, ctx["run_id"]) > mark
        assert progress.latest(conn, ctx["run_id"])["text"] == "two"  # type: ignore[index]


def test_a_runner_fenced_before_a_thousand_values_still_commits(
    db: Database, clock: FakeClock
) -> None:
    """Through the server's handler: a runner that read its state, then delivered 1,000
    values, finishes its node at the execution revision it read before them."""
    ctx = st.runner_in_node(db, clock)
    read_at = read_run(db.conn, ctx["run_id"]).execution_revision
    for done in range(1, 1001):
        payload = {"attemptId": ctx["attempt_id"], "body": {"done": done}, "published": done}
        st.say(db, ctx, "node.update", payload, f"m-u{done}")
        clock.advance(50)
    assert read_run(db.conn, ctx["run_id"]).execution_revision == read_at
    finish = {
        "attemptId": ctx["attempt_id"],
        "outcome": "completed",
        "output": {"ok": True},
        "next": {"type": "finish", "status": "completed", "output": {"ok": True}},
    }
    reply = answer(db, ctx["runner"], st.runner_message(ctx, "node.finish", finish, "m-fin"))
    assert reply.outcome.ok, reply.error
    assert read_run(db.conn, ctx["run_id"]).status is RunStatus.COMPLETED
    assert len(_updates(db, ctx["run_id"])) == 5  # at 0, 10, 20, 30 and 40 seconds
    with db.read() as conn:
        latest = progress.latest(conn, ctx["run_id"])
    assert latest is not None
    shown = (latest["value"], latest["running"], latest["published"])
    assert shown == ({"done": 1000}, False, 1000)


def test_only_the_live_claim_of_the_attempts_run_writes_progress(
    db: Database, clock: FakeClock
) -> None:
    """An expired claim, an attempt of another run and a value over the bound are refused
    with one line, and nothing is written."""
    ctx = st.in_node(db, clock)
    other = st.in_node(db, clock)
    progress.record(db, ctx["claim"], ctx["attempt_id"], "kept")
    with pytest.raises(InvalidTransitionError, match="has no attempt"):
        progress.record(db, ctx["claim"], other["attempt_id"], "stolen")
    with pytest.raises(ValueError, match=r"is 65\d+ bytes of JSON; the limit is 65536"):
        progress.record(db, ctx["claim"], ctx["attempt_id"], "x" * progress.MAX_PROGRESS_BYTES)
    clock.advance(db.lease_ms + 1)
    with pytest.raises(ClaimLostError):
        progress.record(db, ctx["claim"], ctx["attempt_id"], "late")
    with db.read() as conn:
        assert progress.latest(conn, ctx["run_id"])["text"] == "kept"  # type: ignore[index]
        assert progress.latest(conn, other["run_id"]) is None


def test_the_session_lists_progress_of_the_node_a_run_runs_now(
    db: Database, clock: FakeClock
) -> None:
    """A session's run carries its unfinished attempt's progress; once that attempt ended
    and the next node runs, the earlier node's value is no longer on the run."""
    ctx = st.in_node(db, clock, session=st.SESSION)
    progress.record(db, ctx["claim"], ctx["attempt_id"], {"pct": 40}, 7)
    with db.read() as conn:
        (run,) = views.list_session_runs(conn, st.SESSION)
    assert run["progress"] == {
        "nodeId": "a",
        "text": '{"pct":40}',
        "at": clock.now_ms(),
        "updates": 1,
        "published": 7,
    }
    lifecycle.finish_node(
        db, ctx["claim"], ctx["attempt_id"], AttemptStatus.COMPLETED, lifecycle.GoTo("b"),
        output={"a": 1}, start_next=True,
    )  # fmt: skip
    with db.read() as conn:
        (run,) = views.list_session_runs(conn, st.SESSION)
    assert run["progress"] is None
