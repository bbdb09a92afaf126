"""What each node attempt printed, logged and ran: the tail of its output and its traceback.

Owns the ``attempt_logs`` table. The runner of an attempt sends what the attempt's
callbacks wrote to stdout/stderr, their ``logging`` records and the output of its shell
commands (``node.logs``, before the attempt's result and at most once a second while it
runs); ``record`` appends it under the runner's claim with the run's revision and one
``node.logs`` event, and keeps only the last ``LOG_TAIL_BYTES`` of it, counting every byte
in ``total_bytes``. A failed callback's traceback is kept separately, at most
``TRACEBACK_CHARS``, its end kept (the innermost frames and the exception).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

import msgspec

from pi_workflows.store import faults
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.runs import RunRow, write_run

LOG_TAIL_BYTES: Final = 64 * 1024
"""The newest bytes (UTF-8) of an attempt's output that are kept."""

TRACEBACK_CHARS: Final = 8 * 1024
"""The longest traceback kept per attempt (its end: the exception and innermost frames)."""

PAGE_BYTES: Final = 512 * 1024
"""About how much log text one ``run.logs`` answer carries (at least one attempt)."""

_ENCODER: Final = msgspec.json.Encoder()

faults.declare("attempt_logs.record", "an attempt's captured output and traceback are stored")


def tail_bytes(text: str, limit: int = LOG_TAIL_BYTES) -> str:
    """The end of ``text`` that fits in ``limit`` UTF-8 bytes, cut at a character boundary."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text
    return data[-limit:].decode("utf-8", errors="ignore")


def bounded_traceback(text: str) -> str:
    """``text`` cut to ``TRACEBACK_CHARS``, keeping its end and saying what was left out."""
    if len(text) <= TRACEBACK_CHARS:
        return text
    kept = text[-(TRACEBACK_CHARS - 60) :]
    return f"... ({len(text) - len(kept)} earlier characters not kept)\n{kept}"


def record(
    db: Database,
    claim: Claim,
    attempt_id: str,
    text: str,
    produced_bytes: int,
    traceback: str | None,
) -> None:
    """Append ``text`` (the newest output of ``attempt_id``, of which ``produced_bytes``
    were produced since the last call) and set its traceback, under ``claim``."""

    def apply(tx: Transaction, run: RunRow) -> None:
        owner = tx.conn.execute(
            "SELECT run_id FROM node_attempts WHERE attempt_id = ?", (attempt_id,)
        ).fetchone()
        if owner is None or owner[0] != run.run_id:
            raise InvalidTransitionError(
                run.run_id, "node.logs", run.status.value, f"it has no attempt {attempt_id}"
            )
        row = tx.conn.execute(
            "SELECT text, total_bytes, traceback FROM attempt_logs WHERE attempt_id = ?",
            (attempt_id,),
        ).fetchone()
        kept = tail_bytes((row[0] if row else "") + text)
        total = (row[1] if row else 0) + max(produced_bytes, len(text.encode("utf-8")))
        trace = bounded_traceback(traceback) if traceback else (row[2] if row else None)
        tx.conn.execute(
            "INSERT INTO attempt_logs (attempt_id, run_id, text, total_bytes, traceback,"
            " updated_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (attempt_id) DO UPDATE SET"
            " text = excluded.text, total_bytes = excluded.total_bytes,"
            " traceback = excluded.traceback, updated_at = excluded.updated_at",
            (attempt_id, run.run_id, kept, total, trace, tx.now),
        )

    write_run(
        db,
        claim.run_id,
        name="attempt_logs.record",
        event_type="node.logs",
        event_data={"attemptId": attempt_id, "bytes": produced_bytes, "traceback": bool(traceback)},
        claim=claim,
        apply=apply,
    )


def summaries(conn: sqlite3.Connection, run_id: str) -> dict[str, dict[str, Any]]:
    """Per attempt of the run: ``{totalBytes, traceback}`` (for ``run.get``)."""
    rows = conn.execute(
        "SELECT attempt_id, total_bytes, traceback FROM attempt_logs WHERE run_id = ?", (run_id,)
    ).fetchall()
    return {row[0]: {"logBytes": row[1], "traceback": row[2]} for row in rows}


def page(
    conn: sqlite3.Connection,
    run_id: str,
    *,
    node_id: str | None = None,
    after: int = 0,
    limit: int = 50,
) -> dict[str, Any]:
    """``{logs: [AttemptLog], next}``: the run's attempts oldest first, from the attempt
    after cursor ``after`` (0: the first), with their kept output and traceback.

    ``AttemptLog`` is ``{cursor, attemptId, nodeId, visit, attemptNo, round, status,
    startedAt, finishedAt, text, totalBytes, keptBytes, truncated, traceback}``; attempts
    that produced nothing have ``text`` "" and ``totalBytes`` 0. ``next`` is the cursor to
    ask from for more, or None; an answer stops after about ``PAGE_BYTES`` of text.
    """
    sql = (
        "SELECT a.rowid, a.attempt_id, a.node_id, a.visit, a.attempt_no, a.round, a.status,"
        " a.started_at, a.finished_at, l.text, l.total_bytes, l.traceback"
        " FROM node_attempts a LEFT JOIN attempt_logs l USING (attempt_id)"
        " WHERE a.run_id = ? AND a.rowid > ?"
    )
    args: list[Any] = [run_id, after]
    if node_id is not None:
        sql += " AND a.node_id = ?"
        args.append(node_id)
    rows = conn.execute(f"{sql} ORDER BY a.rowid LIMIT ?", (*args, limit + 1)).fetchall()
    logs: list[dict[str, Any]] = []
    used = 0
    next_cursor: int | None = None
    for index, row in enumerate(rows):
        if index == limit or (logs and used > PAGE_BYTES):
            next_cursor = logs[-1]["cursor"]
            break
        text = row[9] or ""
        kept = len(text.encode("utf-8"))
        entry = {
            "cursor": row[0],
            "attemptId": row[1],
            "nodeId": row[2],
            "visit": row[3],
            "attemptNo": row[4],
            "round": row[5],
            "status": row[6],
            "startedAt": row[7],
            "finishedAt": row[8],
            "text": text,
            "totalBytes": row[10] or 0,
            "keptBytes": kept,
            "truncated": (row[10] or 0) > kept,
            "traceback": row[11],
        }
        used += len(_ENCODER.encode(text)) + len(row[11] or "")
        logs.append(entry)
    return {"logs": logs, "next": next_cursor}
