"""Smoke test of the benchmark suite (``bench/``): its own-system part, with tiny sizes.

It runs ``python -m bench --quick --only ours --no-peers`` as a subprocess, so the real
server, runners and client are exercised, and checks the shape of ``latest.json``. It never
creates the peer venv and needs no network. No assertion depends on how fast anything is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _positive_figure(figure: dict[str, Any]) -> bool:
    return figure["n"] > 0 and all(_positive(figure[k]) for k in ("median", "min", "max"))


@pytest.mark.slow
def test_quick_own_system_bench_writes_every_section_with_positive_figures(
    tmp_path: Path,
) -> None:
    """The quick own-system bench exits 0 and writes latest.json and latest.md with every
    section's figures present and positive, without touching the peer venv."""
    out = tmp_path / "results"
    argv = ["-m", "bench", "--quick", "--only", "ours", "--no-peers", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "latest.json").read_text())
    assert (out / "latest.md").read_text().startswith("# pi-workflows bench")

    assert results["schema"] == "pi-workflows.bench.v1"
    assert results["quick"] is True
    assert results["errors"] == []
    assert results["sections"] == ["nodes", "start", "recovery", "parked", "pi", "profile"]
    assert _positive(results["machine"]["cores"])
    assert results["machine"]["sqlite"]
    ours = results["systems"]["ours"]
    assert (ours["journalMode"], ours["synchronous"]) == ("wal", "FULL")
    assert results["systems"]["dbos"]["status"].startswith("not run")
    assert results["systems"]["peerVenv"]["created"] is False
    assert results["chart"] is None

    nodes = results["nodes"]
    for key in ("commitMs", "ipcRoundTripMs", "perNodeMs"):
        assert _positive_figure(nodes["floor"][key]), key
    assert _positive_figure(nodes["fixedMs"]["ours"])
    for n in ("10", "100"):
        chain = nodes["chains"][n]["ours"]
        for key in ("totalMs", "grossPerNodeMs", "steadyPerNodeMs"):
            assert _positive_figure(chain[key]), (n, key)
        assert isinstance(chain["netPerNodeMs"]["median"], float)
        assert "ours/floor (net per node)" in nodes["ratios"][n]

    start = results["start"]
    for key in ("ackMs", "firstNodeMs"):
        assert _positive_figure(start["ours"][key]), key
    for key in ("spawnPassMs", "spawnRunnerImportsMs", "spawnResolverImportsMs"):
        assert _positive_figure(start["floor"][key]), key

    recovery = results["recovery"]
    for key in ("readyMs", "firstResumedNodeMs", "completionMs"):
        assert _positive_figure(recovery["ours"][key]), key

    parked = results["parked"]
    assert parked["parked"] == parked["target"] == 10
    assert parked["processesHeld"] == 0
    assert parked["runnersHeld"] == 0
    assert _positive(parked["serverRssMiB"])
    assert parked["allCompleted"] is True
    assert _positive(parked["completionPerSecond"])
    for key in ("runListDefaultMs", "runListAllMs", "runGetMs", "cliRunListMs"):
        assert _positive_figure(parked["latency"][key]), key

    bridge = results["pi"]  # `make test` installs the Pi packages first, so it is never skipped
    assert "skipped" not in bridge, bridge
    for key in ("piStartToStepMs", "runStartToStepMs", "submitToNextNodeMs"):
        assert _positive_figure(bridge["ours"][key]), key

    profile = results["profile"]
    assert _positive(profile["server"]["perNodeMs"]["commit"])
    assert _positive(profile["runner"]["perNodeMs"]["waitingForServer"])
    assert (out / "profile-server.txt").exists()
