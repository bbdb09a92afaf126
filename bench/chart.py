"""The PNG chart of the main figures, drawn by matplotlib in the peer venv (a subprocess).

Runs in the bench process. matplotlib is never a dependency of the project: it lives only
in ``bench/.venv-peers``. Without that venv (``--no-peers``, or matplotlib failed to
install) there is no chart, and the table says so.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.context import Context
from bench.peers import SCRIPTS


def draw(ctx: Context, results: Path, png: Path) -> str | None:
    """Draw ``png`` from ``results``; its file name, or None (with the reason recorded)."""
    if ctx.peers.python is None or "matplotlib" not in ctx.peers.available:
        ctx.chart_note = "no chart: matplotlib lives only in the peer venv, which was not used"
        return None
    done = subprocess.run(
        [ctx.peers.python, str(SCRIPTS / "chart.py"), str(results), str(png)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=ctx.procs.environment(),
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        ctx.chart_note = f"no chart: drawing failed: {last[:200]}"
        ctx.errors.append(f"chart: {last[:200]}")
        return None
    return png.name
