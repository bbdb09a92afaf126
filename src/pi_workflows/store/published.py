"""Values out of a running run: what its callbacks published with ``ctx.publish(key, value)``.

Owns the ``published_values`` table. ``publish`` is the one write: the runner of the
publishing attempt proposes it (``value.publish``) and it commits under that runner's claim
exactly as a node's completion does (the claim is checked and renewed in the same
transaction, so a stale runner never publishes). A key keeps its latest value; each
publish appends one ``value.published`` event (key, version, size: never the value) and
moves the run's ``revision``, so waiting readers (``run.value`` with a wait) hear of it.

A published value is read by no runner: a publish leaves ``execution_revision`` alone (the
revision rule, ``store/runs.py``) and may not change anything a runner reads. It is a fact
a reader may already have seen, so it stays when its attempt later fails, times out or is
retried, as a settled effect and a sent event do; a later publish of the same key replaces
it. Bounds (each refused with one line, ``PublishRefusedError``, nothing written): a key is
``KEY_PATTERN``, a value at most ``MAX_VALUE_BYTES`` of canonical JSON, a run at most
``MAX_KEYS`` keys and ``MAX_PUBLISHES`` publishes in all.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from pi_workflows.store import faults, jsoncol
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidTransitionError, PublishRefusedError
from pi_workflows.store.runs import RunRow, read_run, write_run

KEY_PATTERN: Final = r"\A[A-Za-z][A-Za-z0-9_.:/-]{0,127}\Z"
"""A key: 1-128 letters, digits and ``_.:/-``, starting with a letter."""

MAX_VALUE_BYTES: Final = 64 * 1024
"""Largest canonical JSON of one published value."""

MAX_KEYS: Final = 100
"""Most distinct keys one run may publish."""

MAX_PUBLISHES: Final = 1000
"""Most publishes one run may make in all (each is one history event)."""

EVENT: Final = "value.published"

_KEY = re.compile(KEY_PATTERN)

faults.declare("published.publish", "a value a callback published, its event and its version")


@dataclass(frozen=True)
class Published:
    """One run's latest value of one key."""

    run_id: str
    key: str
    value: Any
    version: int  # how many times the key was published (1: the first)
    attempt_id: str  # the attempt whose callback published this value
    node_id: str
    published_at: int

    def to_json(self) -> dict[str, Any]:
        """The wire shape (``run.value``)."""
        return {
            "runId": self.run_id,
            "key": self.key,
            "value": self.value,
            "version": self.version,
            "attemptId": self.attempt_id,
            "nodeId": self.node_id,
            "publishedAt": self.published_at,
        }


def key_problem(key: object) -> str | None:
    """Why ``key`` cannot be a published key, or None."""
    if not isinstance(key, str) or not _KEY.match(key):
        shown = repr(key)[:80]
        return (
            f"key {shown} is malformed: use 1-128 letters, digits and _.:/- starting with a letter"
        )
    return None


def publish(db: Database, claim: Claim, attempt_id: str, key: str, value: Any) -> Published:
    """Keep ``value`` as the run's latest value of ``key``, published by ``attempt_id``
    (the run's unfinished attempt), under ``claim``.

    Raises ``PublishRefusedError`` for a bad key, an over-large value or a run over its
    key or publish bound, ``InvalidTransitionError`` for an attempt that is not the run's
    unfinished one, ``ClaimLostError`` when the claim is not live; nothing is written then.
    """
    problem = key_problem(key)
    if problem is not None:
        raise PublishRefusedError(claim.run_id, problem)
    encoded = jsoncol.dumps(value)
    size = len(encoded.encode("utf-8"))
    if size > MAX_VALUE_BYTES:
        raise PublishRefusedError(
            claim.run_id,
            f"the value of {key!r} is {size} bytes of JSON; the limit is {MAX_VALUE_BYTES}",
        )
    done: list[Published] = []

    def keep(tx: Transaction, run: RunRow) -> None:
        attempt = tx.conn.execute(
            "SELECT node_id, status FROM node_attempts WHERE attempt_id = ? AND run_id = ?",
            (attempt_id, claim.run_id),
        ).fetchone()
        if attempt is None or attempt[1] not in ("running", "waiting"):
            raise InvalidTransitionError(
                claim.run_id, EVENT, run.status.value, f"{attempt_id} is not its running attempt"
            )
        keys, publishes, version = tx.conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(version), 0),"
            " COALESCE(MAX(CASE WHEN key = ? THEN version END), 0)"
            " FROM published_values WHERE run_id = ?",
            (key, claim.run_id),
        ).fetchone()
        if version == 0 and keys >= MAX_KEYS:
            raise PublishRefusedError(
                claim.run_id,
                f"run {claim.run_id} already published {keys} keys, the limit; publish"
                f" {key!r} under one of them, or gather values under fewer keys",
            )
        if publishes >= MAX_PUBLISHES:
            raise PublishRefusedError(
                claim.run_id,
                f"run {claim.run_id} already published {publishes} values, the limit;"
                " publish less often (a value's latest state is what readers get)",
            )
        tx.conn.execute(
            "INSERT INTO published_values (run_id, key, value_json, version, attempt_id,"
            " node_id, published_at) VALUES (?, ?, ?, 1, ?, ?, ?)"
            " ON CONFLICT (run_id, key) DO UPDATE SET value_json = excluded.value_json,"
            " version = version + 1, attempt_id = excluded.attempt_id,"
            " node_id = excluded.node_id, published_at = excluded.published_at",
            (claim.run_id, key, encoded, attempt_id, attempt[0], tx.now),
        )
        done.append(
            Published(claim.run_id, key, value, version + 1, attempt_id, attempt[0], tx.now)
        )

    result = write_run(
        db,
        claim.run_id,
        name="published.publish",
        event_type=EVENT,
        event_data={"key": key, "bytes": size, "attemptId": attempt_id},
        claim=claim,
        apply=keep,
    )
    del result
    return done[0]


def read(conn: sqlite3.Connection, run_id: str, key: str) -> Published | None:
    """The run's latest value of ``key``; None when it was never published.

    Raises ``RunNotFoundError`` for an unknown run."""
    read_run(conn, run_id)
    row = conn.execute(
        "SELECT value_json, version, attempt_id, node_id, published_at FROM published_values"
        " WHERE run_id = ? AND key = ?",
        (run_id, key),
    ).fetchone()
    if row is None:
        return None
    return Published(run_id, key, jsoncol.loads(row[0]), row[1], row[2], row[3], row[4])


def keys(conn: sqlite3.Connection, run_id: str) -> list[dict[str, Any]]:
    """``[{key, version, nodeId, publishedAt}]`` of the run's published keys, by key."""
    rows = conn.execute(
        "SELECT key, version, node_id, published_at FROM published_values WHERE run_id = ?"
        " ORDER BY key",
        (run_id,),
    ).fetchall()
    return [{"key": r[0], "version": r[1], "nodeId": r[2], "publishedAt": r[3]} for r in rows]
