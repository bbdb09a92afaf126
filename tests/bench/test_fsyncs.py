"""The bench's WAL commit count (``bench.fsyncs.read_wal``), with real SQLite as the oracle."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bench.fsyncs import pinned_reader, read_wal


def _database(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE t (v TEXT)")
    return conn


def _commit(conn: sqlite3.Connection, rows: int = 1) -> None:
    conn.execute("BEGIN IMMEDIATE")
    for _ in range(rows):
        conn.execute("INSERT INTO t VALUES (?)", ("x" * 300,))
    conn.execute("COMMIT")


def test_read_wal_counts_each_commit_once_whatever_its_size(tmp_path: Path) -> None:
    """Each committed transaction, of one page or many, adds exactly one commit frame."""
    conn = _database(tmp_path / "db.sqlite")
    wal = tmp_path / "db.sqlite-wal"
    before = read_wal(wal)
    for rows in (1, 1, 50, 1, 200):
        _commit(conn, rows)
    after = read_wal(wal)
    conn.close()
    assert before.salts == after.salts
    assert after.commits - before.commits == 5
    assert after.frames - before.frames > 5


def test_read_wal_ignores_a_rolled_back_transaction(tmp_path: Path) -> None:
    """A transaction that rolled back adds no commit, even when its pages reached the log."""
    conn = _database(tmp_path / "db.sqlite")
    conn.execute("PRAGMA cache_size = 1")  # spill the big transaction's pages into the WAL
    wal = tmp_path / "db.sqlite-wal"
    _commit(conn)
    before = read_wal(wal)
    conn.execute("BEGIN IMMEDIATE")
    for _ in range(500):
        conn.execute("INSERT INTO t VALUES (?)", ("y" * 300,))
    conn.execute("ROLLBACK")
    _commit(conn)
    after = read_wal(wal)
    conn.close()
    assert after.commits - before.commits == 1


def test_a_pinned_reader_keeps_the_wal_from_restarting(tmp_path: Path) -> None:
    """While the bench's read transaction is held, a full checkpoint cannot make the next
    writer restart the log, so the count between two reads stays whole; without it the
    salts change (a restart), which the bench detects."""
    database = tmp_path / "db.sqlite"
    conn = _database(database)
    wal = tmp_path / "db.sqlite-wal"
    _commit(conn)
    with pinned_reader(database):
        before = read_wal(wal)
        _commit(conn)
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        _commit(conn)
        after = read_wal(wal)
    assert before.salts == after.salts
    assert after.commits - before.commits == 2

    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    _commit(conn)
    restarted = read_wal(wal)
    conn.close()
    assert restarted.salts != after.salts
    assert restarted.commits == 1


def test_read_wal_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    """No ``-wal`` file reads as no log at all."""
    found = read_wal(tmp_path / "absent.sqlite-wal")
    assert (found.salts, found.commits, found.frames) == (None, 0, 0)
