"""Runner messages are fenced: stale generations and epochs get claimLost; resends replay."""

from __future__ import annotations

from pathlib import Path

from pi_workflows.protocol import RUNNER_SCHEMA, Outcome, RunnerMessage
from pi_workflows.server.runner_messages import RunnerIdentity, answer
from pi_workflows.store import lifecycle, runners, takeover
from pi_workflows.store.database import Database

from support.store import new_run, open_test_db


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


def _launch(db: Database, server_epoch: int = 1) -> RunnerIdentity:
    run_id = lifecycle.reserve(db, new_run()).run_id
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
