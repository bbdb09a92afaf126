"""Salvage copies what SQLite can read of a state file into a new one: a sound file whole,
row for row; a file with one damaged leaf page without the rows on that page only. The
source file is never written."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from pi_workflows.store import attempt_logs, lifecycle
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.lifecycle import Finish
from pi_workflows.store.salvage import integrity, salvage
from pi_workflows.store.states import AttemptStatus, RunStatus

from support.store import new_run, open_test_db

pytestmark = pytest.mark.timeout(60)

RUNS = 60
LOG = "line of output {n:04d} " * 40  # ~1 KiB a run: a few runs per page of attempt_logs


def _ended_run(db: Database, n: int) -> str:
    claim = lifecycle.claim(db, lifecycle.reserve(db, new_run(value=n)).run_id, f"r{n}").claim
    attempt = lifecycle.start_node(db, claim, "a").attempt
    text = f"MARK-{n:04d}|" + LOG.format(n=n)
    attempt_logs.record(db, claim, attempt.attempt_id, text, len(text), None)
    output = {"n": n}
    lifecycle.finish_node(
        db,
        claim,
        attempt.attempt_id,
        AttemptStatus.COMPLETED,
        Finish(RunStatus.COMPLETED, output),
        output=output,
    )
    return claim.run_id


def _state_file(tmp_path: Path) -> Path:
    """A closed state file (checkpointed, no WAL left) holding ``RUNS`` ended runs."""
    db = open_test_db(tmp_path / "state", FakeClock())
    for n in range(RUNS):
        _ended_run(db, n)
    db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return tmp_path / "state" / "state.sqlite"


def _rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [
            str(row[0])
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {
            table: sorted(conn.execute(f'SELECT * FROM "{table}"').fetchall(), key=repr)
            for table in tables
        }
    finally:
        conn.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_sound_file_is_copied_row_for_row(tmp_path: Path) -> None:
    source = _state_file(tmp_path)
    before = _digest(source)
    report = salvage(source, tmp_path / "new.sqlite", FakeClock())
    assert _digest(source) == before
    assert report.integrity == []
    assert report.lost == 0
    assert report.orphans == 0
    assert report.problems == []
    assert all(t.failed is None for t in report.tables.values())
    assert _rows(tmp_path / "new.sqlite") == _rows(source)
    assert report.tables["runs"].copied == RUNS


def test_a_damaged_leaf_page_loses_only_its_rows(tmp_path: Path) -> None:
    source = _state_file(tmp_path)
    data = bytearray(source.read_bytes())
    page_size = int.from_bytes(data[16:18], "big") or 65536
    marker = b"MARK-0030|"
    at = data.find(marker)
    assert at > 0
    page = at // page_size
    data[page * page_size : (page + 1) * page_size] = b"\xa5" * page_size
    source.write_bytes(bytes(data))
    conn = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        assert integrity(conn, full=True) != []
    finally:
        conn.close()
    before = _digest(source)

    report = salvage(source, tmp_path / "new.sqlite", FakeClock())

    assert _digest(source) == before, "the damaged file is never written"
    logs = report.tables["attempt_logs"]
    assert logs.failed is None
    assert 0 < logs.unreadable < RUNS // 2
    assert logs.copied + logs.unreadable >= RUNS - 1
    kept = {str(row[2])[:10] for row in _rows(tmp_path / "new.sqlite")["attempt_logs"]}
    assert marker.decode() not in kept
    assert "MARK-0000|" in kept
    assert f"MARK-{RUNS - 1:04d}|" in kept
    assert report.tables["runs"].copied == RUNS  # the other tables are whole
    assert report.tables["node_attempts"].copied == RUNS
    assert report.integrity == []  # the new file itself is sound


def test_id_counters_never_go_back(tmp_path: Path) -> None:
    """The newest events are gone (pruned with their run, or on a damaged page): the new
    file's event counter stays where the old one was, so no event id is given twice."""
    source = _state_file(tmp_path)
    conn = sqlite3.connect(source)
    try:
        (top,) = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("DROP TRIGGER events_are_immutable_delete")  # the rows are simply gone
        conn.execute("DELETE FROM events WHERE event_id > ?", (top - 5,))
        conn.commit()
    finally:
        conn.close()
    salvage(source, tmp_path / "new.sqlite", FakeClock())
    new = sqlite3.connect(tmp_path / "new.sqlite")
    try:
        (seq,) = new.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        (largest,) = new.execute("SELECT MAX(event_id) FROM events").fetchone()
    finally:
        new.close()
    assert (seq, largest) == (top, top - 5)
