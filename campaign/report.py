"""The campaign's JSON report: seeds, faults by kind, runs, violations and how to re-run each.

Runs in the campaign driver's parent process, which collects one result per seed
(`seed.py`) and writes `campaign/results/latest.json` (or `--out DIR/latest.json`).
"""

from __future__ import annotations

import json
import os
import platform
from collections import Counter
from pathlib import Path
from typing import Any, Final

SCHEMA: Final = "pi-workflows.campaign.v1"


def build(
    results: list[dict[str, Any]],
    *,
    command: str,
    seconds: float,
    fuzz: dict[str, Any] | None = None,
    rerun_args: str = "",
) -> dict[str, Any]:
    """The report of a whole campaign (`rerun_args`: the CAMPAIGN_ARGS a re-run needs)."""
    fired: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    windows: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    workflows: Counter[str] = Counter()
    resolutions: Counter[str] = Counter()
    attributed: Counter[str] = Counter()
    durable: Counter[str] = Counter()
    modes: Counter[str] = Counter()
    telegram: Counter[str] = Counter()
    violations: list[dict[str, Any]] = []
    for result in results:
        for fault in result.get("faults", []):
            if fault.get("final"):
                continue  # the seed's last `server stop`, not an injected fault
            (skipped if fault.get("skipped") else fired)[fault["kind"]] += 1
            if fault.get("window") and not fault.get("skipped"):
                windows[f"{fault['kind']}@{fault['window']}"] += 1
        for run in result.get("runs", []):
            statuses[str(run.get("status"))] += 1
            workflows[str(run.get("workflow"))] += 1
            resolutions.update(run.get("resolutions", []))
            modes[str(run.get("mode", "plain"))] += 1
        attributed.update(result.get("attributed", {}))
        durable.update(result.get("durable", {}))
        telegram.update(result.get("telegram", {}))
        telegram["seeds"] += bool(result.get("telegram"))
        violations.extend(result.get("violations", []))
    failing = sorted({v["seed"] for v in violations})
    return {
        "schema": SCHEMA,
        "command": command,
        "seeds": [r["seed"] for r in results],
        "seedCount": len(results),
        "seconds": round(seconds, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "faults": dict(sorted(fired.items())),
        "faultsTotal": sum(fired.values()),
        "faultsSkipped": dict(sorted(skipped.items())),
        "faultsInWindow": dict(sorted(windows.items())),
        "runs": sum(statuses.values()),
        "runsByStatus": dict(sorted(statuses.items())),
        "runsByWorkflow": dict(sorted(workflows.items())),
        "runsByMode": dict(sorted(modes.items())),
        "resolutions": dict(sorted(resolutions.items())),
        "serverStarts": sum(int(r.get("servers", 0)) for r in results),
        "effectBodies": sum(int(r.get("witnessBodies", 0)) for r in results),
        "violationCount": len(violations),
        "failingSeeds": failing,
        "violations": violations,
        "rerun": [f"make campaign SEEDS=1 SEED_START={seed}{rerun_args}" for seed in failing],
        "attributed": dict(sorted(attributed.items())),
        "durable": dict(sorted(durable.items())),
        "telegram": dict(sorted(telegram.items())),
        "perSeed": [
            {
                "seed": r["seed"],
                "seconds": r.get("seconds"),
                "faults": [
                    f["kind"]
                    for f in r.get("faults", [])
                    if not f.get("skipped") and not f.get("final")
                ],
                "runs": [f"{x.get('workflow')}:{x.get('status')}" for x in r.get("runs", [])],
                "violations": len(r.get("violations", [])),
                "kept": r.get("kept"),
            }
            for r in results
        ],
        "fuzz": fuzz,
    }


def write(report: dict[str, Any], out: Path) -> Path:
    """Write `latest.json` into `out`; return its path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "latest.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def summary(report: dict[str, Any]) -> str:
    """A few lines for the terminal."""
    lines = [
        f"campaign: {report['seedCount']} seeds in {report['seconds']:.0f} s, "
        f"{report['runs']} runs, {report['faultsTotal']} faults, "
        f"{report['violationCount']} violations",
        "faults: " + ", ".join(f"{k} {v}" for k, v in report["faults"].items()),
        "runs: " + ", ".join(f"{k} {v}" for k, v in report["runsByStatus"].items()),
    ]
    for violation in report["violations"][:20]:
        lines.append(
            f"  seed {violation['seed']}: {violation['kind']}: {violation['message'][:300]}"
            f"  (re-run: {violation['rerun']})"
        )
    if report.get("fuzz"):
        fuzz = report["fuzz"]
        lines.append(f"fuzz: {fuzz.get('inputs')} inputs, passed={fuzz.get('passed')}")
    return "\n".join(lines)
