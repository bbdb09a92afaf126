"""What each node attempt last said about its progress: its newest ``publish_update`` value.

Owns the ``attempt_progress`` table. The runner of an attempt delivers the values its
callback publishes (``node.update``, coalesced to at most four a second, the last one
before the attempt's result); ``record`` keeps each as the attempt's one latest value,
replacing the one before, under the runner's claim. A value is progress for people, not
run state: no runner ever reads it, so a write never moves the execution revision a runner
is fenced by (the revision rule, ``store/runs.py``).

History keeps a bounded sample, not every value: the attempt's first value, then at most
one every ``SAMPLE_INTERVAL_MS``, at most ``SAMPLES_PER_ATTEMPT`` per attempt, each as one
``node.update`` event (a ``write_run``: the run's revision moves, the viewer row is
rebuilt). Every other value replaces the latest one with no event and no revision, after
the same claim check. Viewers notice it through ``mark``, which changes with every value.

Values are bounded: canonical JSON of at most ``MAX_PROGRESS_BYTES`` (the runner refuses a
larger one where the workflow publishes it; a larger one sent anyway is refused here with
one line, as a malformed proposal). Views carry a one-line ``text`` of each value, cut to
``TEXT_CHARS``, and the value itself only where it is small (``VIEW_VALUE_BYTES``).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from pi_workflows.protocol import safe_message
from pi_workflows.store import faults, jsoncol
from pi_workflows.store.claims import Claim, check_and_renew
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.runs import RunRow, read_run, write_run

MAX_PROGRESS_BYTES: Final = 64 * 1024
"""Largest canonical JSON of one progress value (the runner's ``MAX_UPDATE_BYTES``)."""

SAMPLE_INTERVAL_MS: Final = 10_000
"""After an attempt's first value, history keeps at most one value per this many ms."""

SAMPLES_PER_ATTEMPT: Final = 20
"""Most ``node.update`` events one attempt adds to history (its first value included)."""

TEXT_CHARS: Final = 200
"""Longest one-line ``text`` of a value that views carry."""

VIEW_VALUE_BYTES: Final = 16 * 1024
"""Largest value (canonical JSON) a run view carries whole; a larger one only as ``text``."""

faults.declare("progress.record", "an attempt's latest progress value replaces the one before")


def _text(value: Any, encoded: str) -> str:
    """One line for people: a string value as it is, any other value as its JSON."""
    return safe_message(value if isinstance(value, str) else encoded, TEXT_CHARS)


def record(
    db: Database, claim: Claim, attempt_id: str, value: Any, published: int | None = None
) -> bool:
    """Keep ``value`` as ``attempt_id``'s latest progress, under ``claim``; True when it was
    also sampled into history (a ``node.update`` event). ``published`` is how many values
    the callback had published by then (at least the number delivered).

    Raises ``ValueError`` for a value that is not JSON or is over ``MAX_PROGRESS_BYTES``,
    ``InvalidTransitionError`` for an attempt of another run, ``ClaimLostError`` when the
    claim is not live; nothing is written then."""
    encoded = jsoncol.dumps(value)
    size = len(encoded.encode("utf-8"))
    if size > MAX_PROGRESS_BYTES:
        raise ValueError(
            f"a progress value is {size} bytes of JSON; the limit is {MAX_PROGRESS_BYTES}"
        )
    with db.atomic("progress.record") as tx:
        row = tx.conn.execute(
            "SELECT a.run_id, p.updates, p.published, p.sampled, p.sampled_at"
            " FROM node_attempts a LEFT JOIN attempt_progress p USING (attempt_id)"
            " WHERE a.attempt_id = ?",
            (attempt_id,),
        ).fetchone()
        if row is None or row[0] != claim.run_id:
            run = read_run(tx.conn, claim.run_id)
            raise InvalidTransitionError(
                claim.run_id, "node.update", run.status.value, f"it has no attempt {attempt_id}"
            )
        updates = (row[1] or 0) + 1
        counted = max(published or 0, (row[2] or 0) + 1, updates)
        sampled, sampled_at = row[3] or 0, row[4]
        sample = sampled == 0 or (
            sampled < SAMPLES_PER_ATTEMPT and tx.now - int(sampled_at) >= SAMPLE_INTERVAL_MS
        )

        def keep(tx: Transaction, run: RunRow | None = None) -> None:
            tx.conn.execute(
                "INSERT INTO attempt_progress (attempt_id, run_id, value_json, updated_at,"
                " updates, published, sampled, sampled_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (attempt_id) DO UPDATE SET value_json = excluded.value_json,"
                " updated_at = excluded.updated_at, updates = excluded.updates,"
                " published = excluded.published, sampled = excluded.sampled,"
                " sampled_at = excluded.sampled_at",
                (
                    attempt_id,
                    claim.run_id,
                    encoded,
                    tx.now,
                    updates,
                    counted,
                    sampled + 1 if sample else sampled,
                    tx.now if sample else sampled_at,
                ),
            )

        if sample:
            write_run(
                db,
                claim.run_id,
                name="progress.record",
                event_type="node.update",
                event_data={
                    "attemptId": attempt_id,
                    "body": value,
                    "update": updates,
                    "published": counted,
                },
                claim=claim,
                apply=keep,
            )
        else:
            check_and_renew(tx, claim, db.lease_ms)  # fenced like any proposal of the runner
            keep(tx)
    return sample


def _view(row: sqlite3.Row | tuple[Any, ...], *, with_value: bool) -> dict[str, Any]:
    """``{text, at, updates, published}`` of a stored row ``(value_json, updated_at,
    updates, published, ...)``; with ``with_value`` also ``value`` (None when over
    ``VIEW_VALUE_BYTES``) and ``valueBytes``."""
    encoded = str(row[0])
    value = jsoncol.loads(encoded)
    view = {"text": _text(value, encoded), "at": row[1], "updates": row[2], "published": row[3]}
    if with_value:
        size = len(encoded.encode("utf-8"))
        view["value"] = value if size <= VIEW_VALUE_BYTES else None
        view["valueBytes"] = size
    return view


def of_attempts(conn: sqlite3.Connection, run_id: str) -> dict[str, dict[str, Any]]:
    """Attempt id -> ``{text, at, updates, published}`` for each attempt of the run that
    published progress (``run.get`` shows it beside each attempt)."""
    rows = conn.execute(
        "SELECT attempt_id, value_json, updated_at, updates, published FROM attempt_progress"
        " WHERE run_id = ?",
        (run_id,),
    ).fetchall()
    return {row[0]: _view(row[1:], with_value=False) for row in rows}


def latest(conn: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    """The run's newest progress: ``{attemptId, nodeId, running, value, valueBytes, text,
    at, updates, published}`` of the attempt that published last (``running`` when it is
    the run's unfinished attempt), or None."""
    row = conn.execute(
        "SELECT p.value_json, p.updated_at, p.updates, p.published, p.attempt_id, a.node_id,"
        " a.status FROM attempt_progress p JOIN node_attempts a USING (attempt_id)"
        " WHERE p.run_id = ? ORDER BY p.updated_at DESC, p.rowid DESC LIMIT 1",
        (run_id,),
    ).fetchone()
    if row is None:
        return None
    return {
        "attemptId": row[4],
        "nodeId": row[5],
        "running": row[6] in ("running", "waiting"),
        **_view(row, with_value=True),
    }


def current(conn: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    """``{nodeId, text, at, updates, published}`` of the run's unfinished attempt, when it
    published progress (the Pi widget shows it on the run's line), else None."""
    row = conn.execute(
        "SELECT p.value_json, p.updated_at, p.updates, p.published, a.node_id"
        " FROM node_attempts a JOIN attempt_progress p USING (attempt_id)"
        " WHERE a.run_id = ? AND a.status IN ('running', 'waiting')",
        (run_id,),
    ).fetchone()
    return None if row is None else {"nodeId": row[4], **_view(row, with_value=False)}


def mark(conn: sqlite3.Connection, run_id: str) -> int:
    """A number that grows with every progress value the run's attempts keep (the values
    delivered so far), so a viewer that last saw the same revision and mark saw them all."""
    row = conn.execute(
        "SELECT COALESCE(SUM(updates), 0) FROM attempt_progress WHERE run_id = ?", (run_id,)
    ).fetchone()
    return int(row[0])
