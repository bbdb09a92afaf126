"""What a runner left on disk about an effect body whose report never reached a server.

Runs in the server. The runner writes one user-only file per effect attempt before it
reports the body's outcome and removes it once the server has answered
(``runner/evidence.py``), so a file that is still there means the report was lost (the
server died while the body ran, or before it answered). This module finds those files for
one effect, checks that each is whole and names that effect, and gives the newest as
*evidence*: what ``effect show`` and ``run show`` present for an ambiguous effect and what
``effect resolve EFFECT --from-evidence`` settles it with, only ever when a person asks.
Reads and removes files under ``<state>/evidence``; never writes the store. A pruned run's
directory goes with it (``remove_pruned``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Final

from pi_workflows.store.database import Database

__all__ = ["MAX_EVIDENCE_BYTES", "discard", "evidence_dir", "read", "remove_pruned"]

SCHEMA: Final = "pi-workflows.effect-evidence.v1"
MAX_EVIDENCE_BYTES: Final = 4 * 1024 * 1024
"""A larger file is not evidence (a body's stored outcome is bounded far below this)."""
MAX_FILES: Final = 64
"""At most this many files of one effect are read (one per attempt of its body)."""


def evidence_dir(home: Path, run_id: str) -> Path:
    """The run's evidence directory (in its runners' launch envelope as ``evidenceDir``)."""
    return home / "evidence" / run_id


def _files(home: Path, run_id: str, effect_id: str) -> list[Path]:
    folder = evidence_dir(home, run_id)
    try:
        return sorted(folder.glob(f"{effect_id}.*.json"))[:MAX_FILES]
    except OSError:
        return []


def _load(path: Path, run_id: str, effect_id: str, effect_key: str) -> dict[str, Any] | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_EVIDENCE_BYTES:
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None  # torn or foreign: not evidence
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        return None
    if (record.get("runId"), record.get("effectId"), record.get("effectKey")) != (
        run_id,
        effect_id,
        effect_key,
    ):
        return None
    if record.get("status") not in ("applied", "rejected"):
        return None
    if not isinstance(record.get("finishedAt"), int):
        return None
    return record


def read(home: Path, run_id: str, effect_id: str, effect_key: str) -> dict[str, Any] | None:
    """The newest whole evidence of the effect, as its runner wrote it (``{status,
    result, error, receipt, attemptId, nodeId, visit, finishedAt, ...}``), or None."""
    found = [
        record
        for path in _files(home, run_id, effect_id)
        if (record := _load(path, run_id, effect_id, effect_key)) is not None
    ]
    if not found:
        return None
    newest = max(found, key=lambda record: (record["finishedAt"], str(record.get("attemptId"))))
    newest.pop("schema", None)
    return newest


def discard(home: Path, run_id: str, effect_id: str) -> None:
    """Remove the effect's evidence files (it has been resolved: they are history now)."""
    for path in _files(home, run_id, effect_id):
        with contextlib.suppress(OSError):
            path.unlink()


def remove_pruned(home: Path, db: Database) -> int:
    """Remove the evidence directories of runs that no longer exist (pruned); how many.
    A run's row exists before any runner of it can write here."""
    folder = home / "evidence"
    try:
        names = [entry.name for entry in os.scandir(folder) if entry.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return 0
    gone: list[str] = []
    with db.read() as conn:
        for name in names:
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (name,)).fetchone() is None:
                gone.append(name)
    for name in gone:
        shutil.rmtree(folder / name, ignore_errors=True)
    return len(gone)
