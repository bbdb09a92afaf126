"""Claims on runs: tokens, the claim check, renewal, and taking a claim.

Owns the ``leases`` table. The check here is the only place that decides whether a caller
still owns a run. An expired claim never renews itself. Tokens exist only in memory; the
database stores their sha256, and neither a token nor its hash appears in any message,
log line or ``repr``.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
from dataclasses import dataclass, field
from enum import StrEnum

from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import ClaimLostError, ClaimLostReason, LeaseHeldError


class OwnerType(StrEnum):
    """Who holds a claim: a runner child (through the server) or a control operation."""

    RUNNER = "runner"
    CONTROL = "control"


class ClaimToken:
    """A random claim secret. Compares by identity; never prints itself."""

    __slots__ = ("_secret",)

    def __init__(self, secret: str) -> None:
        self._secret = secret

    @classmethod
    def new(cls) -> ClaimToken:
        """A fresh token with 256 bits of randomness."""
        return cls(secrets.token_urlsafe(32))

    def digest(self) -> str:
        """The sha256 hex the database stores instead of the token."""
        return hashlib.sha256(self._secret.encode()).hexdigest()

    def __repr__(self) -> str:
        return "ClaimToken(<redacted>)"

    __str__ = __repr__

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("claim tokens are never serialised")


@dataclass(frozen=True)
class Claim:
    """The authority to write one run at one generation."""

    run_id: str
    owner_type: OwnerType
    owner_id: str
    generation: int
    token: ClaimToken = field(repr=False, compare=False)


@dataclass(frozen=True)
class Lease:
    """A ``leases`` row as stored (without the token hash)."""

    run_id: str
    owner_type: OwnerType
    owner_id: str
    generation: int
    held: bool
    acquired_at: int
    heartbeat_at: int
    expires_at: int

    def live_at(self, now: int) -> bool:
        """True when the lease is held and has not expired at ``now``."""
        return self.held and self.expires_at > now


def read_lease(conn: sqlite3.Connection, run_id: str) -> Lease | None:
    """Read the lease row of ``run_id``, if the run was ever claimed."""
    row = conn.execute(
        "SELECT owner_type, owner_id, generation, status, acquired_at, heartbeat_at, expires_at"
        " FROM leases WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    if row is None:
        return None
    return Lease(
        run_id=run_id,
        owner_type=OwnerType(row[0]),
        owner_id=row[1],
        generation=row[2],
        held=row[3] == "held",
        acquired_at=row[4],
        heartbeat_at=row[5],
        expires_at=row[6],
    )


RENEW_AFTER_FRACTION = 10
"""A fenced write renews its claim only once a tenth of the lease has passed since the last
renewal (``check_and_renew``): a runner's writes a few milliseconds apart leave the lease row
and its index untouched, two pages fewer in each commit."""


def check_and_renew(tx: Transaction, claim: Claim, lease_ms: int, *, always: bool = False) -> int:
    """Fail with ``ClaimLostError`` unless ``claim`` is the run's live claim; then renew it.

    Must run inside the transaction of the write it protects, before any change. Returns the
    expiry the claim has now. The check reads the lease row (generation, held, owner, token
    hash in constant time, expiry). The renewal is one ``UPDATE`` that repeats every
    condition, so it can only renew that exact, still-live claim; it runs when ``always``
    (the backup timer) or when more than a tenth of the lease has passed since the last
    renewal (``RENEW_AFTER_FRACTION``): a fenced write leaves its claim at least nine tenths
    of a lease to live, and never an expired claim alive.
    """
    row = tx.conn.execute(
        "SELECT owner_type, owner_id, token_hash, generation, status, expires_at"
        " FROM leases WHERE run_id = ?",
        (claim.run_id,),
    ).fetchone()
    reason = _loss_reason(row, claim, tx.now)
    if row is None or reason is not None:
        raise ClaimLostError(
            claim.run_id, reason or ClaimLostReason.MISSING_AUTHORITY, claim.generation
        )
    expires_at = int(row[5])
    if not always and expires_at - tx.now > lease_ms - lease_ms // RENEW_AFTER_FRACTION:
        return expires_at
    expires_at = tx.now + lease_ms
    cursor = tx.conn.execute(
        "UPDATE leases SET heartbeat_at = ?, expires_at = ?"
        " WHERE run_id = ? AND owner_type = ? AND owner_id = ? AND token_hash = ?"
        " AND generation = ? AND status = 'held' AND expires_at > ?",
        (
            tx.now,
            expires_at,
            claim.run_id,
            claim.owner_type.value,
            claim.owner_id,
            claim.token.digest(),
            claim.generation,
            tx.now,
        ),
    )
    if cursor.rowcount != 1:  # cannot happen: the row was read in this transaction
        raise ClaimLostError(claim.run_id, ClaimLostReason.MISSING_AUTHORITY, claim.generation)
    return expires_at


def _loss_reason(row: sqlite3.Row | None, claim: Claim, now: int) -> ClaimLostReason | None:
    if row is None:
        return ClaimLostReason.MISSING_AUTHORITY
    owner_type, owner_id, token_hash, generation, status, expires_at = tuple(row)
    if generation != claim.generation:
        return ClaimLostReason.GENERATION_CHANGED
    if status != "held":
        return ClaimLostReason.MISSING_AUTHORITY
    if owner_type != claim.owner_type.value or owner_id != claim.owner_id:
        return ClaimLostReason.OWNER_CHANGED
    if not secrets.compare_digest(token_hash, claim.token.digest()):
        return ClaimLostReason.TOKEN_CHANGED
    if expires_at <= now:
        return ClaimLostReason.EXPIRED
    return None


def acquire(
    tx: Transaction, run_id: str, owner_type: OwnerType, owner_id: str, lease_ms: int
) -> Claim:
    """Take a new claim on ``run_id``: next generation, new token, fresh expiry.

    Refuses (``LeaseHeldError``) while any live claim exists: an absent, released or
    expired lease is the only thing that can be taken. The caller checks run status.
    """
    current = read_lease(tx.conn, run_id)
    if current is not None and current.live_at(tx.now):
        raise LeaseHeldError(run_id, current.generation)
    generation = (current.generation if current else 0) + 1
    token = ClaimToken.new()
    tx.conn.execute(
        "INSERT INTO leases (run_id, owner_type, owner_id, token_hash, generation, status,"
        " acquired_at, heartbeat_at, expires_at, released_at)"
        " VALUES (?, ?, ?, ?, ?, 'held', ?, ?, ?, NULL)"
        " ON CONFLICT (run_id) DO UPDATE SET owner_type = excluded.owner_type,"
        " owner_id = excluded.owner_id, token_hash = excluded.token_hash,"
        " generation = excluded.generation, status = 'held', acquired_at = excluded.acquired_at,"
        " heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at,"
        " released_at = NULL",
        (
            run_id,
            owner_type.value,
            owner_id,
            token.digest(),
            generation,
            tx.now,
            tx.now,
            tx.now + lease_ms,
        ),
    )
    return Claim(run_id, owner_type, owner_id, generation, token)


def release(tx: Transaction, claim: Claim) -> None:
    """Release ``claim`` (already checked in this transaction); the generation stays."""
    tx.conn.execute(
        "UPDATE leases SET status = 'released', released_at = ? WHERE run_id = ?"
        " AND generation = ? AND status = 'held'",
        (tx.now, claim.run_id, claim.generation),
    )


def renew(db: Database, claim: Claim) -> int:
    """Renew a live claim without changing the run (the backup timer's write).

    Raises ``ClaimLostError`` when the claim is not live; an expired claim stays expired.
    Returns the new expiry.
    """
    with db.atomic("claims.renew") as tx:
        return check_and_renew(tx, claim, db.lease_ms, always=True)
