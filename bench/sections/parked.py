"""Section 5: many runs parked at a checkpoint, then all of them answered.

Runs in the bench process. One server with default settings (capacity included). The
workflow waits at a checkpoint, then runs one compute node.

1. **Fill**: ``parked_clients`` client threads call ``run.start`` until ``parked_target``
   runs exist or ``parked_fill_seconds`` pass, pausing while more than ``BACKLOG_PER_CLIENT
   x clients`` started runs are not yet waiting (so the rate is runs parked, not runs
   queued), by a waiting count read every ``COUNT_EVERY`` seconds; then the
   bench waits until every started run is ``waiting``. Every few seconds it samples the
   server's RSS and the waiting count. The rate is runs waiting / seconds from the first
   ``run.start`` until all of them wait.
2. **Parked**: processes held below the server (must be zero: a waiting run holds no
   runner), server RSS (before and after the reads below), and latency of ``run.list``
   (default limit 100, by status, limit 1000, and every run paged with the ``next``
   cursor, 1000 a page), ``run.get``, and the CLI's ``run list`` / ``run show`` (a new
   process each, the ``pi-workflows`` console script), each beside a ``python -c pass``
   spawn measured in the same repetition (the floor of any new process).
3. **Answer**: the same threads answer every checkpoint; completion throughput is runs
   completed per second from the first answer until all are completed (or the budget ends).

With a baseline commit (``bench/baseline.py``), the same three phases then run again on a
server of that commit (its CLI timed with its own code; the in-process ``run.list`` and
``run.get`` reads are not repeated) and are reported under ``baseline``, so the targets
can compare this commit's rates and CLI with it, measured in the same invocation.

Everything reported is what was measured at the count reached. When fewer than the target
fit in the budget, the section also gives a linear extrapolation to the target, in its own
``extrapolated`` field labelled so (never used as a measured figure): times linear in the
count (constant rates), RSS by the slope of the samples taken in the second half of the
fill.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.context import Context
from bench.floors import spawn_ms
from bench.ourserver import BenchError, OurServer
from bench.stats import figure, linear_fit, ratios
from bench.workflows import write_park
from pi_workflows.client import Client

SAMPLE_EVERY = 5.0
COUNT_EVERY = 0.1
BACKLOG_PER_CLIENT = 8
"""The starters pause on a count up to ``COUNT_EVERY`` old, so they can start at most about
``BACKLOG_PER_CLIENT x clients / COUNT_EVERY`` runs a second (320 with 4 clients): well
above what the server parks. (With 5 per client and a count every 0.25 s, the first
version capped the measured rate itself near 80-100 runs/s.)"""
CLI_REPS = 5
STOP_SECONDS = 10.0
"""SIGTERM to SIGKILL of the server at the end of the section."""
PAGE = 1000
"""Runs per ``run.list`` page when listing every run (the server's largest limit)."""


class _Starter:
    """Client threads that start runs until a count or a deadline; ``inputs(i)`` is the
    input of the ``i``-th run (default ``{}``)."""

    def __init__(
        self,
        server: OurServer,
        workflow: str,
        target: int,
        threads: int,
        inputs: Callable[[int], Any] | None = None,
    ) -> None:
        self.server = server
        self.workflow = workflow
        self.target = target
        self.inputs = inputs
        self.run_ids: list[str] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.waiting = 0
        """The waiting count, as the bench's main thread last read it."""
        self.max_backlog = BACKLOG_PER_CLIENT * threads
        """Started runs not yet waiting that a starter allows before it pauses."""
        self._lock = threading.Lock()
        self._claimed = 0
        self._threads = [
            threading.Thread(target=self._work, name=f"bench-start-{i}", daemon=True)
            for i in range(threads)
        ]

    def _work(self) -> None:
        with Client(self.server.home, autostart=False, timeout=120.0) as client:
            while not self.stop.is_set():
                if len(self.run_ids) - self.waiting > self.max_backlog:
                    time.sleep(0.02)  # let the runners catch up: measure parking, not queueing
                    continue
                with self._lock:
                    if self._claimed >= self.target:
                        return
                    index = self._claimed
                    self._claimed += 1
                try:
                    run_input = {} if self.inputs is None else self.inputs(index)
                    receipt = client.start_run(self.workflow, run_input)
                except Exception as exc:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    self.stop.set()
                    return
                with self._lock:
                    self.run_ids.append(str(receipt["runId"]))

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def alive(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def join(self) -> None:
        for thread in self._threads:
            thread.join()


def _answer_all(
    server: OurServer, run_ids: list[str], threads: int, stop: threading.Event
) -> list[str]:
    """Answer every run's checkpoint from ``threads`` clients, until done or ``stop``."""
    errors: list[str] = []

    def work(part: list[str]) -> None:
        with Client(server.home, autostart=False, timeout=120.0) as client:
            for run_id in part:
                if stop.is_set():
                    return
                try:
                    client.answer_checkpoint(run_id, {"go": True})
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    return

    workers = [
        threading.Thread(target=work, args=(run_ids[i::threads],), daemon=True)
        for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return errors


def _count(server: OurServer, status: str) -> int:
    return int(server.client.status().get("runsByStatus", {}).get(status, 0))


def _timed(call: Any, reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        start = time.perf_counter_ns()
        call()
        times.append((time.perf_counter_ns() - start) / 1e6)
    return times


def cli_command() -> list[str]:
    """The ``pi-workflows`` console script beside this interpreter (what a user runs), or
    ``python -m pi_workflows.cli.main`` when there is none."""
    script = Path(sys.executable).with_name("pi-workflows")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "pi_workflows.cli.main"]


def _cli(server: OurServer, args: list[str]) -> None:
    """One CLI command in a new process."""
    subprocess.run(
        [*cli_command(), *args],
        env=server.procs.environment(server.env),
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _cli_latency(server: OurServer, show: str) -> dict[str, Any]:
    """CLI ``run list`` and ``run show``, each beside a ``python -c pass`` spawn, interleaved."""
    series: dict[str, list[float]] = {"cliRunListMs": [], "cliRunShowMs": [], "spawnPassMs": []}
    env = server.procs.environment(server.env)
    try:
        _cli(server, ["run", "list"])  # warm-up: the bytecode cache of the CLI's imports
        for _ in range(CLI_REPS):
            series["spawnPassMs"].append(spawn_ms(sys.executable, "pass", env))
            series["cliRunListMs"] += _timed(lambda: _cli(server, ["run", "list"]), 1)
            series["cliRunShowMs"] += _timed(lambda: _cli(server, ["run", "show", show]), 1)
    except Exception as exc:
        error = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        return {key: figure(values) if values else error for key, values in series.items()}
    found: dict[str, Any] = {key: figure(values) for key, values in series.items()}
    for key in ("cliRunListMs", "cliRunShowMs"):
        found[key.replace("Ms", "PerSpawnPass")] = ratios(series[key], series["spawnPassMs"])
    return found


def _list_every_run(client: Client) -> int:
    """Page through every run with the ``next`` cursor; how many runs were listed."""
    listed, after = 0, None
    while True:
        page, after = client.list_runs_page(after=after, limit=PAGE)
        listed += len(page)
        if after is None:
            return listed


def _sample(server: OurServer, began: float, started: int) -> dict[str, float]:
    return {
        "seconds": round(time.monotonic() - began, 2),
        "started": started,
        "waiting": _count(server, "waiting"),
        "serverRssMiB": round(server.rss_bytes() / 2**20, 2),
    }


def _fill(
    ctx: Context,
    server: OurServer,
    workflow: str,
    *,
    target: int | None = None,
    seconds: float | None = None,
    label: str = "parked",
) -> dict[str, Any]:
    """Phase 1: start runs until the target or the deadline; wait until all are waiting.

    ``target`` and ``seconds`` default to the parked sizes (the timers section fills with
    its own); ``label`` prefixes the progress lines."""
    sizes = ctx.sizes
    target = sizes.parked_target if target is None else target
    seconds = sizes.parked_fill_seconds if seconds is None else seconds
    starter = _Starter(server, workflow, target, sizes.parked_clients)
    began = time.monotonic()
    deadline = began + seconds
    ctx.say(
        f"{label}: starting up to {target} runs for at most "
        f"{seconds:g} s with {sizes.parked_clients} clients"
    )
    samples: list[dict[str, float]] = []
    starter.start()
    next_sample = began
    while starter.alive():
        now = time.monotonic()
        if now >= deadline:
            starter.stop.set()
        starter.waiting = _count(server, "waiting")
        if now >= next_sample:
            samples.append(_sample(server, began, len(starter.run_ids)))
            ctx.say(f"{label}: {samples[-1]['started']} started, {samples[-1]['waiting']} waiting")
            next_sample = now + SAMPLE_EVERY
        time.sleep(COUNT_EVERY)
    starter.join()
    if starter.errors:
        raise BenchError(f"run.start failed: {starter.errors[0]}")
    started = len(starter.run_ids)
    started_seconds = time.monotonic() - began
    drain_deadline = time.monotonic() + max(60.0, seconds)
    while (waiting := _count(server, "waiting")) < started:
        if time.monotonic() > drain_deadline:
            raise BenchError(f"only {waiting} of {started} runs reached their checkpoint")
        time.sleep(0.1)
    parked_seconds = time.monotonic() - began
    samples.append(_sample(server, began, started))
    ctx.say(f"{label}: {waiting} runs waiting after {parked_seconds:.1f} s")
    return {
        "runIds": starter.run_ids,
        "parked": waiting,
        "reachedTarget": waiting >= target,
        "fillSeconds": round(started_seconds, 2),
        "parkedSeconds": round(parked_seconds, 2),
        "parkRatePerSecond": round(waiting / parked_seconds, 2),
        "samples": samples,
    }


def _latency(call: Any, reps: int) -> dict[str, Any]:
    """A latency figure, or the error the call ended with (one try, no figure)."""
    try:
        return figure(_timed(call, reps))
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def _while_parked(server: OurServer, run_ids: list[str]) -> dict[str, Any]:
    """Phase 2: processes held, RSS, and read latencies with every run waiting."""
    time.sleep(0.5)  # let the last runners be reaped
    descendants = server.descendants()
    rss_parked = server.rss_bytes()
    template_rss = server.template_rss_bytes()
    status = server.client.status()
    client = server.client
    picks = random.sample(run_ids, k=min(20, len(run_ids)))
    page = client.list_runs(limit=100)
    per_run = len(json.dumps(page, separators=(",", ":")).encode()) / max(1, len(page))
    listed = _list_every_run(client)
    latency = {
        "runListDefaultMs": _latency(client.list_runs, 20),
        "runListWaitingMs": _latency(lambda: client.list_runs("waiting", 100), 20),
        "runList1000Ms": _latency(lambda: client.list_runs(limit=min(PAGE, len(run_ids))), 5),
        "runListEveryRunPagedMs": _latency(lambda: _list_every_run(client), 3),
        "runGetMs": _latency(lambda: client.get_run(random.choice(picks)), 20),
        **_cli_latency(server, picks[0]),
    }
    server.close_client()
    return {
        "listedByPaging": listed,
        "listPages": -(-listed // PAGE),
        "processesHeld": len(descendants),
        "runnersHeld": len(status.get("runners", [])),
        "serverRssMiB": round(rss_parked / 2**20, 2),
        "serverRssAfterReadsMiB": round(server.rss_bytes() / 2**20, 2),
        "templateRssMiB": round(template_rss / 2**20, 2),
        "listBytesPerRun": round(per_run, 1),
        "latency": latency,
    }


def _answer(ctx: Context, server: OurServer, run_ids: list[str]) -> dict[str, Any]:
    """Phase 3: answer every checkpoint; completed runs per second until all completed."""
    ctx.say(f"parked: answering {len(run_ids)} checkpoints")
    errors: list[str] = []
    stop = threading.Event()
    began = time.monotonic()
    deadline = began + ctx.sizes.parked_answer_seconds
    answering = threading.Thread(
        target=lambda: errors.extend(_answer_all(server, run_ids, ctx.sizes.parked_clients, stop)),
        daemon=True,
    )
    answering.start()
    completed = 0
    while time.monotonic() < deadline:
        completed = _count(server, "completed")
        if completed >= len(run_ids):
            break
        time.sleep(0.25)
    seconds = time.monotonic() - began
    stop.set()
    answering.join(timeout=10)
    if errors:
        ctx.errors.append(f"parked: answering: {errors[0]}")
    return {
        "completed": completed,
        "completionSeconds": round(seconds, 2),
        "completionPerSecond": round(completed / seconds, 2),
        "allCompleted": completed >= len(run_ids),
        "answerErrors": errors[:3],
    }


def _baseline(ctx: Context, directory: Path) -> dict[str, Any] | None:
    """Fill, CLI timings and answers on a server of the baseline commit (None: no baseline)."""
    if ctx.baseline is None:
        return None
    server = OurServer(ctx.procs, directory / "baseline", extra_env=ctx.baseline.env).start()
    workflow = str(write_park(server.project))
    found: dict[str, Any] = {"commit": ctx.baseline.commit}
    try:
        filled = _fill(ctx, server, workflow, label="parked (baseline)")
        run_ids = filled.pop("runIds")
        filled.pop("samples")
        found.update(filled)
        time.sleep(0.5)  # let the last runners be reaped
        found["latency"] = _cli_latency(server, random.choice(run_ids))
        server.close_client()
        found.update(_answer(ctx, server, run_ids))
    except Exception as exc:
        found["error"] = f"{type(exc).__name__}: {exc}"[:300]
        ctx.errors.append(f"parked: baseline: {found['error']}")
    finally:
        server.stop(timeout=STOP_SECONDS)
    return found


def run(ctx: Context) -> dict[str, Any]:
    """Measure and summarise; see the module docstring."""
    directory = ctx.section_dir("parked")
    server = OurServer(ctx.procs, directory / "ours").start()
    workflow = str(write_park(server.project))
    result: dict[str, Any] = {
        "target": ctx.sizes.parked_target,
        "clients": ctx.sizes.parked_clients,
        "fillBudgetSeconds": ctx.sizes.parked_fill_seconds,
        "answerBudgetSeconds": ctx.sizes.parked_answer_seconds,
    }
    try:
        filled = _fill(ctx, server, workflow)
        run_ids = filled.pop("runIds")
        result.update(filled)
        result.update(_while_parked(server, run_ids))
        result.update(_answer(ctx, server, run_ids))
        result["extrapolated"] = _extrapolate(result, result["samples"], ctx.sizes.parked_target)
    finally:
        # Runs left queued when the answer budget ends can hold up an orderly shutdown;
        # how long it took is recorded, and a server not gone in 10 s is killed.
        stopping = time.monotonic()
        server.stop(timeout=STOP_SECONDS)
        result["serverStopSeconds"] = round(time.monotonic() - stopping, 2)
        ctx.say(f"parked: server stopped in {result['serverStopSeconds']} s")
    baseline = _baseline(ctx, directory)
    if baseline is not None:
        result["baseline"] = baseline
    return result


def _extrapolate(
    result: dict[str, Any], samples: list[dict[str, float]], target: int
) -> dict[str, Any] | None:
    """Linear extrapolation from the measured count to ``target`` (None if reached)."""
    measured = int(result["parked"])
    if measured >= target or measured == 0:
        return None
    scale = target / measured
    # The second half of the fill: the first samples include the server's own warm-up.
    fit = linear_fit(
        [(s["waiting"], s["serverRssMiB"]) for s in samples if 2 * s["waiting"] >= measured]
    )
    rss = (
        max(0.0, fit[0]) * (target - measured) + result["serverRssMiB"]
        if fit is not None
        else result["serverRssMiB"]
    )
    all_ms = result["latency"]["runListEveryRunPagedMs"].get("median")
    return {
        "label": (
            f"EXTRAPOLATED from {measured} measured runs to {target}, linear in the count"
            " (not measured)"
        ),
        "count": target,
        "parkSeconds": round(target / result["parkRatePerSecond"], 1),
        "completionSeconds": round(target / max(result["completionPerSecond"], 1e-9), 1),
        "serverRssMiB": round(rss, 1),
        "runListEveryRunPagedMs": round(all_ms * scale, 2) if all_ms is not None else None,
        "processesHeld": 0,
    }
