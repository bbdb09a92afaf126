"""A run waits on at most one open interactive request; a second one is refused clearly.

The refusal is an ``InvalidTransitionError`` naming the open request (a runner hears
``rejected`` with that line), never a constraint failure that would surface as
``internal``; the partial unique index on open requests is only the backstop.
"""

from __future__ import annotations

import sqlite3

import pytest

from pi_workflows.protocol import Outcome
from pi_workflows.server.runner_messages import answer
from pi_workflows.store import interactions, lifecycle
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.interactions import InteractionDraft
from pi_workflows.store.runs import RunRow, write_run

from support import crash_states as st
from support.store import count, snapshot

DRAFT = InteractionDraft("agent", {"prompt": "again"})


def _open(db: Database) -> int:
    return count(db, "interactive_requests", "status IN ('pending', 'validating')")


def test_opening_a_second_request_names_the_open_one(db: Database, clock: FakeClock) -> None:
    """``open_request`` for a run whose request is still open (validating) raises
    ``InvalidTransitionError`` naming that request; the transaction changes nothing."""
    x = st.validating(db, clock)
    before = snapshot(db)

    def again(tx: Transaction, run: RunRow) -> None:
        interactions.open_request(
            tx, run.run_id, x["attempt_id"], "a", DRAFT, workflow="sample", origin_session=None
        )

    with pytest.raises(InvalidTransitionError) as refused:
        write_run(
            db, x["run_id"], name="lifecycle.wait", event_type="run.waiting",
            claim=x["claim2"], apply=again,
        )  # fmt: skip
    assert refused.value.code == "invalidTransition"
    assert f"request {x['request_id']} of node a is still validating" in str(refused.value)
    assert "at most one request" in str(refused.value)
    assert snapshot(db) == before
    assert _open(db) == 1


def test_a_wait_while_the_runs_request_is_open_is_an_invalid_transition(
    db: Database, clock: FakeClock
) -> None:
    """The validation runner proposing another wait for the same attempt is refused as an
    invalid transition, and the one open request is untouched."""
    x = st.validating(db, clock)
    before = snapshot(db)
    with pytest.raises(InvalidTransitionError):
        lifecycle.wait(db, x["claim2"], x["attempt_id"], DRAFT)
    assert snapshot(db) == before
    assert _open(db) == 1


def test_a_runner_asking_for_a_second_request_is_rejected_not_internal(
    db: Database, clock: FakeClock
) -> None:
    """Through the runner channel the second ``node.wait`` is answered ``rejected`` with one
    clear line; nothing is recorded."""
    x = st.runner_validating(db, clock)
    before = snapshot(db)
    payload = {"attemptId": x["attempt_id"], "kind": "agent", "request": {"prompt": "again"}}
    reply = answer(db, x["runner"], st.runner_message(x, "node.wait", payload, "m-second"))
    assert reply.outcome is Outcome.REJECTED
    assert reply.error is not None
    assert reply.error.code != "internal"
    assert "\n" not in reply.error.message
    assert snapshot(db) == before
    assert _open(db) == 1


def test_the_unique_index_is_the_backstop_for_a_second_open_row(
    db: Database, clock: FakeClock
) -> None:
    """A raw second open row for the same run violates the partial unique index."""
    x = st.waiting(db, clock)
    with pytest.raises(sqlite3.IntegrityError):
        db.conn.execute(
            "INSERT INTO interactive_requests (request_id, run_id, attempt_id, node_id, kind,"
            " status, request_json, created_at) SELECT 'req_2', run_id, attempt_id, node_id,"
            " kind, 'pending', request_json, created_at FROM interactive_requests"
            " WHERE request_id = ?",
            (x["request_id"],),
        )
