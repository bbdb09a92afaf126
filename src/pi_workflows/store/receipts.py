"""Durable command receipts: a command is acknowledged only with its committed change.

Owns ``server_commands``. A receipt is keyed by (client id, idempotency key) and carries a
fingerprint of the request that excludes the request id, so a retry after a lost reply is
recognised and answered with the stored receipt, and a reused key with another payload is a
conflict. ``run_command`` puts the lookup, the change and the receipt in one transaction:
there is never a receipt without its change, nor a change without its receipt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pi_workflows.protocol.canonical import fingerprint
from pi_workflows.store import jsoncol
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import ReceiptConflictError


@dataclass(frozen=True)
class CommandRequest:
    """A state-changing command as the store sees it (the request id is not part of it)."""

    client_id: str
    idempotency_key: str
    operation: str
    run_id: str | None
    payload: dict[str, Any]

    def fingerprint(self) -> str:
        """The sha256 of the canonical operation, run id and payload."""
        return fingerprint(
            {"operation": self.operation, "runId": self.run_id, "payload": self.payload}
        )


@dataclass(frozen=True)
class Receipt:
    """A stored receipt; ``adopted`` is True when it answers a retry."""

    operation: str
    run_id: str | None
    outcome: str
    body: dict[str, Any]
    adopted: bool


def lookup(tx: Transaction, request: CommandRequest) -> Receipt | None:
    """The stored receipt for this request, or None; a changed payload raises a conflict."""
    row = tx.conn.execute(
        "SELECT operation, fingerprint, run_id, outcome, receipt_json FROM server_commands"
        " WHERE client_id = ? AND idempotency_key = ?",
        (request.client_id, request.idempotency_key),
    ).fetchone()
    if row is None:
        return None
    if row[1] != request.fingerprint():
        raise ReceiptConflictError(request.client_id, request.idempotency_key, row[0])
    return Receipt(row[0], row[2], row[3], jsoncol.loads(row[4]), adopted=True)


def record(
    tx: Transaction, request: CommandRequest, run_id: str | None, body: dict[str, Any]
) -> Receipt:
    """Store the receipt of an accepted command inside the transaction of its change."""
    tx.conn.execute(
        "INSERT INTO server_commands (client_id, idempotency_key, operation, fingerprint, run_id,"
        " outcome, receipt_json, created_at) VALUES (?, ?, ?, ?, ?, 'accepted', ?, ?)",
        (
            request.client_id,
            request.idempotency_key,
            request.operation,
            request.fingerprint(),
            run_id,
            jsoncol.dumps(body),
            tx.now,
        ),
    )
    return Receipt(request.operation, run_id, "accepted", body, adopted=False)


def run_command(
    db: Database,
    request: CommandRequest,
    change: Callable[[], tuple[str | None, dict[str, Any]]],
) -> Receipt:
    """Apply ``change`` and record its receipt in one transaction, or adopt a stored one.

    ``change`` calls store operations (they join this transaction) and returns the run id
    and receipt body. If it raises, nothing is committed and no receipt exists.
    """
    with db.atomic(f"command.{request.operation}") as tx:
        existing = lookup(tx, request)
        if existing is not None:
            return existing
        run_id, body = change()
        return record(tx, request, run_id, body)


def prune(db: Database, older_than_ms: int, *, limit: int = 1000) -> int:
    """Delete at most ``limit`` receipts created before ``older_than_ms`` whose run has ended.

    Receipts of a run that is not terminal are never deleted, whatever their age, so every
    retry of a command on a live run still adopts its stored outcome; receipts of commands
    without a run (for example ``state.backup``) go by age alone. Returns how many went.
    """
    with db.atomic("receipts.prune") as tx:
        cursor = tx.conn.execute(
            "DELETE FROM server_commands WHERE command_id IN (SELECT c.command_id"
            " FROM server_commands c LEFT JOIN runs r USING (run_id) WHERE c.created_at < ?"
            " AND (c.run_id IS NULL OR r.status IN"
            " ('completed', 'failed', 'timed_out', 'cancelled')) LIMIT ?)",
            (older_than_ms, limit),
        )
        return int(cursor.rowcount)
