"""``state.prune``: remove ended runs older than a cutoff, after a verified backup.

Runs in the server. The backup (``state.backup``'s online copy and check, in a worker
thread) comes first and must verify, or nothing is removed; then ``store.retention.prune``
removes one bounded batch per transaction, yielding to the loop between batches so claims
keep renewing and clients keep being answered. Command receipts past their retention go
too (``receipts.prune``: never those of a run that has not ended), and so do the headless Pi
sessions of the removed runs (``agents.remove_pruned_session_dirs``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Final

from pi_workflows.protocol import Request
from pi_workflows.server import agents, evidence
from pi_workflows.server.context import ServerContext
from pi_workflows.server.handlers.registry import bad, operation
from pi_workflows.server.handlers.state import _backup
from pi_workflows.store import receipts, retention

BACKUP_DIR: Final = "backups"
"""Where ``backup: true`` puts its copy, inside the state directory."""


def _older_than(payload: dict[str, Any]) -> int:
    value = payload.get("olderThanMs")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise bad("payload field 'olderThanMs' must be a non-negative integer (milliseconds)")
    return value


def _backup_target(server: ServerContext, payload: dict[str, Any]) -> Path | None:
    """The backup path: the given absolute path, a new file under ``<home>/backups`` for
    ``true``, or None for ``false``."""
    choice = payload.get("backup", True)
    if choice is False:
        return None
    if choice is True:
        folder = server.config.home / BACKUP_DIR
        folder.mkdir(mode=0o700, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(server.db.clock.now_ms() / 1000))
        return folder / f"state-before-prune-{stamp}-{server.db.clock.now_ms() % 1000:03d}.sqlite"
    if isinstance(choice, str) and Path(choice).is_absolute():
        return Path(choice)
    raise bad("payload field 'backup' must be true, false or an absolute path")


async def prune_all(server: ServerContext, older_than_ms: int) -> dict[str, int]:
    """Prune every due run in batches (yielding between them); the totals, where
    ``receipts`` counts the pruned runs' receipts and the other old ones removed after."""
    cutoff = server.db.clock.now_ms() - older_than_ms
    totals = {"runs": 0, "events": 0, "attempts": 0, "blobs": 0, "receipts": 0}
    while True:
        report = retention.prune(server.db, cutoff)
        for name in totals:
            totals[name] += getattr(report, name)
        if not report.more:
            break
        await asyncio.sleep(0)
    while True:  # then receipts past the cutoff that belong to no run, or to an ended one
        removed = receipts.prune(server.db, cutoff)
        totals["receipts"] += removed
        if removed < 1000:
            break
        await asyncio.sleep(0)
    if totals["runs"]:
        agents.remove_pruned_session_dirs(server.config.home, server.db)
        evidence.remove_pruned(server.config.home, server.db)
    server.wake()
    return {**totals, "cutoff": cutoff}


@operation("state.prune")
async def state_prune(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{olderThanMs, backup?}``: back up (``backup``: true by default, an absolute path,
    or false), then remove ended runs that finished more than ``olderThanMs`` ago.

    Answers ``{cutoff, runs, events, attempts, blobs, receipts, backup}`` where ``backup``
    is ``{path, bytes, verified}`` or null.
    """
    older_than = _older_than(request.payload)
    target = _backup_target(server, request.payload)
    backup = None if target is None else await asyncio.to_thread(_backup, server.db, target)
    return {**(await prune_all(server, older_than)), "backup": backup}
