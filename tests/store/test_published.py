"""Values a callback publishes (``ctx.publish``): the latest value of a key, bounded, kept
when the attempt fails later, written only under the attempt's live claim, and never moving
the revision a runner is fenced by."""

from __future__ import annotations

import pytest

import pi_workflows.server.app  # noqa: F401 - declares the runner's commit points
from pi_workflows.protocol import Outcome
from pi_workflows.server.runner_messages import answer
from pi_workflows.store import history, lifecycle, published, views
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.errors import (
    ClaimLostError,
    InvalidTransitionError,
    PublishRefusedError,
    RunNotFoundError,
)
from pi_workflows.store.runs import read_run
from pi_workflows.store.states import AttemptStatus, RunStatus

from support import crash_states as st
from support.store import snapshot

pytestmark = pytest.mark.timeout(60)


def test_a_key_keeps_its_latest_value_and_counts_its_versions(
    db: Database, clock: FakeClock
) -> None:
    """Two publishes of one key: the read gives the second with version 2, the run view
    lists the key once, history has one ``value.published`` event each (without the
    value), and the execution revision a runner is fenced by did not move."""
    ctx = st.in_node(db, clock)
    before = read_run(db.conn, ctx["run_id"])
    published.publish(db, ctx["claim"], ctx["attempt_id"], "status", {"phase": 1})
    clock.advance(10)
    kept = published.publish(db, ctx["claim"], ctx["attempt_id"], "status", {"phase": 2})
    assert (kept.version, kept.node_id) == (2, "a")
    after = read_run(db.conn, ctx["run_id"])
    assert after.revision == before.revision + 2
    assert after.execution_revision == before.execution_revision
    with db.read() as conn:
        found = published.read(conn, ctx["run_id"], "status")
        assert published.read(conn, ctx["run_id"], "other") is None
        view = views.run_view(conn, ctx["run_id"])
        events = history.page(conn, ctx["run_id"], limit=100)["events"]
    assert found is not None
    assert (found.value, found.version, found.attempt_id) == ({"phase": 2}, 2, ctx["attempt_id"])
    assert found.published_at == clock.now_ms()
    assert view["published"] == [
        {"key": "status", "version": 2, "nodeId": "a", "publishedAt": clock.now_ms()}
    ]
    shown = [e for e in events if e["type"] == "value.published"]
    assert [e["detail"] for e in shown] == ["published 'status' (11 bytes)"] * 2
    assert all("phase" not in str(e["data"]) for e in shown)


def test_a_value_stays_when_its_attempt_fails(db: Database, clock: FakeClock) -> None:
    """An attempt publishes, then fails and the run ends failed: the value is still there,
    as a settled effect would be (a reader may already have acted on it)."""
    ctx = st.in_node(db, clock)
    published.publish(db, ctx["claim"], ctx["attempt_id"], "half", [1, 2])
    lifecycle.finish_node(
        db, ctx["claim"], ctx["attempt_id"], AttemptStatus.FAILED,
        lifecycle.Finish(RunStatus.FAILED, None, "boom"), error="boom",
    )  # fmt: skip
    assert read_run(db.conn, ctx["run_id"]).status is RunStatus.FAILED
    with db.read() as conn:
        found = published.read(conn, ctx["run_id"], "half")
    assert found is not None
    assert found.value == [1, 2]


def test_only_the_live_claim_of_the_running_attempt_publishes(
    db: Database, clock: FakeClock
) -> None:
    """An attempt of another run, a finished attempt and an expired claim are refused, and
    nothing is written: a stale runner never publishes."""
    ctx = st.in_node(db, clock)
    other = st.in_node(db, clock)
    with pytest.raises(InvalidTransitionError, match="is not its running attempt"):
        published.publish(db, ctx["claim"], other["attempt_id"], "k", 1)
    clock.advance(db.lease_ms + 1)
    rows = snapshot(db)
    with pytest.raises(ClaimLostError):
        published.publish(db, ctx["claim"], ctx["attempt_id"], "k", 1)
    assert snapshot(db) == rows
    with db.read() as conn, pytest.raises(RunNotFoundError):
        published.read(conn, "run_missing", "k")


def test_every_bound_is_refused_with_one_line_and_changes_nothing(
    db: Database, clock: FakeClock
) -> None:
    """A malformed key, an over-large value, the key after ``MAX_KEYS`` and the publish
    after ``MAX_PUBLISHES`` are each refused with one line naming the bound; a key already
    kept may still be published again until the publish bound."""
    ctx = st.in_node(db, clock)
    claim, attempt = ctx["claim"], ctx["attempt_id"]
    with pytest.raises(PublishRefusedError, match="key '1x' is malformed"):
        published.publish(db, claim, attempt, "1x", 1)
    with pytest.raises(PublishRefusedError, match=r"is 65\d+ bytes of JSON; the limit is 65536"):
        published.publish(db, claim, attempt, "big", "x" * published.MAX_VALUE_BYTES)
    for n in range(published.MAX_KEYS):
        published.publish(db, claim, attempt, f"k{n}", n)
    rows = snapshot(db)
    with pytest.raises(PublishRefusedError, match="already published 100 keys, the limit"):
        published.publish(db, claim, attempt, "one-more", 1)
    assert snapshot(db) == rows
    for n in range(published.MAX_PUBLISHES - published.MAX_KEYS):
        published.publish(db, claim, attempt, "k0", n)
    with pytest.raises(PublishRefusedError, match="already published 1000 values, the limit"):
        published.publish(db, claim, attempt, "k0", "last")


def test_the_runner_handler_refuses_a_stale_runner_and_answers_a_bound_as_rejected(
    db: Database, clock: FakeClock
) -> None:
    """Through the server's handler: a publish is accepted with its version; a refused one
    is ``rejected`` with code ``publishRefused`` (the runner goes on); after the claim
    expired the same runner is answered ``claimLost`` and nothing is kept."""
    ctx = st.runner_in_node(db, clock)
    payload = {"attemptId": ctx["attempt_id"], "key": "url", "value": "https://x"}
    reply = answer(db, ctx["runner"], st.runner_message(ctx, "value.publish", payload, "m-1"))
    assert reply.outcome is Outcome.ACCEPTED
    assert reply.payload == {"key": "url", "version": 1}
    bad = {**payload, "key": "no spaces"}
    reply = answer(db, ctx["runner"], st.runner_message(ctx, "value.publish", bad, "m-2"))
    assert reply.outcome is Outcome.REJECTED
    assert reply.error is not None
    assert reply.error.code == "publishRefused"
    clock.advance(db.lease_ms + 1)
    late = {**payload, "value": "late"}
    reply = answer(db, ctx["runner"], st.runner_message(ctx, "value.publish", late, "m-3"))
    assert reply.outcome is Outcome.CLAIM_LOST
    with db.read() as conn:
        found = published.read(conn, ctx["run_id"], "url")
    assert found is not None
    assert (found.value, found.version) == ("https://x", 1)
