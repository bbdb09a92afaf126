"""Workflow messages: content the origin session must add (notify nodes, terminal results).

Owns ``workflow_messages``. A message is recorded in the same transaction as its source fact
(the notify node's settled attempt, the run's terminal transition) and is unique per
(run, source key), so a replayed write can never record it twice.
"""

from __future__ import annotations

from typing import Any

from pi_workflows.store import jsoncol
from pi_workflows.store.database import Transaction
from pi_workflows.store.ids import new_id


def record(
    tx: Transaction,
    run_id: str,
    source_key: str,
    kind: str,
    body: Any,
    origin_session: str | None,
) -> None:
    """Record one pending message for the run's origin session (idempotent per source)."""
    tx.conn.execute(
        "INSERT OR IGNORE INTO workflow_messages (message_id, run_id, source_key, kind, body_json,"
        " origin_session, status, created_at) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?)",
        (new_id("msg"), run_id, source_key, kind, jsoncol.dumps(body), origin_session, tx.now),
    )
