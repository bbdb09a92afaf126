"""Section 2: the cost of one durable node transition, beside the floors and the peers.

Runs in the bench process. Each round measures, in a rotating order (A B C D, then
B C D A, ...): pi-workflows, the physical floor, DBOS and LangGraph. For each system it runs
a 1-node workflow (the fixed cost) and chains of N no-op nodes, and records:

- ``totalMs``: run start to completion. For pi-workflows: from just before ``run.start`` is
  sent to the completing transaction's time (the server's clock, ms resolution, taken when
  that transaction holds the write lock, before its commit; the bench learns of it by
  polling ``run.get`` every 25 ms, which does not enter the figure). For the peers: the
  workflow call in their own process, until it returns.
- ``grossPerNodeMs`` = total(N) / N.
- ``netPerNodeMs`` = (total(N) - fixed) / (N - 1): the fixed start cost, measured
  separately as the median total of the 1-node workflow over the rounds of this
  invocation, subtracted (the median, because one spawn's jitter divided by N - 1 would
  swamp a 10-node chain).
- ``steadyPerNodeMs`` = (stamp of the last node - stamp of the first) / (N - 1), from the
  nodes' own ``time.monotonic_ns()`` stamps: one transition with nothing else in it.

The floor per node is one durable commit plus one newline-JSON round trip (``floors.py``).
Ratios are taken per round, then summarised (median, min, max); the fixed cost (1-node
total) is compared per round too.

With a baseline commit (``bench/baseline.py``), a second server runs that commit's code and
takes part in the rotation as ``baseline``; ``ours/baseline (net per node)`` is per round.

Then, on a server and peer workers of their own (never the timed ones), ``bench.fsyncs``
counts what one node writes durably: commits (from the WAL) and ``fdatasync``/``fsync``
system calls (with strace, when installed), each as ``(count(N) - count(1)) / (N - 1)``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from bench import fsyncs
from bench.context import Context
from bench.floors import EchoPeer, commit_floor, pragmas
from bench.ourserver import OurServer
from bench.peers import PeerWorker
from bench.stats import figure, median, ratios
from bench.workflows import write_chain
from pi_workflows.store.database import open_database

PEERS = ("dbos", "langgraph")


def our_durability(ctx: Context) -> dict[str, Any]:
    """pi-workflows' settings, read with PRAGMA on a connection that the store's own
    ``open_database`` (the server's code path) opened in a scratch state directory."""
    db = open_database(ctx.section_dir("pragma-probe") / "state")
    try:
        found = pragmas(db.conn)
    finally:
        db.close()
    found["readFrom"] = "connection opened by pi_workflows.store.database.open_database"
    found["sqlite"] = sqlite3.sqlite_version
    return found


def run(ctx: Context) -> dict[str, Any]:
    """Measure and summarise; see the module docstring."""
    directory = ctx.section_dir("nodes")
    sizes = (1, *ctx.sizes.chain_sizes)
    servers = _servers(ctx, directory)
    server = servers["ours"]
    files = {
        name: {n: write_chain(running.project, n) for n in sizes}
        for name, running in servers.items()
    }
    echo = EchoPeer(ctx.procs)
    workers: dict[str, PeerWorker] = {}
    durability: dict[str, Any] = {"ours": our_durability(ctx)}
    skipped: dict[str, str] = {}
    for peer in PEERS:
        if not ctx.peer(peer):
            skipped[peer] = ctx.peer_status(peer)
            continue
        try:
            assert ctx.peers.python is not None
            worker = PeerWorker(
                ctx.procs,
                ctx.peers.python,
                f"{peer}_peer.py",
                ["worker", str(directory / f"{peer}.sqlite")],
                directory / f"{peer}.log",
            )
            durability[peer] = worker.call("info")
            workers[peer] = worker
        except Exception as exc:
            skipped[peer] = f"failed to start: {exc}"
            ctx.errors.append(f"nodes: {peer}: {exc}")
    systems = ["ours", "floor", *workers, *(["baseline"] if "baseline" in servers else [])]
    totals: dict[str, dict[int, list[float]]] = {s: {n: [] for n in sizes} for s in systems}
    steady: dict[str, dict[int, list[float]]] = {s: {n: [] for n in sizes} for s in systems}
    floor: dict[str, list[float]] = {"commitMs": [], "ipcRoundTripMs": [], "perNodeMs": []}
    try:
        for round_no in range(ctx.sizes.warmup + ctx.sizes.rounds):
            measured = round_no >= ctx.sizes.warmup
            order = systems[round_no % len(systems) :] + systems[: round_no % len(systems)]
            label = f"round {round_no - ctx.sizes.warmup + 1}" if measured else "warm-up"
            ctx.say(f"nodes: {label} ({' '.join(order)})")
            for system in order:
                if system == "floor":
                    commit = median(commit_floor(directory / "floor", ctx.sizes.floor_commits))
                    trip = median(echo.round_trips(ctx.sizes.floor_round_trips))
                    if measured:
                        floor["commitMs"].append(commit)
                        floor["ipcRoundTripMs"].append(trip)
                        floor["perNodeMs"].append(commit + trip)
                    continue
                for n in sizes:
                    total, stamp_span = _measure(system, n, servers, files, workers)
                    if measured:
                        totals[system][n].append(total)
                        steady[system][n].append(stamp_span / max(1, n - 1))
    finally:
        echo.close()
        for worker in workers.values():
            worker.close()
        for running in servers.values():
            running.stop()
    durability["ours"]["journalModeOfLiveFile"] = _journal_of(server.home / "state.sqlite")
    result = _summarise(ctx, sizes, systems, totals, steady, floor, durability, skipped)
    result["durableWrites"] = _durable_writes(ctx, directory, max(sizes), list(workers))
    return result


def _servers(ctx: Context, directory: Path) -> dict[str, OurServer]:
    """This checkout's server, and the baseline commit's when there is one."""
    servers = {"ours": OurServer(ctx.procs, directory / "ours").start()}
    if ctx.baseline is not None:
        servers["baseline"] = OurServer(
            ctx.procs, directory / "baseline", extra_env=ctx.baseline.env
        ).start()
    return servers


def _durable_writes(ctx: Context, directory: Path, n: int, peers: list[str]) -> dict[str, Any]:
    """Commits and fsync calls per node (``bench.fsyncs``); a failure is recorded."""
    ctx.say(f"nodes: counting commits and fsync calls per node (1 and {n} nodes)")
    found: dict[str, Any] = {}
    try:
        found["ours"] = fsyncs.ours(ctx, directory / "fsyncs", n)
    except Exception as exc:
        found["ours"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        ctx.errors.append(f"nodes: counting fsyncs: {found['ours']['error']}")
    for peer in peers:
        try:
            counted = fsyncs.peer(ctx, peer, directory / "fsyncs", n)
        except Exception as exc:
            counted = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        if counted is not None:
            found[peer] = counted
    return found


def _measure(
    system: str,
    n: int,
    servers: dict[str, OurServer],
    files: dict[str, dict[int, Any]],
    workers: dict[str, PeerWorker],
) -> tuple[float, float]:
    """One run of an ``n``-node chain: (total ms, last stamp - first stamp in ms)."""
    if system in servers:  # ours, or the baseline commit's server (the same file names)
        marks = servers[system].run_to_end(files[system][n], {})
        output = marks["output"]
        total = (marks["finishedWallNs"] - marks["t0WallNs"]) / 1e6
        return total, (output["t"] - output["first"]) / 1e6
    answer = workers[system].call("chain", n=n)
    return (answer["endNs"] - answer["t0Ns"]) / 1e6, (answer["lastNs"] - answer["firstNs"]) / 1e6


def _journal_of(path: Any) -> str:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    finally:
        conn.close()


def _summarise(
    ctx: Context,
    sizes: tuple[int, ...],
    systems: list[str],
    totals: dict[str, dict[int, list[float]]],
    steady: dict[str, dict[int, list[float]]],
    floor: dict[str, list[float]],
    durability: dict[str, Any],
    skipped: dict[str, str],
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "method": (
            "per round, each system runs a 1-node workflow and chains of N no-op nodes "
            "(~100-byte outputs); gross = total(N)/N; net = (total(N) - median total(1))/(N - 1); "
            "steady = (last node stamp - first node stamp)/(N - 1); systems interleaved, "
            "order rotated per round; figures are median/min/max over rounds after a warm-up"
        ),
        "rounds": ctx.sizes.rounds,
        "durability": durability,
        "skipped": skipped,
        "floor": {key: figure(values) for key, values in floor.items()},
        "fixedMs": {s: figure(totals[s][1]) for s in systems if s != "floor"},
        "fixedRatios": {
            f"ours/{peer} (fixed cost)": ratios(totals["ours"][1], totals[peer][1])
            for peer in PEERS
            if peer in totals
        },
        "chains": {},
        "ratios": {},
    }
    per_node: dict[str, dict[int, dict[str, list[float]]]] = {}
    for system in systems:
        if system == "floor":
            continue
        per_node[system] = {}
        for n in sizes[1:]:
            fixed = median(totals[system][1])
            ns = totals[system][n]
            per_node[system][n] = {
                "totalMs": ns,
                "grossPerNodeMs": [t / n for t in ns],
                "netPerNodeMs": [(t - fixed) / (n - 1) for t in ns],
                "steadyPerNodeMs": steady[system][n],
            }
    for n in sizes[1:]:
        result["chains"][str(n)] = {
            system: {key: figure(values) for key, values in per_node[system][n].items()}
            for system in per_node
        }
        ours = per_node["ours"][n]
        pairs: dict[str, Any] = {
            "ours/floor (net per node)": ratios(ours["netPerNodeMs"], floor["perNodeMs"]),
            "ours/floor (steady per node)": ratios(ours["steadyPerNodeMs"], floor["perNodeMs"]),
        }
        if "baseline" in per_node:
            pairs["ours/baseline (net per node)"] = ratios(
                ours["netPerNodeMs"], per_node["baseline"][n]["netPerNodeMs"]
            )
        for peer in PEERS:
            if peer in per_node:
                theirs = per_node[peer][n]
                for key, label in (
                    ("netPerNodeMs", "net per node"),
                    ("grossPerNodeMs", "gross per node"),
                    ("steadyPerNodeMs", "steady per node"),
                ):
                    pairs[f"ours/{peer} ({label})"] = ratios(ours[key], theirs[key])
        result["ratios"][str(n)] = pairs
    return result
