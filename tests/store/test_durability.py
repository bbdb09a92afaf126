"""Which commits are fsynced: every one but the records of live processes and their claims."""

from __future__ import annotations

from pathlib import Path

import pytest

from pi_workflows.store import faults
from pi_workflows.store.database import PROCESS_RECORDS, Database

from support.store import open_test_db


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return open_test_db(tmp_path / "state")


def _synchronous(db: Database) -> int:
    return int(db.conn.execute("PRAGMA synchronous").fetchone()[0])


def _commit_levels(db: Database, name: str, *, fail: bool = False) -> list[str]:
    """The statements around one ``atomic(name)`` block that set the safety level."""
    seen: list[str] = []
    db.conn.set_trace_callback(seen.append)
    try:
        with db.atomic(name) as tx:
            tx.conn.execute("UPDATE server_state SET heartbeat_at = heartbeat_at WHERE id = 1")
            if fail:
                raise RuntimeError("boom")
    except RuntimeError:
        pass
    finally:
        db.conn.set_trace_callback(None)
    return [s for s in seen if s.startswith(("PRAGMA synchronous", "BEGIN", "COMMIT", "ROLL"))]


def test_process_records_are_declared_commit_points() -> None:
    """Every relaxed name is a declared transaction (so a typo cannot relax nothing)."""
    assert set(faults.declared()) >= PROCESS_RECORDS
    assert "lifecycle.finish_node" not in PROCESS_RECORDS
    assert not any(name.startswith(("command.", "runner.")) for name in PROCESS_RECORDS)


def test_a_run_transition_commits_with_full_synchronous(db: Database) -> None:
    """A durable transaction never touches the safety level, which stays FULL (2)."""
    assert _commit_levels(db, "lifecycle.finish_node") == ["BEGIN IMMEDIATE", "COMMIT"]
    assert _synchronous(db) == 2


def test_a_process_record_commits_without_fsync_and_restores_full(db: Database) -> None:
    """A process record commits under NORMAL (1) and the level is FULL again right after,
    also when the block raised."""
    expected = ["PRAGMA synchronous = NORMAL", "BEGIN IMMEDIATE"]
    assert _commit_levels(db, "runners.spawned") == [
        *expected, "COMMIT", "PRAGMA synchronous = FULL",
    ]  # fmt: skip
    assert _synchronous(db) == 2
    assert _commit_levels(db, "runners.exited", fail=True) == [
        *expected, "ROLLBACK", "PRAGMA synchronous = FULL",
    ]  # fmt: skip
    assert _synchronous(db) == 2


def test_a_process_record_inside_a_run_transition_is_as_durable_as_the_transition(
    db: Database,
) -> None:
    """Nested blocks join the outermost one, whose name alone decides the durability."""
    seen: list[str] = []
    db.conn.set_trace_callback(seen.append)
    with db.atomic("lifecycle.park"), db.atomic("runners.exited"):
        pass
    db.conn.set_trace_callback(None)
    assert [s for s in seen if s.startswith("PRAGMA")] == []
