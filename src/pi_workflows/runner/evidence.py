"""Evidence of an effect body's outcome, kept on disk until the server has it.

Runs in the runner child; never opens the database. Before the runner reports a finished
manual effect body (``effect.settle``), it writes what the body did to one user-only file per
effect attempt in the run's evidence directory (``evidenceDir`` of the launch envelope,
under the state directory): ``<effectId>.<attemptId>.json``, written whole (a temporary
file, fsynced, renamed, the directory fsynced). Once the server has answered the settle,
the file is removed. A file that is left means the report was lost (the server died while
the body ran, or before it answered): the next server shows it as evidence of an ambiguous
manual effect (``server/evidence.py``), and a person may accept it with ``effect resolve
EFFECT --from-evidence``. Writing evidence never changes a node's outcome: a file that
cannot be written is left out.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any, Final

__all__ = ["SCHEMA", "remove", "write"]

SCHEMA: Final = "pi-workflows.effect-evidence.v1"
"""The ``schema`` of an evidence file (docs/state.md, "Effect evidence")."""


def write(directory: str | None, record: dict[str, Any]) -> Path | None:
    """Write ``record`` (with ``schema`` and ``finishedAt`` added) as the evidence of effect
    ``record["effectId"]``'s attempt ``record["attemptId"]``; its path, or None when there
    is no directory or it cannot be written."""
    if not directory:
        return None
    folder = Path(directory)
    final = folder / f"{record['effectId']}.{record['attemptId']}.json"
    temporary = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    body = json.dumps(
        {"schema": SCHEMA, **record, "finishedAt": int(time.time() * 1000)},
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(descriptor, body)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, final)
        directory_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()
        return None
    return final


def remove(path: Path | None) -> None:
    """Remove evidence the server now has (its settle was answered)."""
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()
