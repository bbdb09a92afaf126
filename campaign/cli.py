"""`python -m campaign`: run seeds, each in a fresh process, and write the report.

Runs in the campaign's parent process. Each seed is `python -m campaign.seed` with a hard
time limit; a seed that overruns it is killed with everything it started and counts as a
violation (`seedTimeout`). `--fuzz N` runs the protocol fuzzers with a budget of N inputs
per target instead of (or before) the seeds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import psutil

from campaign import report
from campaign.fuzz import run_fuzz
from campaign.plan import SCENARIOS

RESULTS: Final = Path(__file__).resolve().parent / "results"
SEED_LIMIT_SECONDS: Final = 600.0


def main(argv: list[str] | None = None) -> int:
    """Run the campaign; exit 1 when a violation was found."""
    parser = argparse.ArgumentParser(
        prog="python -m campaign",
        description="Seeded kill-anywhere campaign against the real server, runners and CLI.",
    )
    parser.add_argument("--seeds", type=int, default=0, help="how many seeds to run")
    parser.add_argument("--seed-start", type=int, default=1, help="the first seed")
    parser.add_argument(
        "--seed-list", default="", help="comma-separated seeds (instead of --seeds)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="seeds run at once")
    parser.add_argument("--stuck-seconds", type=float, default=60.0)
    parser.add_argument("--fuzz", type=int, default=0, help="fuzz inputs per target")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", action="store_true", help="keep every seed's directory")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument(
        "--scenario", choices=SCENARIOS, help="run a named plan instead of each seed's own"
    )
    parser.add_argument(
        "--server-faults",
        metavar="SPEC",
        help="PI_WORKFLOWS_FAULTS for the seeds' servers, e.g. the rule-off flag "
        "runs.presentation_moves_execution=flag (the oracle must then report violations)",
    )
    args = parser.parse_args(argv)
    seeds = (
        [int(s) for s in args.seed_list.split(",") if s.strip()]
        if args.seed_list
        else list(range(args.seed_start, args.seed_start + args.seeds))
    )
    if not seeds and not args.fuzz:
        parser.error("give --seeds N, --seed-list S,T,... or --fuzz N")
    command = "python -m campaign " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    began = time.monotonic()
    fuzz = run_fuzz(args.fuzz, quiet=args.quiet) if args.fuzz else None
    results = _run_seeds(seeds, args)
    built = report.build(
        results,
        command=command,
        seconds=time.monotonic() - began,
        fuzz=fuzz,
        rerun_args=_rerun_args(args),
    )
    path = report.write(built, args.out)
    print(report.summary(built))
    print(f"report: {path}")
    failed = built["violationCount"] > 0 or (fuzz is not None and not fuzz.get("passed"))
    return 1 if failed else 0


def _run_seeds(seeds: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    results: dict[int, dict[str, Any]] = {}
    total = len(seeds)

    def one(seed: int) -> None:
        result = _seed(seed, args)
        results[seed] = result
        if not args.quiet:
            bad = len(result.get("violations", []))
            kinds = ",".join(
                f["kind"]
                for f in result.get("faults", [])
                if not f.get("skipped") and not f.get("final")
            )
            print(
                f"seed {seed}: {result.get('seconds', 0):.0f} s, faults [{kinds}], "
                f"{bad} violation(s) [{len(results)}/{total}]",
                flush=True,
            )

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(one, seeds))
    return [results[s] for s in seeds]


def _seed(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Run one seed in a fresh process; a crash or an overrun is a violation of that seed."""
    root = Path(tempfile.mkdtemp(prefix=f"pwc{seed}-"))
    out = root / "result.json"
    argv = [
        sys.executable, "-m", "campaign.seed", "--seed", str(seed), "--root", str(root),
        "--out", str(out), "--stuck-seconds", str(args.stuck_seconds),
    ]  # fmt: skip
    if args.keep:
        argv.append("--keep")
    if args.scenario:
        argv += ["--scenario", args.scenario]
    if args.server_faults:
        argv += ["--server-faults", args.server_faults]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PI_WORKFLOWS_")}
    proc = subprocess.Popen(
        argv, cwd=Path(__file__).resolve().parent.parent, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=SEED_LIMIT_SECONDS)
    except subprocess.TimeoutExpired:
        _kill_seed(proc.pid, str(root))
        proc.communicate()
        return _failed(
            seed,
            "seedTimeout",
            f"the seed ran longer than {SEED_LIMIT_SECONDS:.0f} s (kept {root})",
        )
    if proc.returncode != 0 or not out.exists():
        tail = output.decode("utf-8", "replace").strip().splitlines()[-8:]
        return _failed(
            seed, "campaignError", f"seed exited {proc.returncode}: {tail} (kept {root})"
        )
    result: dict[str, Any] = json.loads(out.read_text())
    for violation in result.get("violations", []):
        violation["rerun"] = f"make campaign SEEDS=1 SEED_START={seed}{_rerun_args(args)}"
    if not result.get("kept"):
        shutil.rmtree(root, ignore_errors=True)
    return result


def _rerun_args(args: argparse.Namespace) -> str:
    """What a `make campaign` re-run of one seed needs besides the seed (or nothing)."""
    extra = []
    if args.scenario:
        extra.append(f"--scenario {args.scenario}")
    if args.server_faults:
        extra.append(f"--server-faults {shlex.quote(args.server_faults)}")
    return f" CAMPAIGN_ARGS='{' '.join(extra)}'" if extra else ""


def _kill_seed(pid: int, root: str) -> None:
    """Kill an overrunning seed and every process of its state directory (and only those)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("PI_WORKFLOWS_HOME", "").startswith(root + "/"):
                proc.kill()


def _failed(seed: int, kind: str, message: str) -> dict[str, Any]:
    return {
        "seed": seed,
        "faults": [],
        "runs": [],
        "violations": [
            {
                "seed": seed,
                "kind": kind,
                "message": message,
                "runId": None,
                "dump": None,
                "rerun": f"make campaign SEEDS=1 SEED_START={seed}",
            }
        ],
    }
