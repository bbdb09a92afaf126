"""Smoke test of the benchmark suite (``bench/``): its own-system part, with tiny sizes.

It runs ``python -m bench --quick --only ours --no-peers`` as a subprocess, so the real
server, runners and client are exercised, and checks the shape of ``latest.json``: every
section (throughput and the durable-time section included), the commit and fsync counts,
and the targets table. It never creates the peer venv and needs no network. No assertion
depends on how fast anything is.
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
    assert results["sections"] == [
        "nodes",
        "start",
        "recovery",
        "parked",
        "timers",
        "children",
        "throughput",
        "pi",
        "otel",
        "ui",
        "profile",
    ]
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
    writes = nodes["durableWrites"]["ours"]
    assert writes["sizes"] == [1, 100]
    assert _positive(writes["commits"]["marginalPerNode"])
    assert _positive(writes["commits"]["walFramesPerNode"])
    if "fsyncs" in writes:  # only where strace is installed and may trace
        assert _positive(writes["fsyncs"]["marginalPerNode"])
        assert writes["fsyncs"]["childrenCalls"] == 0
    else:
        assert "not" in writes["syscallMethod"]

    start = results["start"]
    for key in ("ackMs", "firstNodeMs"):
        assert _positive_figure(start["ours"][key]), key
    for key in ("spawnPassMs", "spawnRunnerImportsMs", "spawnResolverImportsMs"):
        assert _positive_figure(start["floor"][key]), key
    assert _positive_figure(start["ratios"]["first node / python -c pass spawn"])
    for key in ("forkMs", "forkFirstNodeMs", "startCompletedMs"):
        assert _positive_figure(start["ours"][key]), key
    fork_ratio = start["ratios"]["fork of the 100-node run / 1-node start (to completed)"]
    assert _positive_figure(fork_ratio)
    assert start["forkedNodes"] == 100

    recovery = results["recovery"]
    for key in ("readyMs", "firstResumedNodeMs", "completionMs"):
        assert _positive_figure(recovery["ours"][key]), key
    assert recovery["ours"]["readyToFirstResumedNodeMs"]["n"] == 1  # may be < 0: resumed first

    parked = results["parked"]
    assert parked["parked"] == parked["target"] == 10
    assert parked["processesHeld"] == 0
    assert parked["runnersHeld"] == 0
    assert _positive(parked["serverRssMiB"])
    assert parked["allCompleted"] is True
    assert _positive(parked["completionPerSecond"])
    assert parked["listedByPaging"] == 10
    for key in (
        "runListDefaultMs",
        "runListEveryRunPagedMs",
        "runGetMs",
        "cliRunListMs",
        "cliRunShowMs",
        "spawnPassMs",
        "cliRunListPerSpawnPass",
        "cliRunShowPerSpawnPass",
    ):
        assert _positive_figure(parked["latency"][key]), key

    timers = results["timers"]
    latency = timers["latency"]
    for key in (
        "firstNodeMs",
        "transitionMs",
        "retryGapMs",
        "signalAckMs",
        "signalToNextNodeMs",
        "submitToNextNodeMs",
    ):
        assert _positive_figure(latency["ours"][key]), key
    for found in latency["ratios"].values():
        assert _positive_figure(found)
    sleeping = timers["sleeping"]
    assert sleeping["sleeping"] == sleeping["target"] == 10
    assert sleeping["processesHeld"] == 0
    assert sleeping["runnersHeld"] == 0
    assert _positive(sleeping["serverRssMiB"])
    woken = sleeping["wakeups"]  # the mass wake-up phase, at quick sizes
    assert woken["count"] == woken["completed"] == 20
    assert woken["dueToNextNodeMs"]["n"] == 20
    assert _positive(woken["wokenPerSecond"])
    assert woken["capacity"] == 4
    due = sleeping["timers"]
    assert due["count"] == due["completed"] == 20
    assert due["latenessMs"]["n"] == 20
    assert due["latenessMs"]["p99"] >= due["latenessMs"]["median"] >= 0

    children = results["children"]
    assert (children["capacity"], children["children"]) == (16, 4)
    for key in ("fanOutMs", "clientMs", "ratio"):
        assert _positive_figure(children[key]), key
    join = children["join"]
    assert join["children"] == join["childEndsRecorded"] == 10
    assert (join["runnersClaimed"], join["joins"]) == (2, 1)

    throughput = results["throughput"]
    assert set(throughput["capacities"]) == {"4", "16"}
    for found in throughput["capacities"].values():
        for key in ("nodesPerSecond", "runsPerSecond", "seconds"):
            assert _positive_figure(found["ours"][key]), key
        assert found["dbos"]["skipped"].startswith("not run")

    bridge = results["pi"]  # `make test` installs the Pi packages first, so it is never skipped
    assert "skipped" not in bridge, bridge
    for key in ("piStartToStepMs", "runStartToStepMs", "submitToNextNodeMs"):
        assert _positive_figure(bridge["ours"][key]), key

    rows = {row["id"]: row for row in results["targets"]}
    assert len(rows) == 36
    assert {row["status"] for row in rows.values()} <= {"met", "not met", "not measured"}
    for key in ("startToFirstNode", "runStartAck", "netPerNode", "cliRunShow", "cliRunList"):
        assert _positive(rows[key]["value"]), key
    # Peers were not run, and a quick run parks 10 runs, not 10,000: never "met".
    assert rows["fixedCost"]["status"] != "met"
    assert rows["parked10k"]["status"] == "not met"
    assert rows["parkedRss"]["status"] == "not measured"
    assert rows["throughputCapacity4"]["status"] == "not measured"
    # 10 runs asleep and 20 timers are not the targets' shapes either.
    for key in ("sleepingProcesses", "sleepingRss", "timerLatenessMedian", "timerLatenessP99"):
        assert rows[key]["status"] == "not measured", key
    for key in ("retryNoDelay", "signalAck", "signalToNextNode"):
        assert _positive(rows[key]["value"]), key
    # 4 children and a join of 10 are not the children targets' shapes.
    assert rows["fanOut100"]["status"] == rows["joinWakes"]["status"] == "not measured"
    assert rows["joinWakes"]["value"] == 1
    # The fork row is measured at its own shape even in a quick run (a 100-node chain).
    assert _positive(rows["forkOf100"]["value"])
    assert rows["forkOf100"]["status"] in ("met", "not met")
    # 20 runs and a 10-child fan-out are not the page's shapes; its latency is measured as is.
    assert rows["uiFirstPage"]["status"] == rows["uiFanOutPage"]["status"] == "not measured"
    assert _positive(rows["uiFirstPage"]["value"])
    assert _positive(rows["uiFanOutPage"]["value"])
    assert rows["uiCommitToBrowser"]["status"] in ("met", "not met")
    assert "## Targets" in (out / "latest.md").read_text()
    # The recorded baseline commit (bench/baseline.txt) ran beside this checkout.
    assert results["baseline"]["commit"].startswith(
        (ROOT / "bench" / "baseline.txt").read_text().split()[-1]
    )
    assert "baseline" in nodes["chains"]["100"]
    assert _positive_figure(nodes["ratios"]["100"]["ours/baseline (net per node)"])
    theirs = parked["baseline"]
    assert theirs["parked"] == 10
    assert theirs["allCompleted"] is True
    for key in ("cliRunListMs", "cliRunShowMs"):
        assert _positive_figure(theirs["latency"][key]), key
    for key in (
        "vsBaselineNetPerNode",
        "vsBaselineParked",
        "vsBaselineCompletions",
        "vsBaselineCliRunShow",
        "vsBaselineCliRunList",
    ):
        assert _positive(rows[key]["value"]), key
    # 20 runs due within 0.5 s are neither wake-up target's shape.
    assert rows["wake1kMedian"]["status"] == rows["wake10kMedian"]["status"] == "not measured"

    otel = results["otel"]  # export off and on, side by side
    for side in ("off", "on"):
        for key in ("fixedMs", "steadyPerNodeMs", "serverCpuPerNodeMs"):
            assert _positive_figure(otel[side][key]), (side, key)
        assert isinstance(otel[side]["netPerNodeMs"]["median"], float)
    assert otel["exporter"]["requests"] > 0
    assert "## OpenTelemetry export" in (out / "latest.md").read_text()

    page = results["ui"]  # the web page: the run list, a fan-out's page, commit to browser
    for key in ("firstPageMs", "listFragmentMs", "fanOutWarmMs", "commitToBrowserMs"):
        assert _positive_figure(page[key]), key
    assert _positive(page["fanOutColdMs"])
    assert _positive(page["pageRssMb"]["after"])
    assert "## The web page" in (out / "latest.md").read_text()

    profile = results["profile"]
    assert _positive(profile["server"]["perNodeMs"]["commit"])
    assert _positive(profile["runner"]["perNodeMs"]["waitingForServer"])
    assert (out / "profile-server.txt").exists()
