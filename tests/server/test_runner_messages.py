"""Runner messages are fenced: stale generations and epochs get claimLost; resends replay.
A proposal ``in_place`` calls in place (it wakes no scheduler tick) changes nothing the
scheduler reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pi_workflows.protocol import RUNNER_SCHEMA, Outcome, RunnerMessage
from pi_workflows.server.runner_messages import RunnerIdentity, answer, in_place
from pi_workflows.store import delivery, interactions, lifecycle, runners, takeover, waits
from pi_workflows.store.database import Database

from support.store import chain_run, new_run, open_test_db


def _message(
    identity: RunnerIdentity, message_id: str, kind: str, **changes: object
) -> RunnerMessage:
    fields: dict[str, object] = {
        "schema": RUNNER_SCHEMA,
        "run_id": identity.run_id,
        "generation": identity.claim.generation,
        "runner_epoch": identity.runner_epoch,
        "message_id": message_id,
        "kind": kind,
        "payload": {"nodeId": "a"},
        **changes,
    }
    return RunnerMessage(**fields)  # type: ignore[arg-type]


def _launch(db: Database, server_epoch: int = 1, run: Any = None) -> RunnerIdentity:
    run_id = lifecycle.reserve(db, run or new_run()).run_id
    launch = runners.launch(db, run_id, server_epoch, lambda tx, epoch, gen: {"runId": run_id})
    return RunnerIdentity(run_id, launch.runner_epoch, launch.claim)


def test_stale_generation_and_epoch_get_claim_lost_and_change_nothing(tmp_path: Path) -> None:
    """A message from an older generation or another runner epoch is answered claimLost."""
    db = open_test_db(tmp_path / "state")
    identity = _launch(db)
    revision = db.conn.execute("SELECT revision FROM runs").fetchone()[0]
    stale_generation = _message(
        identity, "m1", "node.start", generation=identity.claim.generation - 1
    )
    other_epoch = _message(identity, "m2", "node.start", runner_epoch=identity.runner_epoch + 7)
    for message in (stale_generation, other_epoch):
        reply = answer(db, identity, message)
        assert reply.outcome is Outcome.CLAIM_LOST
    assert db.conn.execute("SELECT revision FROM runs").fetchone()[0] == revision
    db.close()


def test_a_resent_message_replays_its_stored_reply(tmp_path: Path) -> None:
    """The same message id twice commits once and answers the same reply."""
    db = open_test_db(tmp_path / "state")
    identity = _launch(db)
    first = answer(db, identity, _message(identity, "m1", "node.start"))
    again = answer(db, identity, _message(identity, "m1", "node.start"))
    assert first.outcome is Outcome.ACCEPTED
    assert (again.outcome, again.revision, again.payload) == (
        first.outcome,
        first.revision,
        first.payload,
    )
    assert db.conn.execute("SELECT COUNT(*) FROM node_attempts").fetchone()[0] == 1
    db.close()


def test_a_runner_of_a_dead_server_epoch_is_fenced_after_takeover(tmp_path: Path) -> None:
    """After a newer server recovers the run, the old runner's claim cannot write."""
    db = open_test_db(tmp_path / "state")
    identity = _launch(db, server_epoch=1)
    assert takeover.release_claims_of_dead_servers(db, 2) == [identity.run_id]
    takeover.recover_all_expired(db)
    reply = answer(db, identity, _message(identity, "m1", "node.start"))
    assert reply.outcome is Outcome.CLAIM_LOST
    db.close()


def test_a_runner_reads_only_its_own_runs_joins(tmp_path: Path) -> None:
    """``join.results`` of another run's join is refused (rejected), its own is answered."""
    from pi_workflows.store.clock import FakeClock

    from support import crash_states as st

    db = open_test_db(tmp_path / "state", FakeClock())
    other = st.joining(db, db.clock)  # type: ignore[arg-type]
    (wait_id,) = db.conn.execute("SELECT wait_id FROM run_joins").fetchone()
    identity = _launch(db)
    payload = {"waitId": wait_id, "after": 0, "limit": 10}
    refused = answer(db, identity, _message(identity, "m1", "join.results", payload=payload))
    assert refused.outcome is Outcome.REJECTED
    assert refused.error is not None
    assert f"no join of run {identity.run_id}" in refused.error.message
    own = RunnerIdentity(other["run_id"], identity.runner_epoch, other["claim"])
    page = answer(db, own, _message(own, "m2", "join.results", payload=payload))
    assert page.outcome is Outcome.ACCEPTED
    assert [item["item"] for item in (page.payload or {})["items"]] == [0, 1, 2]
    db.close()


def _scheduler_inputs(db: Database) -> dict[str, object]:
    """Everything a scheduler tick reads to decide what to do: the queue, run statuses,
    durable waits, presentations due again, request deadlines, joins and child runs."""
    conn = db.conn
    return {
        "queue": conn.execute("SELECT * FROM run_queue ORDER BY run_id").fetchall(),
        "runs": conn.execute("SELECT run_id, status FROM runs ORDER BY run_id").fetchall(),
        "waits": conn.execute("SELECT * FROM run_waits ORDER BY wait_id").fetchall(),
        "nextWait": waits.next_due(conn),
        "nextPresentation": delivery.next_due(conn),
        "nextDeadline": interactions.next_deadline(conn),
        "requests": conn.execute(
            "SELECT request_id, status FROM interactive_requests ORDER BY request_id"
        ).fetchall(),
        "joins": conn.execute("SELECT * FROM run_joins ORDER BY wait_id").fetchall(),
    }


def test_an_in_place_proposal_changes_nothing_the_scheduler_reads(tmp_path: Path) -> None:
    """A node started, its progress, its logs and a node finished with the next one started
    are accepted ``in_place`` (the supervisor then wakes no scheduler tick) and leave every
    scheduler input as it was; a node finished with a message for the session, and a node
    that waits for an answer, are not in place, and the second changes those inputs."""
    db = open_test_db(tmp_path / "state")
    run = chain_run(kinds={"a": "compute", "b": "compute", "c": "compute"}, effect_on=None)
    identity = _launch(db, run=run)
    before = _scheduler_inputs(db)

    def send(message_id: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        message = _message(identity, message_id, kind, payload=payload)
        reply = answer(db, identity, message)
        assert reply.outcome is Outcome.ACCEPTED, reply.error
        assert in_place(message, reply), kind
        assert _scheduler_inputs(db) == before, kind
        return reply.payload or {}

    first = send("m1", "node.start", {"nodeId": "a", "timeoutMs": 60_000})["attemptId"]
    send("m2", "node.update", {"attemptId": first, "body": {"done": 1}})
    send("m3", "node.logs", {"attemptId": first, "text": "working\n", "bytes": 8})
    finish = {"attemptId": first, "outcome": "completed", "output": {"n": 1}}
    goto = {"type": "goto", "nodeId": "b"}
    second = send("m4", "node.finish", {**finish, "next": goto, "startNext": True})
    second_id = second["nextAttempt"]["attemptId"]

    with_note = _message(
        identity,
        "m5",
        "node.finish",
        payload={
            "attemptId": second_id, "outcome": "completed", "output": {"n": 2},
            "next": {"type": "goto", "nodeId": "c"}, "startNext": True,
            "message": {"kind": "progress", "body": "half way"},
        },
    )  # fmt: skip
    reply = answer(db, identity, with_note)
    assert reply.outcome is Outcome.ACCEPTED, reply.error
    assert not in_place(with_note, reply)  # a message for the session: the scheduler looks

    third_id = (reply.payload or {})["nextAttempt"]["attemptId"]
    wait = _message(
        identity,
        "m6",
        "node.wait",
        payload={"attemptId": third_id, "kind": "checkpoint", "request": {"q": 1}},
    )
    reply = answer(db, identity, wait)
    assert reply.outcome is Outcome.ACCEPTED, reply.error
    assert not in_place(wait, reply)
    assert _scheduler_inputs(db) != before
    db.close()


def test_a_refused_proposal_is_never_in_place(tmp_path: Path) -> None:
    """A proposal of an in-place kind that is not accepted (a stale generation) wakes the
    scheduler as before: ``in_place`` is about accepted replies only."""
    db = open_test_db(tmp_path / "state")
    identity = _launch(db)
    stale = _message(identity, "m1", "node.start", generation=identity.claim.generation - 1)
    reply = answer(db, identity, stale)
    assert reply.outcome is Outcome.CLAIM_LOST
    assert not in_place(stale, reply)
    db.close()
