"""Opening the state database: creation, permissions, pragmas and the identity check."""

from __future__ import annotations

import hashlib
import sqlite3
import stat
from pathlib import Path

import pytest

from pi_workflows.store.database import ddl_digest, open_database
from pi_workflows.store.errors import StateIdentityError
from pi_workflows.store.paths import database_path, state_home

from support.store import open_test_db


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_new_database_is_private_and_durable(home: Path) -> None:
    """A new state directory is 0700, its files 0600, with WAL, synchronous=FULL and FKs."""
    db = open_test_db(home)
    try:
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        db.conn.execute("SELECT 1").fetchone()
        for suffix in ("", "-wal", "-shm"):
            path = Path(f"{db.path}{suffix}")
            assert path.exists(), path
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert db.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert db.conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0
        assert not [p.name for p in home.iterdir() if p.name.startswith(".")]
    finally:
        db.close()


def test_every_table_is_strict(home: Path) -> None:
    """Every table of the schema is declared STRICT."""
    db = open_test_db(home)
    try:
        rows = db.conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        assert len(rows) >= 20
        assert [name for name, sql in rows if not sql.rstrip().endswith("STRICT")] == []
    finally:
        db.close()


def test_reopening_keeps_identity_and_data(home: Path) -> None:
    """A database reopens by the same build and keeps its rows."""
    db = open_test_db(home)
    db.conn.execute("UPDATE server_state SET epoch = 7")
    db.close()
    again = open_test_db(home)
    try:
        assert again.conn.execute("SELECT epoch FROM server_state").fetchone()[0] == 7
        row = again.conn.execute("SELECT ddl_digest FROM schema_identity").fetchone()
        assert row[0] == ddl_digest()
    finally:
        again.close()


def _assert_refused_untouched(home: Path, expected: str) -> None:
    path = database_path(home)
    before = _digest(path)
    with pytest.raises(StateIdentityError) as caught:
        open_database(home)
    message = str(caught.value)
    assert expected in message
    assert "Back it up and move it away together with its -wal and -shm files" in message
    assert "\n" not in message
    assert _digest(path) == before


def test_other_ddl_digest_is_refused_and_left_untouched(home: Path) -> None:
    """A database made from another text of the schema is refused, its bytes unchanged."""
    open_test_db(home).close()
    path = database_path(home)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_identity SET ddl_digest = 'f00d'")
    conn.commit()
    conn.close()
    _assert_refused_untouched(home, "another build of the pi-workflows schema")


def test_foreign_sqlite_file_is_refused_and_left_untouched(home: Path) -> None:
    """A SQLite database pi-workflows did not create is refused and not modified."""
    home.mkdir(mode=0o700)
    conn = sqlite3.connect(database_path(home))
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.commit()
    conn.close()
    _assert_refused_untouched(home, "did not create")


def test_non_sqlite_file_is_refused_and_left_untouched(home: Path) -> None:
    """A file that is not SQLite at all is refused and not modified."""
    home.mkdir(mode=0o700)
    database_path(home).write_bytes(b"these are not the bytes you are looking for\n" * 10)
    _assert_refused_untouched(home, "is not a SQLite database")


def test_other_schema_version_is_refused(home: Path) -> None:
    """A pi-workflows database of another schema version is refused and not modified."""
    open_test_db(home).close()
    conn = sqlite3.connect(database_path(home))
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    _assert_refused_untouched(home, "schema version 2")


def test_state_home_prefers_the_environment() -> None:
    """PI_WORKFLOWS_HOME wins, then XDG_STATE_HOME, then ~/.local/state."""
    assert state_home({"PI_WORKFLOWS_HOME": "/x/y"}) == Path("/x/y")
    assert state_home({"XDG_STATE_HOME": "/s"}) == Path("/s/pi-workflows")
    assert state_home({}) == Path.home() / ".local" / "state" / "pi-workflows"
