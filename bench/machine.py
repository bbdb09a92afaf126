"""Facts about the machine a bench run measured: cores, CPU, Python, SQLite, file system.

Runs in the bench process.
"""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil


def facts(temp_root: Path) -> dict[str, Any]:
    """What a reader needs to judge the numbers."""
    return {
        "cores": os.cpu_count(),
        "cpuModel": _cpu_model(),
        "memoryGiB": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pythonExecutable": sys.executable,
        "sqlite": sqlite3.sqlite_version,
        "tempDir": str(temp_root),
        "tempFilesystem": _filesystem(temp_root),
        "loadAverageAtStart": [round(x, 2) for x in os.getloadavg()],
        "code": _code_version(),
    }


def _code_version() -> dict[str, Any]:
    """The work tree's commit and how many files differ from it (read-only git)."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "src"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "changedSrcFiles": None}
    return {"commit": commit, "changedSrcFiles": len(changed)}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _filesystem(path: Path) -> str:
    """The type of the file system holding ``path`` (longest matching mount point)."""
    best = ("", "unknown")
    resolved = str(path.resolve())
    for part in psutil.disk_partitions(all=True):
        mount = part.mountpoint
        prefix = mount.rstrip("/") + "/"
        if (resolved == mount or resolved.startswith(prefix) or mount == "/") and len(mount) > len(
            best[0]
        ):
            best = (mount, part.fstype)
    return f"{best[1]} (mounted at {best[0]})" if best[0] else "unknown"
