"""Command receipts: retries adopt, changed payloads conflict, receipt and change commit as one."""

from __future__ import annotations

import pytest

from pi_workflows.store import faults, lifecycle
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.errors import InvalidTransitionError, ReceiptConflictError
from pi_workflows.store.receipts import CommandRequest, prune, run_command

from support.store import count, new_run, problems, run_status, running, snapshot


def _start(db: Database, key: str, value: int) -> tuple[str | None, bool]:
    request = CommandRequest("cli-1", key, "run.start", None, {"input": {"value": value}})

    def change() -> tuple[str | None, dict[str, object]]:
        result = lifecycle.reserve(db, new_run(value=value))
        return result.run_id, {"runId": result.run_id}

    receipt = run_command(db, request, change)
    return receipt.run_id, receipt.adopted


def test_exact_retry_adopts_the_stored_receipt(db: Database) -> None:
    """The same client, key and payload get the first receipt back and create nothing."""
    first, adopted_first = _start(db, "k1", 1)
    again, adopted_again = _start(db, "k1", 1)
    assert (adopted_first, adopted_again) == (False, True)
    assert first == again
    assert count(db, "runs") == 1


def test_changed_payload_is_a_conflict(db: Database) -> None:
    """Reusing a key with another payload raises a conflict and changes nothing."""
    _start(db, "k1", 1)
    before = snapshot(db)
    with pytest.raises(ReceiptConflictError, match="k1"):
        _start(db, "k1", 2)
    assert snapshot(db) == before


def test_fingerprint_ignores_key_order_but_not_values() -> None:
    """The fingerprint is canonical: key order does not matter, values do."""
    a = CommandRequest("c", "k", "run.start", None, {"x": 1, "y": [1, 2]})
    b = CommandRequest("c", "k", "run.start", None, {"y": [1, 2], "x": 1})
    c = CommandRequest("c", "k", "run.start", None, {"y": [2, 1], "x": 1})
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def test_no_receipt_without_its_change(db: Database) -> None:
    """A command whose change is rejected leaves no receipt, so a retry is evaluated again."""
    claim = running(db)
    request = CommandRequest("cli-1", "resume-1", "run.resume", claim.run_id, {})

    def change() -> tuple[str | None, dict[str, object]]:
        result = lifecycle.resume(db, claim.run_id)
        return claim.run_id, {"revision": result.revision}

    with pytest.raises(InvalidTransitionError):
        run_command(db, request, change)
    assert count(db, "server_commands") == 0


@pytest.mark.parametrize("phase", ["before_commit", "after_commit"])
def test_live_cancellation_and_its_receipt_commit_in_one_transaction(
    db: Database, phase: str
) -> None:
    """A crash at the commit of a live cancel leaves both the cancel and its receipt, or neither."""
    claim = running(db)
    request = CommandRequest("cli-1", "cancel-1", "run.cancel", claim.run_id, {})

    def change() -> tuple[str | None, dict[str, object]]:
        result = lifecycle.cancel(db, claim.run_id, claim=claim)
        return claim.run_id, {"revision": result.revision}

    faults.arm(f"command.run.cancel.{phase}")
    with pytest.raises(faults.InjectedFault):
        run_command(db, request, change)
    faults.disarm_all()
    committed = phase == "after_commit"
    assert count(db, "server_commands") == int(committed)
    assert run_status(db, claim.run_id) == ("cancelled" if committed else "running")
    assert problems(db) == []
    receipt = run_command(db, request, change)
    assert receipt.adopted is committed
    assert run_status(db, claim.run_id) == "cancelled"
    assert count(db, "server_commands") == 1


def test_old_receipts_of_ended_runs_are_pruned_and_live_runs_keep_theirs(
    db: Database, clock: FakeClock
) -> None:
    """Retention: an old receipt goes once its run ended; a live run's receipt never does."""
    ended, _ = _start(db, "ended", 1)
    live, _ = _start(db, "live", 2)
    assert ended is not None
    assert live is not None
    lifecycle.cancel(db, ended)
    clock.advance(31 * 86_400_000)
    _start(db, "fresh", 3)
    assert prune(db, clock.now_ms() - 30 * 86_400_000) == 1
    keys = {row[0] for row in db.conn.execute("SELECT idempotency_key FROM server_commands")}
    assert keys == {"live", "fresh"}
    # The live run's retry still adopts its receipt.
    assert _start(db, "live", 2) == (live, True)
    assert problems(db) == []
