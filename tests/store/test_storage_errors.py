"""A full database is a storage failure: the transaction rolls back whole and can be retried."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

from pi_workflows.store import lifecycle
from pi_workflows.store.database import Database, storage_failure
from pi_workflows.store.errors import StateStorageError

from support.store import count, new_run, snapshot


@pytest.mark.timeout(60)
def test_a_commit_on_a_full_database_rolls_back_whole_and_applies_once_space_is_back(
    db: Database,
) -> None:
    """Window: the database cannot grow (``max_page_count``, like a full disk) while a run is
    reserved; ``SQLITE_FULL`` is a storage failure, nothing of the run is left, and the same
    reservation succeeds once the limit is raised."""
    lifecycle.reserve(db, new_run())
    pages = int(db.conn.execute("PRAGMA page_count").fetchone()[0])
    db.conn.execute(f"PRAGMA max_page_count = {pages}")
    before = snapshot(db)
    big = new_run(value="x" * 200_000)  # needs new pages (the input is stored inline or as a blob)
    with pytest.raises(sqlite3.OperationalError) as full:
        lifecycle.reserve(db, big)
    assert full.value.sqlite_errorname == "SQLITE_FULL"
    assert storage_failure(full.value)
    assert not db.in_transaction
    assert not db.conn.in_transaction
    assert snapshot(db) == before
    db.conn.execute(f"PRAGMA max_page_count = {pages * 1000}")
    lifecycle.reserve(db, big)
    assert count(db, "runs") == 2


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
        (OSError(errno.EFBIG, "File too large"), True),
        (OSError(errno.EIO, "Input/output error"), True),
        (OSError(errno.EROFS, "Read-only file system"), True),
        (OSError(errno.ENOENT, "No such file or directory"), False),
        (PermissionError(errno.EACCES, "Permission denied"), False),
        (ValueError("not a file system error"), False),
    ],
)
def test_only_file_system_errors_are_storage_failures(error: Exception, expected: bool) -> None:
    """A full, size-limited, read-only or failing file system is a storage failure; a missing
    file, a permission or any other error is not (it is never blamed on the disk)."""
    assert storage_failure(error) is expected


@pytest.mark.timeout(60)
def test_a_storage_error_names_the_file_and_never_says_reset(tmp_path: Path) -> None:
    """The one-line message names the database and says to free space, not to move it away."""
    path = tmp_path / "state.sqlite"
    message = str(StateStorageError(path, "database or disk is full"))
    assert "\n" not in message
    assert str(path) in message
    assert "free disk space" in message
    assert "move it away" not in message
    assert StateStorageError.code == "storageError"
