"""``python -m bench``: run the sections, write latest.json, latest.md and latest.png.

Runs in the bench process. Sections run one after the other (each interleaves the systems
it compares); a failing section is recorded and the others still run. Every spawned
process is cleaned up at the end, also after Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench import baseline, chart, report, targets
from bench.context import FULL, QUICK, Context, Sizes
from bench.machine import facts
from bench.peers import PEER_VENV, REQUIREMENTS, PeerEnv, ensure_peer_env
from bench.processes import Processes, install_signal_handlers
from bench.sections import (
    children,
    nodes,
    otel,
    parked,
    pi,
    profile,
    recovery,
    start,
    throughput,
    timers,
    ui,
)

SCHEMA = "pi-workflows.bench.v1"
SECTIONS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "nodes": nodes.run,
    "start": start.run,
    "recovery": recovery.run,
    "parked": parked.run,
    "timers": timers.run,
    "children": children.run,
    "throughput": throughput.run,
    "pi": pi.run,
    "otel": otel.run,
    "ui": ui.run,
    "profile": profile.run,
}
DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=(
            "Benchmarks of pi-workflows beside physical floors and peers (DBOS, LangGraph), "
            "measured in the same invocation. Writes latest.json, latest.md and latest.png."
        ),
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: a smoke run of every section"
    )
    parser.add_argument(
        "--only",
        default="",
        help=(
            "comma-separated sections to run (" + ", ".join(SECTIONS) + "), and/or 'ours' "
            "to measure pi-workflows and the floors without peers; default: everything"
        ),
    )
    parser.add_argument(
        "--no-peers",
        action="store_true",
        help=f"never create or use the peer venv ({PEER_VENV.name}); peers are reported as not run",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results directory")
    parser.add_argument("--rounds", type=int, help="measured rounds of the node section")
    parser.add_argument(
        "--parked", type=int, help="parked-scale target count (default 10000; quick 10)"
    )
    parser.add_argument(
        "--parked-seconds",
        type=float,
        help="time allowed to start and park runs, and again to answer them",
    )
    parser.add_argument(
        "--sleeping", type=int, help="runs put to sleep at once (default 10000; quick 10)"
    )
    parser.add_argument(
        "--baseline",
        default=None,
        help="a commit measured beside this checkout in the nodes and parked sections "
        "(default: the one bench/baseline.txt names; 'none' to skip)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    return parser


def _choose(args: argparse.Namespace) -> tuple[list[str], bool]:
    """The sections to run, and whether peers are measured."""
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = [w for w in wanted if w not in SECTIONS and w != "ours"]
    if unknown:
        raise SystemExit(f"python -m bench: unknown --only value(s): {', '.join(unknown)}")
    sections = [w for w in wanted if w in SECTIONS] or list(SECTIONS)
    run_peers = "ours" not in wanted and not args.no_peers
    return sections, run_peers


def _sizes(args: argparse.Namespace) -> Sizes:
    sizes = QUICK if args.quick else FULL
    overrides: dict[str, Any] = {}
    if args.rounds is not None:
        overrides["rounds"] = max(1, args.rounds)
    if args.parked is not None:
        overrides["parked_target"] = max(1, args.parked)
    if args.sleeping is not None:
        overrides["timers_sleeping"] = max(1, args.sleeping)
    if args.parked_seconds is not None:
        overrides["parked_fill_seconds"] = args.parked_seconds
        overrides["parked_answer_seconds"] = args.parked_seconds
    return replace(sizes, **overrides)


def _measure(
    ctx: Context, results: dict[str, Any], sections: list[str], use_venv: bool, run_peers: bool
) -> None:
    """Machine facts, the peer venv, then each section (a failure is recorded, not raised)."""
    machine = facts(ctx.tmp)
    machine["bytecodeCache"] = "on (PYTHONPYCACHEPREFIX in the bench's temp dir)"
    results["machine"] = machine
    ctx.say(
        f"machine: {machine['cores']} cores, {machine['cpuModel']}, Python "
        f"{machine['python']}, SQLite {machine['sqlite']}, temp on {machine['tempFilesystem']}"
    )
    if use_venv:  # the chart's matplotlib lives there too
        ctx.peers = ensure_peer_env(ctx.out / "peers-setup.log", ctx.say)
        ctx.run_peers = run_peers
        for peer, why in ctx.peers.missing.items():
            ctx.say(f"peer {peer}: {why}")
    for name in sections:
        ctx.say(f"section {name}")
        began = time.monotonic()
        try:
            results[name] = SECTIONS[name](ctx)
        except Exception as exc:
            results[name] = ctx.fail(name, exc)
        results[name]["seconds"] = round(time.monotonic() - began, 1)
        # Other work on a shared machine skews a section: say how busy it was at its end.
        results[name]["loadAverageAtEnd"] = [round(x, 2) for x in os.getloadavg()]


def _write(ctx: Context, results: dict[str, Any]) -> None:
    """latest.json, the chart, latest.md; a summary on stdout."""
    out = ctx.out
    results["durationSeconds"] = round(time.monotonic() - ctx.started, 1)
    results["errors"] = ctx.errors
    results["systems"] = _systems(ctx, results)
    results["targets"] = targets.evaluate(results)
    (out / "latest.png").unlink(missing_ok=True)
    (out / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    png = chart.draw(ctx, out / "latest.json", out / "latest.png")
    results["chart"] = png
    results["chartNote"] = ctx.chart_note
    (out / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "latest.md").write_text(report.markdown(results))
    ctx.say(f"wrote {out / 'latest.json'}, {out / 'latest.md'}" + (f", {png}" if png else ""))
    print(report.summary(results))


def main(argv: list[str] | None = None) -> int:
    """Run the bench; 0 when every section succeeded, 130 when interrupted."""
    args = _parser().parse_args(argv)
    sections, run_peers = _choose(args)
    sizes = _sizes(args)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="pi-workflows-bench-"))
    install_signal_handlers()
    procs = Processes(pycache=tmp / "pycache")
    ctx = Context(sizes=sizes, procs=procs, out=out, tmp=tmp, peers=PeerEnv(None), run_peers=False)
    results: dict[str, Any] = {
        "schema": SCHEMA,
        "startedAt": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "argv": sys.argv[1:] if argv is None else argv,
        "sizes": asdict(sizes),
        "sections": sections,
    }
    try:
        results["baseline"] = _baseline(ctx, args.baseline)
        try:
            _measure(ctx, results, sections, not args.no_peers, run_peers)
        except KeyboardInterrupt:
            ctx.say("interrupted: cleaning up")
            return 130
        finally:
            killed = procs.cleanup()
            if killed:
                ctx.say(f"cleanup: stopped {killed} leftover process(es)")
        _write(ctx, results)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if ctx.errors else 0


def _baseline(ctx: Context, wanted: str | None) -> dict[str, Any]:
    """Extract the baseline commit's sources (``bench/baseline.py``); what was chosen."""
    rev = baseline.recorded() if wanted is None else wanted
    if rev is None or rev.lower() == "none":
        return {"skipped": "no baseline (--baseline none, or no bench/baseline.txt)"}
    try:
        ctx.baseline = baseline.prepare(rev, ctx.tmp)
    except ValueError as exc:
        ctx.say(f"baseline: {exc}")
        return {"skipped": str(exc)}
    ctx.say(f"baseline: {ctx.baseline.commit[:12]} ({ctx.baseline.subject})")
    return ctx.baseline.describe()


def _systems(ctx: Context, results: dict[str, Any] | None = None) -> dict[str, Any]:
    """Each system's version, status and (once measured) SQLite durability settings."""
    durability = (results or {}).get("nodes", {}).get("durability", {})
    systems: dict[str, Any] = {
        "ours": {
            "name": "pi-workflows",
            "version": version("pi-workflows"),
            "status": "ok",
            **durability.get("ours", {}),
        },
        "floor": {
            "name": "physical floor",
            "status": "ok",
            "journalMode": "wal",
            "synchronous": "FULL",
            "readFrom": "PRAGMA on the bench's floor connection (checked before measuring)",
        },
    }
    names = {"dbos": "DBOS Transact", "langgraph": "LangGraph + SqliteSaver"}
    for peer, name in names.items():
        systems[peer] = {
            "name": name,
            "status": ctx.peer_status(peer),
            "versions": ctx.peers.available.get(peer),
            **durability.get(peer, {}),
        }
    systems["peerVenv"] = {
        "path": str(PEER_VENV),
        "requirements": str(REQUIREMENTS),
        "created": ctx.peers.created,
        "setupSeconds": round(ctx.peers.setup_seconds, 1),
    }
    return systems
