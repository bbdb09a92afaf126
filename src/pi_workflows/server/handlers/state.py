"""The state operations: diagnose, repair and an online, verified backup; long reads run in a
worker thread on a read-only connection so the loop keeps serving and renewing claims.

Runs in the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Any

from pi_workflows.protocol import Outcome, Request
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError
from pi_workflows.server.handlers.registry import (
    MAX_PATH_CHARS,
    MAX_PROBLEMS,
    bad,
    operation,
    text,
)
from pi_workflows.store import salvage
from pi_workflows.store.database import Database, ddl_digest
from pi_workflows.store.diagnose import diagnose, repair

# --- state -------------------------------------------------------------------------------


def _diagnose_snapshot(db: Database, now: int, full: bool) -> list[dict[str, Any]]:
    """SQLite's own check of the file, then diagnose, on a read-only connection of its own
    (runs in a worker thread). A file too damaged to read reports that, not a traceback."""
    conn = db.reader()
    try:
        damage = salvage.integrity(conn, full=full)
        problems = [salvage.damage_problem(damage)] if damage else []
        try:
            conn.execute("BEGIN")
            problems += diagnose(conn, now)
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            problems.append(salvage.damage_problem([f"reading its rows failed: {exc}"]))
    finally:
        conn.close()
    return [problem.to_json() for problem in problems]


@operation("state.diagnose")
async def state_diagnose(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{full?}``: SQLite's ``quick_check`` (``integrity_check`` with ``full``), then the
    contradictory rows, read-only, in a worker thread so the loop keeps renewing."""
    full = request.payload.get("full", False)
    if not isinstance(full, bool):
        raise bad("payload field 'full' must be true or false")
    now = server.db.clock.now_ms()
    problems = await asyncio.to_thread(_diagnose_snapshot, server.db, now, full)
    return {"problems": problems[:MAX_PROBLEMS], "total": len(problems)}


@operation("state.repair")
async def state_repair(server: ServerContext, request: Request) -> dict[str, Any]:
    """Fix what exact evidence proves; report the rest."""
    report = repair(server.db)
    server.wake()
    return {
        "fixed": [p.to_json() for p in report.fixed],
        "remaining": [p.to_json() for p in report.remaining],
    }


@operation("state.backup")
async def state_backup(server: ServerContext, request: Request) -> dict[str, Any]:
    """An online copy of the database, verified before it is put in place.

    Copying and the integrity check run in a worker thread on a connection of their own,
    so the loop keeps serving and renewing claims meanwhile.
    """
    target = Path(text(request.payload, "path", limit=MAX_PATH_CHARS) or "")
    return await asyncio.to_thread(_backup, server.db, target)


def _backup(db: Database, target: Path) -> dict[str, Any]:
    if not target.is_absolute():
        raise bad("payload field 'path' must be an absolute path")
    if target.exists():
        raise bad(f"{target} already exists; choose a new path")
    if not target.parent.is_dir():
        raise bad(f"directory {target.parent} does not exist")
    partial = target.with_name(f".{target.name}.partial")
    fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    try:
        copy = sqlite3.connect(partial)
        source = db.reader()
        try:
            source.backup(copy)
            check = copy.execute("PRAGMA integrity_check").fetchone()[0]
            digest = copy.execute("SELECT ddl_digest FROM schema_identity").fetchone()[0]
        finally:
            source.close()
            copy.close()
        if check != "ok" or digest != ddl_digest():
            raise RequestError(Outcome.REJECTED.value, "backupFailed", "the copy did not verify")
        os.link(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return {"path": str(target), "bytes": target.stat().st_size, "verified": True}
