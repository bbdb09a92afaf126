"""``state recover``: salvage a damaged state file into a new one beside it, offline.

Runs in the CLI's process, not in a server: a damaged file may keep a server from starting.
It takes the state directory's server lock first (so no server writes while it reads, and
none starts meanwhile), then copies what can be read (``store.salvage``). The damaged file
is never changed; switching to the new one is the person's step, printed with the report.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pi_workflows.server.lock import ServerLock
from pi_workflows.store.clock import SystemClock
from pi_workflows.store.salvage import SalvageReport, salvage

DATABASE = "state.sqlite"
LOCK = "server.lock"


def default_target(home: Path) -> Path:
    """``<home>/state.recovered-<UTC time>.sqlite``."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return home / f"state.recovered-{stamp}.sqlite"


def recover(home: Path, target: Path | None = None) -> SalvageReport:
    """Salvage ``<home>/state.sqlite`` into ``target`` (default ``default_target``) under the
    server lock; ``ServerAlreadyRunningError`` while a server holds it."""
    source = home / DATABASE
    if not source.exists():
        raise FileNotFoundError(f"no state database at {source}")
    lock = ServerLock.acquire(home / LOCK)
    try:
        return salvage(source, target or default_target(home), SystemClock())
    finally:
        lock.release()


__all__ = ["default_target", "recover"]
