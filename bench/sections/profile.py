"""Section 6: where the time of one node goes, from cProfile of the server and the runners.

Runs in the bench process. A server is started with ``bench/profiling`` on ``PYTHONPATH``
(its ``sitecustomize`` profiles the server and every runner it spawns). After a warm-up
run, the bench signals the server to start profiling, runs ``profile_runs`` chains of the
largest size (100 nodes), signals it to write its profile, and reads the profiles of the
runners of those runs. cProfile slows Python code down, so the shares matter here, not the
absolute times (section 2 has those). The bench polls ``run.get`` every 50 ms here, to
keep its own reads out of the server's profile.

Categories (per node = total over the measured runs / nodes executed):

- server: ``commit`` (``BEGIN IMMEDIATE``/``COMMIT`` executed by ``Database.atomic``),
  ``otherSql`` (every other sqlite3 call), ``socketIo``, ``encoding`` (msgspec, json,
  canonical JSON, hashing), ``asyncio`` (event loop and streams), ``piWorkflowsPython``
  (server, store, protocol code), ``other``; ``idle`` (waiting in epoll) is kept apart.
- runner: ``waitingForServer`` (blocked in ``recv`` for the reply), ``callbackThread``
  (starting a callback's worker thread, once per runner since the worker is reused, and
  lock waits: thread start-up and hand-offs), ``encoding``, ``runnerPython``
  (the rest of ``Loop.run``), and ``startup`` (imports, handshake, loading, outside the loop).
"""

from __future__ import annotations

import io
import os
import pstats
import signal
import time
from pathlib import Path
from typing import Any

from bench.context import Context
from bench.ourserver import BenchError, OurServer
from bench.workflows import write_chain

PROFILING = Path(__file__).resolve().parent.parent / "profiling"

Func = tuple[str, int, str]


def _stats(paths: list[Path]) -> pstats.Stats:
    stats = pstats.Stats(str(paths[0]), stream=io.StringIO())
    for path in paths[1:]:
        stats.add(str(path))
    return stats


def _raw(stats: pstats.Stats) -> dict[Func, tuple[int, int, float, float, dict[Func, Any]]]:
    return stats.stats  # type: ignore[attr-defined,no-any-return]


def _is_encoding(func: Func) -> bool:
    filename, _, name = func
    return (
        "msgspec" in name
        or "/json/" in filename
        or filename.endswith("protocol/canonical.py")
        or "_hashlib" in name
        or "hashlib" in filename
    )


def server_breakdown(stats: pstats.Stats, nodes: int) -> dict[str, Any]:
    """Server time per node by category (ms), from the merged server profile."""
    buckets = dict.fromkeys(
        (
            "commit",
            "otherSql",
            "socketIo",
            "encoding",
            "asyncio",
            "piWorkflowsPython",
            "other",
            "idle",
        ),
        0.0,
    )
    entry: dict[str, float] = {}
    for func, (_, _, tottime, cumtime, callers) in _raw(stats).items():
        filename, _, name = func
        if name == "<method 'poll' of 'select.epoll' objects>":
            buckets["idle"] += tottime
        elif "sqlite3" in name:
            if name == "<method 'execute' of 'sqlite3.Connection' objects>":
                commit = sum(v[2] for c, v in callers.items() if c[2] == "atomic")
                buckets["commit"] += commit
                buckets["otherSql"] += tottime - commit
            else:
                buckets["otherSql"] += tottime
        elif "_socket.socket" in name:
            buckets["socketIo"] += tottime
        elif _is_encoding(func):
            buckets["encoding"] += tottime
        elif "/asyncio/" in filename or filename.endswith("selectors.py"):
            buckets["asyncio"] += tottime
        elif "pi_workflows" in filename:
            buckets["piWorkflowsPython"] += tottime
        else:
            buckets["other"] += tottime
        for key, (suffix, function) in {
            "runnerMessages": ("server/runner_messages.py", "answer"),
            "schedulerTick": ("server/app.py", "_tick"),
            "clientRunGet": ("server/handlers.py", "run_get"),
        }.items():
            if filename.endswith(suffix) and name == function:
                entry[key] = entry.get(key, 0.0) + cumtime
    busy = sum(v for k, v in buckets.items() if k != "idle")
    return {
        "perNodeMs": {k: round(v * 1000 / nodes, 4) for k, v in buckets.items()},
        "busyPerNodeMs": round(busy * 1000 / nodes, 4),
        "entryPointsPerNodeMs": {k: round(v * 1000 / nodes, 4) for k, v in entry.items()},
        "sqlStatementsPerNode": round(_sql_calls(stats) / nodes, 1),
        "transactionsPerNode": round(_atomic_calls(stats) / nodes, 2),
    }


def _sql_calls(stats: pstats.Stats) -> int:
    return sum(
        v[1]
        for f, v in _raw(stats).items()
        if f[2] == "<method 'execute' of 'sqlite3.Connection' objects>"
    )


def _atomic_calls(stats: pstats.Stats) -> int:
    """Outermost transactions: ``atomic`` executes BEGIN IMMEDIATE and COMMIT once each
    (a nested block joins the outer one and executes nothing)."""
    calls = 0
    for func, value in _raw(stats).items():
        if func[2] == "<method 'execute' of 'sqlite3.Connection' objects>":
            calls += sum(v[1] for c, v in value[4].items() if c[2] == "atomic")
    return calls // 2


def runner_breakdown(stats: pstats.Stats, nodes: int, runners: int) -> dict[str, Any]:
    """Runner time per node by category (ms), from the merged runner profiles."""
    raw = _raw(stats)
    total = sum(v[2] for v in raw.values())
    loop = sum(v[3] for f, v in raw.items() if f[2] == "run" and f[0].endswith("runner/loop.py"))
    wait = sum(v[2] for f, v in raw.items() if "_socket.socket" in f[2] and "recv" in f[2])
    thread = sum(
        v[2]
        for f, v in raw.items()
        if f[2]
        in (
            "<built-in method _thread.start_new_thread>",
            "<method 'acquire' of '_thread.lock' objects>",
        )
    )
    encoding = sum(v[2] for f, v in raw.items() if _is_encoding(f))
    per_node = {
        "waitingForServer": wait,
        "callbackThread": thread,
        "encoding": encoding,
        "runnerPython": max(0.0, loop - wait - thread - encoding),
    }
    return {
        "perNodeMs": {k: round(v * 1000 / nodes, 4) for k, v in per_node.items()},
        "startupPerRunnerMs": round((total - loop) * 1000 / runners, 2),
    }


def _top(stats: pstats.Stats, sort: str, limit: int) -> str:
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.sort_stats(sort).print_stats(limit)
    return out.getvalue()


def _wait_for(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise BenchError(f"{path.name} was not written in {timeout:g} s")
        time.sleep(0.05)


def run(ctx: Context) -> dict[str, Any]:
    """Profile and summarise; see the module docstring."""
    directory = ctx.section_dir("profile")
    profiles = directory / "profiles"
    profiles.mkdir()
    python_path = os.pathsep.join(p for p in (str(PROFILING), os.environ.get("PYTHONPATH")) if p)
    server = OurServer(
        ctx.procs,
        directory / "ours",
        {"PYTHONPATH": python_path, "PIWF_BENCH_PROFILE_DIR": str(profiles)},
    ).start()
    n = max(ctx.sizes.chain_sizes)
    workflow = write_chain(server.project, n)
    try:
        ctx.say(f"profile: warm-up, then {ctx.sizes.profile_runs} runs of {n} nodes")
        server.run_to_end(workflow, {}, poll=0.05)
        time.sleep(0.5)  # the warm-up runner writes its profile as it exits
        before = set(profiles.glob("runner-*.prof"))
        os.kill(server.pid, signal.SIGUSR1)
        wall = []
        for _ in range(ctx.sizes.profile_runs):
            marks = server.run_to_end(workflow, {}, poll=0.05)
            wall.append((marks["finishedWallNs"] - marks["t0WallNs"]) / 1e6)
        server_file = profiles / f"server-{server.pid}.prof"
        os.kill(server.pid, signal.SIGUSR2)
        _wait_for(server_file)
        deadline = time.monotonic() + 30
        while len(set(profiles.glob("runner-*.prof")) - before) < ctx.sizes.profile_runs:
            if time.monotonic() > deadline:
                raise BenchError("the runners' profiles were not written")
            time.sleep(0.05)
        time.sleep(0.2)
        runner_files = sorted(set(profiles.glob("runner-*.prof")) - before)
    finally:
        server.stop()
    nodes = n * ctx.sizes.profile_runs
    server_stats = _stats([server_file])
    runner_stats = _stats(runner_files)
    (ctx.out / "profile-server.txt").write_text(
        _top(server_stats, "tottime", 40) + _top(server_stats, "cumulative", 40)
    )
    (ctx.out / "profile-runner.txt").write_text(
        _top(runner_stats, "tottime", 40) + _top(runner_stats, "cumulative", 40)
    )
    return {
        "method": (
            f"cProfile; {ctx.sizes.profile_runs} runs of {n} nodes after a warm-up; per node = "
            "category total / nodes; shares matter more than absolute times (cProfile slows "
            "Python code)"
        ),
        "runs": ctx.sizes.profile_runs,
        "nodesPerRun": n,
        "profiledTotalMs": [round(w, 1) for w in wall],
        "server": server_breakdown(server_stats, nodes),
        "runner": runner_breakdown(runner_stats, nodes, len(runner_files)),
        "files": ["profile-server.txt", "profile-runner.txt"],
    }
