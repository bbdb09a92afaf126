"""Damage checks of the state file, and salvage: what SQLite can still read of a damaged state
file, copied into a new one beside it.

``integrity`` runs SQLite's own check (``quick_check``, or ``integrity_check`` with
``full``). ``salvage`` never writes the damaged file: it copies it (with its WAL) into a
private temporary directory and reads the copy; it creates the new database with the
current schema (``database.create_file``), copies every table in creation order in batches
by rowid, and when a batch cannot be read steps past the damaged rows one at a time, so a
damaged page loses only the rows on it. Foreign keys are not enforced while copying (a row
whose parent was lost is kept, and counted); afterwards the new file's integrity, foreign
keys and ``diagnose`` are reported, so a person knows what the salvage could not restore.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pi_workflows.store.clock import Clock
from pi_workflows.store.database import create_file
from pi_workflows.store.diagnose import Problem, diagnose

BATCH: Final = 500
"""Rows copied per read while a table reads cleanly."""

MAX_REPORTED_LINES: Final = 20
"""Lines of SQLite's integrity report kept in a problem's message."""


def integrity(conn: sqlite3.Connection, *, full: bool = False) -> list[str]:
    """SQLite's verdict on the file behind ``conn``: ``[]`` when it is sound, else its
    report's lines (at most ``MAX_REPORTED_LINES``). A file too damaged to check at all
    reports the error that stopped the check."""
    pragma = "integrity_check" if full else "quick_check"
    try:
        lines = [str(row[0]) for row in conn.execute(f"PRAGMA {pragma}").fetchall()]
    except sqlite3.DatabaseError as exc:
        return [f"the check could not run: {exc}"]
    return [] if lines == ["ok"] else lines[:MAX_REPORTED_LINES]


def damage_problem(lines: list[str]) -> Problem:
    """The ``diagnose`` problem of a damaged file, with what to do next."""
    shown = "; ".join(lines[:3]) + (f" (and {len(lines) - 3} more)" if len(lines) > 3 else "")
    return Problem(
        "stateFileDamaged",
        None,
        f"SQLite reports the state file damaged: {shown}; stop the server"
        " ('pi-workflows server stop') and run 'pi-workflows state recover', which copies what"
        " can be read into a new file beside it (the damaged file is never changed)",
        False,
    )


@dataclass
class TableCopy:
    """What ``salvage`` copied of one table."""

    copied: int = 0
    # Rowids stepped past where a batch could not be read: at most this many rows were lost
    # (some of them may never have existed: rowids have gaps where rows were deleted).
    unreadable: int = 0
    failed: str | None = None  # why the table could not be read at all


@dataclass
class SalvageReport:
    """The new file and what it holds."""

    target: Path
    tables: dict[str, TableCopy] = field(default_factory=dict)
    integrity: list[str] = field(default_factory=list)  # the new file's own check ([] = ok)
    orphans: int = 0  # rows whose foreign key names a row that was lost
    problems: list[Problem] = field(default_factory=list)  # diagnose of the new file

    @property
    def lost(self) -> int:
        """At most this many rows were lost, over every table."""
        return sum(table.unreadable for table in self.tables.values())


def salvage(source: Path, target: Path, clock: Clock) -> SalvageReport:
    """Copy what can be read of the state database ``source`` into a new database at
    ``target`` (which must not exist). ``source`` is never written."""
    if target.exists():
        raise FileExistsError(f"{target} exists; choose another path")
    report = SalvageReport(target)
    with tempfile.TemporaryDirectory(prefix="pi-workflows-salvage-") as scratch:
        copy = Path(scratch) / source.name
        shutil.copy2(source, copy)
        for suffix in ("-wal",):
            with contextlib.suppress(FileNotFoundError):
                shutil.copy2(f"{source}{suffix}", f"{copy}{suffix}")
        old = sqlite3.connect(copy, isolation_level=None)
        try:
            create_file(target, clock)
            new = sqlite3.connect(target, isolation_level=None)
            try:
                _copy_all(old, new, report)
                report.integrity = integrity(new, full=True)
                report.orphans = len(new.execute("PRAGMA foreign_key_check").fetchall())
                new.row_factory = sqlite3.Row
                report.problems = diagnose(new, clock.now_ms())
            finally:
                new.close()
        finally:
            old.close()
    return report


def _copy_all(old: sqlite3.Connection, new: sqlite3.Connection, report: SalvageReport) -> None:
    tables = [
        str(row[0])
        for row in new.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " ORDER BY rowid"
        )
    ]
    # Insert triggers judge a row by rows a salvage may have lost (a pruned run's row is
    # gone by design): they are dropped while copying and restored exactly as they were.
    triggers = new.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY rowid"
    ).fetchall()
    new.execute("PRAGMA foreign_keys = OFF")
    new.execute("BEGIN IMMEDIATE")
    for name, _sql in triggers:
        new.execute(f'DROP TRIGGER "{name}"')
    new.execute("DELETE FROM schema_identity")  # the old file's rows, copied below, win
    new.execute("DELETE FROM server_state")
    for table in tables:
        report.tables[table] = _copy_table(old, new, table)
    _carry_sequences(old, new)
    for _name, sql in triggers:
        new.execute(sql)
    if not new.execute("SELECT 1 FROM server_state").fetchone():
        new.execute("INSERT INTO server_state (id, epoch) VALUES (1, 0)")
    new.execute("COMMIT")


def _carry_sequences(old: sqlite3.Connection, new: sqlite3.Connection) -> None:
    """Keep every AUTOINCREMENT counter at least where the old file had it, so an id is
    never given twice (an event id a reader, such as the OpenTelemetry exporter's cursor,
    has passed already) when the newest rows were pruned or lost. Unreadable counters are
    left to SQLite (the largest id copied, plus one)."""
    try:
        rows = old.execute("SELECT name, seq FROM sqlite_sequence").fetchall()
    except sqlite3.DatabaseError:
        return
    for name, seq in rows:
        if not isinstance(seq, int):
            continue
        found = new.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (name,)).fetchone()
        if found is None:
            new.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (name, seq))
        elif found[0] < seq:
            new.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = ?", (seq, name))


def _copy_table(old: sqlite3.Connection, new: sqlite3.Connection, table: str) -> TableCopy:
    result = TableCopy()
    try:
        columns = [str(row[1]) for row in new.execute(f'PRAGMA table_info("{table}")')]
        old_columns = {str(row[1]) for row in old.execute(f'PRAGMA table_info("{table}")')}
    except sqlite3.DatabaseError as exc:
        result.failed = str(exc)
        return result
    shared = [c for c in columns if c in old_columns]
    if not shared:
        result.failed = "the damaged file has no such table"
        return result
    names = ", ".join(f'"{c}"' for c in shared)
    insert = f'INSERT OR IGNORE INTO "{table}" ({names}) VALUES ({", ".join("?" for _ in shared)})'
    try:
        top = old.execute(f'SELECT MAX(rowid) FROM "{table}"').fetchone()[0]
    except sqlite3.DatabaseError:
        top = None  # stepping stops at the first rowid that cannot be read past
    last = 0
    while True:
        try:
            rows = old.execute(
                f'SELECT rowid, {names} FROM "{table}" WHERE rowid > ? ORDER BY rowid LIMIT ?',
                (last, BATCH),
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            found = _step_past(old, table, names, last, top)
            if found is None:
                result.failed = result.failed or f"unreadable after rowid {last}: {exc}"
                return result
            next_rowid, row = found
            result.unreadable += max(0, next_rowid - last - 1)
            new.execute(insert, row)
            result.copied += 1
            last = next_rowid
            continue
        if not rows:
            return result
        for row in rows:
            new.execute(insert, tuple(row[1:]))
        result.copied += len(rows)
        last = int(rows[-1][0])


def _step_past(
    old: sqlite3.Connection, table: str, names: str, last: int, top: int | None
) -> tuple[int, tuple[object, ...]] | None:
    """The next readable row after ``last``, found one rowid at a time (up to ``top``),
    or None when none can be read."""
    if top is None:
        return None
    rowid = last + 1
    while rowid <= top:
        try:
            row = old.execute(f'SELECT {names} FROM "{table}" WHERE rowid = ?', (rowid,)).fetchone()
        except sqlite3.DatabaseError:
            row = None
        if row is not None:
            return rowid, tuple(row)
        rowid += 1
    return None


__all__ = [
    "SalvageReport",
    "TableCopy",
    "damage_problem",
    "integrity",
    "salvage",
]
