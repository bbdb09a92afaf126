"""Stored JSON values: inline up to ``INLINE_LIMIT``, else once in ``blobs`` by digest.

Owns how a run's values (its input and output, node outputs, effect results, interaction
answers) are kept: a value whose canonical JSON is at most ``INLINE_LIMIT`` bytes is stored
inline in its row's ``*_json`` column; a larger one is stored once in ``blobs`` (keyed by
the sha256 of its canonical bytes, so equal values share one row) and its row holds only
the digest in ``*_ref``. Readers either load the value, or hand out a ``Ref`` (digest and
size) that a runner or client reads in chunks (``read_chunk``) and checks against the
digest. A blob whose bytes no longer match its digest is damage inside the state file that
SQLite cannot see: reading it (``load``, or ``read_chunk`` from offset 0) raises
``StoredValueDamagedError``, which every caller treats as a damaged database page.
Functions taking a ``Transaction`` run inside a run write.
"""

from __future__ import annotations

import base64
import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from pi_workflows.protocol.canonical import canonical_json, sha256_hex
from pi_workflows.store import jsoncol
from pi_workflows.store.database import Transaction

INLINE_LIMIT: Final = 16 * 1024
"""Largest canonical JSON, in bytes, stored inline and sent inline to a runner."""

CHUNK_BYTES: Final = 512 * 1024
"""Largest slice of a blob one ``blob.read`` answers (base64 keeps it under a frame)."""


class StoredValueDamagedError(sqlite3.DatabaseError):
    """Raised when a stored value's bytes no longer match the digest they are stored under.

    Unlike a missing blob (``LookupError``: a reference to nothing), the row is there but
    its content was damaged. It is an ``sqlite3.DatabaseError`` named ``SQLITE_CORRUPT``, so
    it takes the path of a damaged database page everywhere: the server answers
    ``stateDamaged`` with the one-line reset instruction. Kept next to the check that raises
    it (not in ``store/errors.py``) because it must be an ``sqlite3`` error to take that path.
    """

    sqlite_errorcode = sqlite3.SQLITE_CORRUPT
    sqlite_errorname = "SQLITE_CORRUPT"

    def __init__(self, digest: str) -> None:
        self.digest = digest
        super().__init__(f"the stored value {digest} does not match its digest")


def _checked(digest: str, size: int | None, data: bytes) -> bytes:
    """`data`, or `StoredValueDamagedError` when it is not what `digest` (and `size`) name."""
    if (size is not None and len(data) != size) or sha256_hex(data) != digest:
        raise StoredValueDamagedError(digest)
    return data


@dataclass(frozen=True)
class Ref:
    """A stored value sent by reference: its blob's digest and size in bytes."""

    digest: str
    size: int

    def to_json(self) -> dict[str, Any]:
        """The wire form ``{"digest", "bytes"}``."""
        return {"digest": self.digest, "bytes": self.size}


def store(tx: Transaction, value: Any) -> tuple[str | None, str | None]:
    """``(inline canonical text, None)`` for a small value, ``(None, digest)`` for a large
    one (written to ``blobs`` if new). ``None`` stays ``(None, None)``."""
    if value is None:
        return None, None
    data = canonical_json(value)
    if len(data) <= INLINE_LIMIT:
        return data.decode("utf-8"), None
    digest = sha256_hex(data)
    tx.conn.execute(
        "INSERT OR IGNORE INTO blobs (digest, size, data, created_at) VALUES (?, ?, ?, ?)",
        (digest, len(data), data, tx.now),
    )
    return None, digest


def load(conn: sqlite3.Connection, inline: str | None, ref: str | None) -> Any:
    """The value a row holds, inline or by reference."""
    if ref is None:
        return jsoncol.loads(inline)
    row = conn.execute("SELECT size, data FROM blobs WHERE digest = ?", (ref,)).fetchone()
    if row is None:
        raise LookupError(f"blob {ref} is missing")
    return jsoncol.loads(_checked(ref, int(row[0]), bytes(row[1])).decode("utf-8"))


def reference(conn: sqlite3.Connection, ref: str) -> Ref:
    """The ``Ref`` of a stored blob."""
    row = conn.execute("SELECT size FROM blobs WHERE digest = ?", (ref,)).fetchone()
    if row is None:
        raise LookupError(f"blob {ref} is missing")
    return Ref(ref, int(row[0]))


def size_of(conn: sqlite3.Connection, inline: str | None, ref: str | None) -> int:
    """The canonical JSON size in bytes of a stored value (0 for none)."""
    if ref is not None:
        return reference(conn, ref).size
    return 0 if inline is None else len(inline.encode("utf-8"))


def read_chunk(conn: sqlite3.Connection, digest: str, offset: int, length: int) -> dict[str, Any]:
    """``{digest, bytes, offset, data}``: up to ``length`` bytes (at most ``CHUNK_BYTES``)
    from ``offset``, base64-encoded; ``LookupError`` if there is no such blob. A read from
    offset 0 first checks the whole blob against its digest (``StoredValueDamagedError``),
    so a reader learns of damage before it has taken any of the bytes."""
    length = max(0, min(length, CHUNK_BYTES))
    if offset == 0:
        whole = conn.execute("SELECT size, data FROM blobs WHERE digest = ?", (digest,)).fetchone()
        if whole is not None:
            _checked(digest, int(whole[0]), bytes(whole[1]))
    row = conn.execute(
        "SELECT size, substr(data, ?, ?) FROM blobs WHERE digest = ?", (offset + 1, length, digest)
    ).fetchone()
    if row is None:
        raise LookupError(f"no stored value with digest {digest}")
    return {
        "digest": digest,
        "bytes": int(row[0]),
        "offset": offset,
        "data": base64.b64encode(bytes(row[1] or b"")).decode("ascii"),
    }
