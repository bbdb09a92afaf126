"""Opening the state database: creation, identity check, pragmas, and transactions.

Owns the one ``Database`` handle the server keeps and its ``atomic()`` transaction helper.
It never changes a file it did not create or verify: a foreign, damaged or other-schema
file is refused before any write, and left byte-for-byte untouched.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from pi_workflows.store import faults
from pi_workflows.store.clock import Clock, SystemClock
from pi_workflows.store.errors import StateIdentityError, StateStorageError
from pi_workflows.store.paths import database_path, ensure_private_dir

SCHEMA_NAME = "pi-workflows.state"
SCHEMA_VERSION = 1
# PRAGMA application_id: "PiWF". Lets the header check recognise our files.
APPLICATION_ID = 0x50695746
SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 5_000

PROCESS_RECORDS = frozenset(
    {
        "runners.launch",
        "runners.spawned",
        "runners.ready",
        "runners.exited",
        "agents.started",
        "agents.ended",
        "claims.renew",
    }
)
"""Transactions that record live processes and their claims, committed without an fsync.

Every other transaction commits with ``synchronous=FULL``: its commit survives a power loss
before it is acknowledged. These are committed with ``synchronous=NORMAL``, which in WAL
mode still survives the crash or kill of any process (the frames are in the operating
system's cache when ``COMMIT`` returns) and keeps commit order: a later FULL commit makes
them durable with it. What only a power loss or an OS crash can take back is facts about
processes and claims that the same loss ended anyway: no runner, shell or agent outlives a
reboot, a lost launch or renewal leaves the run at its last durable boundary (queued, or
running with an older claim that recovery releases), and a lost exit record is what an
orphaned runner looks like to the next server. Each of these saves an fsync that would
otherwise hold the server's loop at every runner start and exit. ``runners.launch`` holds
the run's claim transition (queued to running, a new generation and its event), which a power
loss can therefore take back too: the run is then queued again at its old revision, and the
revision, generation and event id are used again for what happens next. A shell command's
process group is recorded inside its runner's ``runner.process.register`` (and its end in
``runner.process.ended``), which are runner proposals and always fsynced.
"""
DEFAULT_LEASE_MS = 30_000
# OS errors that mean the file system, not the file, is at fault (full, too big, broken).
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS})


def storage_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk is full, a file-size limit was hit or I/O failed."""
    if isinstance(exc, sqlite3.Error):
        name = str(getattr(exc, "sqlite_errorname", ""))
        return name == "SQLITE_FULL" or name.startswith("SQLITE_IOERR")
    return isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS


@contextlib.contextmanager
def _storage_errors(path: Path) -> Iterator[None]:
    """Turn a file-system failure of the block into ``StateStorageError`` (other errors pass)."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        if storage_failure(exc):
            raise StateStorageError(path, str(exc)) from None
        raise


def schema_sql() -> str:
    """Return the text of the one DDL file."""
    return resources.files("pi_workflows.store").joinpath("schema.sql").read_text("utf-8")


def ddl_digest() -> str:
    """The sha256 of the DDL file bytes: the schema's identity."""
    data = resources.files("pi_workflows.store").joinpath("schema.sql").read_bytes()
    return hashlib.sha256(data).hexdigest()


@dataclass
class Transaction:
    """An open ``BEGIN IMMEDIATE`` transaction and the time it started (after the lock)."""

    conn: sqlite3.Connection
    now: int
    name: str
    after_commit: list[str] = field(default_factory=list)


class Database:
    """The server's handle on the state database. Not thread-safe; one writer at a time.

    ``lease_ms`` is how long a claim lives after each renewal.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: Path,
        clock: Clock,
        lease_ms: int = DEFAULT_LEASE_MS,
    ) -> None:
        self.conn = conn
        self.path = path
        self.clock = clock
        self.lease_ms = lease_ms
        self._tx: Transaction | None = None

    def __repr__(self) -> str:
        return f"Database({str(self.path)!r})"

    def close(self) -> None:
        """Close the connection (a clean close checkpoints the WAL)."""
        self.conn.close()

    @property
    def in_transaction(self) -> bool:
        """True while an ``atomic()`` block is open."""
        return self._tx is not None

    @contextlib.contextmanager
    def atomic(self, name: str) -> Iterator[Transaction]:
        """Run the block in one ``BEGIN IMMEDIATE`` transaction named ``name``.

        Nested calls join the outer transaction: the outermost block commits, and an
        exception anywhere rolls back everything. The original exception always propagates;
        a failing rollback never masks it. Fault points ``NAME.before_commit`` and
        ``NAME.after_commit`` surround the commit of the outermost block, whose ``name``
        must be declared in ``faults`` (``ValueError`` otherwise, before anything starts).
        The outermost name also decides the commit's durability: ``PROCESS_RECORDS`` commit
        without an fsync, everything else with one.
        """
        if self._tx is not None:
            yield self._tx
            return
        faults.check_declared(name)
        relaxed = name in PROCESS_RECORDS
        if relaxed:
            self.conn.execute("PRAGMA synchronous = NORMAL")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            tx = Transaction(conn=self.conn, now=self.clock.now_ms(), name=name)
            self._tx = tx
            try:
                yield tx
                faults.hit(f"{name}.before_commit")
                self.conn.execute("COMMIT")
            except BaseException:
                self._tx = None
                with contextlib.suppress(sqlite3.Error):
                    self.conn.execute("ROLLBACK")
                raise
            self._tx = None
        except BaseException:
            if relaxed:  # restore durability, but never mask the original exception
                with contextlib.suppress(sqlite3.Error):
                    self.conn.execute("PRAGMA synchronous = FULL")
            raise
        if relaxed:
            self.conn.execute("PRAGMA synchronous = FULL")
        faults.hit(f"{name}.after_commit")

    def reader(self) -> sqlite3.Connection:
        """A new read-only connection to the same file, for long reads in a worker thread.

        The server's own connection is not thread-safe and serves the event loop; a reader
        sees a consistent snapshot inside ``BEGIN ... COMMIT`` (WAL lets it read while the
        loop writes). The caller closes it.
        """
        conn = sqlite3.connect(
            f"{self.path.as_uri()}?mode=ro", uri=True, isolation_level=None,
            check_same_thread=False,
        )  # fmt: skip
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return conn

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent read snapshot (a deferred transaction) for multi-statement reads."""
        if self._tx is not None:
            yield self.conn
            return
        self.conn.execute("BEGIN")
        try:
            yield self.conn
        finally:
            self.conn.execute("COMMIT")


def _configure(conn: sqlite3.Connection) -> None:
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA synchronous = FULL")
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise sqlite3.OperationalError(f"could not enable WAL journal mode (got {mode})")


def create_file(path: Path, clock: Clock) -> None:
    """Create a complete new database next to ``path`` and move it into place atomically.

    A crash during creation leaves only a temporary file, never a half-made database.
    If another process created ``path`` meanwhile, its file wins and ours is discarded.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            Path(f"{tmp}{suffix}").unlink()
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("BEGIN IMMEDIATE")
        for statement in _statements(schema_sql()):
            conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute(
            "INSERT INTO schema_identity (id, schema_name, schema_version, ddl_digest, created_at)"
            " VALUES (1, ?, ?, ?, ?)",
            (SCHEMA_NAME, SCHEMA_VERSION, ddl_digest(), clock.now_ms()),
        )
        conn.execute("INSERT INTO server_state (id, epoch) VALUES (1, 0)")
        conn.execute("COMMIT")
    finally:
        conn.close()
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _statements(sql: str) -> list[str]:
    """Split the DDL into complete statements (triggers contain inner semicolons)."""
    statements: list[str] = []
    buffer = ""
    for line in sql.splitlines(keepends=True):
        if not buffer and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        raise ValueError("schema.sql ends with an incomplete statement")
    return statements


def _check_header(path: Path) -> None:
    """Check the file header without opening it with SQLite."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
    except IsADirectoryError:
        raise StateIdentityError(path, "is a directory, not a state database") from None
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        raise StateIdentityError(path, "is not a SQLite database")
    user_version = int.from_bytes(header[60:64], "big")
    application_id = int.from_bytes(header[68:72], "big")
    if application_id != APPLICATION_ID:
        raise StateIdentityError(path, "is a SQLite database that pi-workflows did not create")
    if user_version != SCHEMA_VERSION:
        raise StateIdentityError(
            path,
            f"has pi-workflows schema version {user_version}; this version needs {SCHEMA_VERSION}",
        )


def _check_identity(path: Path) -> None:
    """Read the stored identity through a read-only connection (which never writes)."""
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        if storage_failure(exc):
            raise StateStorageError(path, str(exc)) from None
        raise StateIdentityError(path, f"cannot be opened ({exc})") from None
    try:
        row = conn.execute(
            "SELECT schema_name, schema_version, ddl_digest FROM schema_identity WHERE id = 1"
        ).fetchone()
    except sqlite3.DatabaseError as exc:
        if storage_failure(exc):  # a full disk is no reason to reset the state
            raise StateStorageError(path, str(exc)) from None
        raise StateIdentityError(path, f"has no readable schema identity ({exc})") from None
    finally:
        conn.close()
    if row is None:
        raise StateIdentityError(path, "has no schema identity row")
    name, version, digest = row
    if name != SCHEMA_NAME or version != SCHEMA_VERSION:
        raise StateIdentityError(path, f"has schema {name} version {version}")
    if digest != ddl_digest():
        raise StateIdentityError(
            path,
            f"was created by another build of the pi-workflows schema (DDL digest "
            f"{str(digest)[:12]}, this build needs {ddl_digest()[:12]})",
        )


def open_database(
    home: Path,
    *,
    clock: Clock | None = None,
    lease_ms: int = DEFAULT_LEASE_MS,
    create: bool = True,
) -> Database:
    """Open (creating if absent) the state database in the state directory ``home``.

    Raises ``StateIdentityError`` with the reset instruction when the file is not a
    pi-workflows state database of this exact schema; the file is not modified. Raises
    ``StateStorageError`` when the file system fails it (full, size limit, I/O error).
    """
    clock = clock or SystemClock()
    ensure_private_dir(home)
    path = database_path(home)
    if not path.exists():
        if not create:
            raise FileNotFoundError(f"no state database at {path}")
        with _storage_errors(path):
            create_file(path, clock)
    _check_header(path)
    _check_identity(path)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        with _storage_errors(path):
            _configure(conn)
    except BaseException:
        conn.close()
        raise
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(f"{path}{suffix}", 0o600)
    return Database(conn, path, clock, lease_ms)
