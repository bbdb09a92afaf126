"""Section 5b: durable time: retries with no delay, events, ten thousand sleeping runs.

Runs in the bench process, on two servers of its own with default settings (capacity
included), after the ``parked`` section (whose 10,000-parked RSS the targets compare with).

1. **Latency** (a warm server; ``warmup`` + ``timers_reps`` rounds, the five measures of
   a round in an order rotated every round):

   - a 1-node chain: ``firstNodeMs`` (``run.start`` sent to the node's own stamp: the
     runner start, as the ``start`` section measures it) and ``oneTotalMs`` (to the
     completing transaction's time, ms resolution);
   - a 2-node chain: ``transitionMs`` (node 1's stamp to node 2's: one node transition)
     and ``twoTotalMs``;
   - the 1-node chain's node failing its first try, ``retry(attempts=2, delay=0)``:
     ``retryGapMs`` (try 1's stamp to try 2's: what the retry adds inside the run) and
     ``retryTotalMs``; the first try writes its stamp into a marker file named by the
     input, so the second knows it is the second;
   - a ``wait_event("go")`` without validate, answered with ``Client.signal`` once the run
     is ``waiting``: ``signalAckMs`` (the call to its receipt; not held, as no validation
     runs) and ``signalToNextNodeMs`` (the call to the successor node's stamp: the fired
     wait queues the run, a new runner consumes the event and starts the next node);
   - the ``start`` section's validated checkpoint answer, measured by its own code
     (``start._submit``), so ``signal -> next node / answer -> next node`` is a ratio per
     round.

   The retry's budget is per round ``transitionMs + firstNodeMs`` (one extra transition
   plus one runner start); ``retryGapMs / transitionMs`` says which of the two it costs.

2. **Sleeping scale** (a fresh server): ``parked_clients`` threads start
   ``timers_sleeping`` runs of a workflow that sleeps 30 days (``sleep(30 * 86_400)``),
   with the ``parked`` section's starters and budget logic (``timers_fill_seconds``). With
   every run asleep: processes below the server (the runner template, which holds no run,
   apart), server RSS, and the server's CPU time over ``timers_idle_seconds`` (nothing
   is due, so nothing should run).

3. **1,000 timers in one second** (the same server, the 10,000 still asleep):
   ``timers_due`` runs of ``sleep(until=aware datetime)`` whose due times are spread
   evenly over ``timers_due_window_seconds``, the window starting once they can all be
   asleep (twice their start time at the rate the fill measured, plus
   ``timers_lead_seconds``). The bench checks that every one was asleep before the first
   came due, waits until all have completed, then reads each run's output: the sleep's
   ``lateMs`` (the wait's ``fired_at - due_at``, server clock, ms) and the successor's
   wall-clock stamp (due to the next node started, which includes queueing for the 4
   runner slots).

4. **Mass wake-ups** (the same server, everything above still there): ``wakeups_count``
   runs of the same workflow due within ``wakeups_window_seconds`` (10,000 within 10 s),
   started as in phase 3; reported as in phase 3, plus woken runs per second (completed
   runs / first due to last completed) and the capacity (``PI_WORKFLOWS_MAX_RUNNERS``, the
   server's default): what limits a burst of wake-ups is runner launches, one per woken run
   (docs/performance.md, "Mass wake-ups").

The scale server is SIGKILLed at the end and its directory removed (not stopped: ten
thousand sleeping runs would otherwise stay in its state).
"""

from __future__ import annotations

import contextlib
import shutil
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from bench.context import Context
from bench.ourserver import BenchError, OurServer
from bench.sections import parked, start
from bench.stats import figure, percentile, ratios
from bench.workflows import (
    write_chain,
    write_event,
    write_retry_once,
    write_sleep_far,
    write_sleep_until,
    write_submit,
)

SLEEP_DAYS = 30
LEAD_FACTOR = 2.0
"""The timers' window starts ``LEAD_FACTOR x`` their expected start time (at the fill's
rate) ``+ timers_lead_seconds`` from now."""
COMPLETE_SECONDS = 120.0
"""Time allowed for the fired timer runs to complete."""


# --- 1. latency ---------------------------------------------------------------------------


def _one(server: OurServer, workflow: Path) -> dict[str, float]:
    marks = server.run_to_end(workflow, {})
    return {
        "firstNodeMs": (marks["output"]["first"] - marks["t0Ns"]) / 1e6,
        "oneTotalMs": (marks["finishedWallNs"] - marks["t0WallNs"]) / 1e6,
    }


def _two(server: OurServer, workflow: Path) -> dict[str, float]:
    marks = server.run_to_end(workflow, {})
    out = marks["output"]
    return {
        "transitionMs": (out["t"] - out["first"]) / 1e6,
        "twoTotalMs": (marks["finishedWallNs"] - marks["t0WallNs"]) / 1e6,
    }


def _retry(server: OurServer, workflow: Path, markers: Path) -> dict[str, float]:
    marker = markers / f"{uuid.uuid4().hex}.try"
    marks = server.run_to_end(workflow, {"marker": str(marker)})
    out = marks["output"]
    view = server.client.get_run(marks["runId"])
    tries = [a for a in view.get("attempts", []) if a.get("nodeId") == "n0"]
    if len(tries) != 2 or tries[0].get("status") != "retried":
        raise BenchError(f"the retry run did not try its node twice: {tries}")
    return {
        "retryGapMs": (out["t"] - out["first"]) / 1e6,
        "retryFirstTryMs": (out["first"] - marks["t0Ns"]) / 1e6,
        "retryTotalMs": (marks["finishedWallNs"] - marks["t0WallNs"]) / 1e6,
    }


def _signal(server: OurServer, workflow: Path) -> dict[str, float]:
    run_id = str(server.client.start_run(str(workflow), {})["runId"])
    server.wait_run(run_id, frozenset({"waiting"}))
    t0 = time.monotonic_ns()
    receipt = server.client.signal(run_id, "go", {"go": True})
    ack = time.monotonic_ns()
    if not receipt.body.get("woke") or receipt.body.get("held"):
        raise BenchError(f"the signal did not wake the waiting run at once: {receipt.body}")
    view = server.wait_run(run_id)
    if view.get("status") != "completed":
        raise BenchError(f"the event run ended {view.get('status')}: {view.get('error')}")
    return {
        "signalAckMs": (ack - t0) / 1e6,
        "signalToNextNodeMs": (int(view["output"]["t"]) - t0) / 1e6,
    }


LATENCY_KEYS = (
    "firstNodeMs",
    "oneTotalMs",
    "transitionMs",
    "twoTotalMs",
    "retryGapMs",
    "retryFirstTryMs",
    "retryTotalMs",
    "signalAckMs",
    "signalToNextNodeMs",
    "submitAckMs",
    "submitToNextNodeMs",
)


def _latency(ctx: Context) -> dict[str, Any]:
    """Phase 1: rounds of the five measures on a warm server; per-round ratios."""
    server = OurServer(ctx.procs, ctx.section_dir("timers") / "latency").start()
    project = server.project
    markers = server.root / "markers"
    markers.mkdir()
    chain1, chain2 = write_chain(project, 1), write_chain(project, 2)
    retry_wf, event_wf, submit_wf = (
        write_retry_once(project),
        write_event(project),
        write_submit(project),
    )
    measures: list[Callable[[], dict[str, float]]] = [
        lambda: _one(server, chain1),
        lambda: _two(server, chain2),
        lambda: _retry(server, retry_wf, markers),
        lambda: _signal(server, event_wf),
        lambda: start._submit(server, submit_wf),
    ]
    series: dict[str, list[float]] = {key: [] for key in LATENCY_KEYS}
    sizes = ctx.sizes
    try:
        for rep in range(sizes.warmup + sizes.timers_reps):
            measured = rep >= sizes.warmup
            if rep % 5 == 0 or not measured:
                label = f"rep {rep - sizes.warmup + 1}" if measured else "warm-up"
                ctx.say(f"timers: latency {label}")
            values: dict[str, float] = {}
            shift = rep % len(measures)
            for measure in measures[shift:] + measures[:shift]:
                values.update(measure())
            if measured:
                for key in LATENCY_KEYS:
                    series[key].append(values[key])
    finally:
        server.stop()
    budget = [a + b for a, b in zip(series["transitionMs"], series["firstNodeMs"], strict=True)]
    extra_total = [a - b for a, b in zip(series["retryTotalMs"], series["oneTotalMs"], strict=True)]
    transition_total = [
        a - b for a, b in zip(series["twoTotalMs"], series["oneTotalMs"], strict=True)
    ]
    return {
        "reps": sizes.timers_reps,
        "ours": {key: figure(values) for key, values in series.items()},
        "retryExtraTotalMs": figure(extra_total),
        "transitionTotalMs": figure(transition_total),
        "ratios": {
            "retry try-to-try / (one transition + one runner start)": ratios(
                series["retryGapMs"], budget
            ),
            "retry try-to-try / one transition": ratios(
                series["retryGapMs"], series["transitionMs"]
            ),
            "signal -> next node / answer -> next node": ratios(
                series["signalToNextNodeMs"], series["submitToNextNodeMs"]
            ),
            "signal ack / answer ack (validated, held)": ratios(
                series["signalAckMs"], series["submitAckMs"]
            ),
        },
    }


# --- 2. sleeping scale --------------------------------------------------------------------


def _while_sleeping(server: OurServer, idle: float) -> dict[str, Any]:
    """Processes held, RSS and idle CPU with every run asleep."""
    time.sleep(0.5)  # let the last runners be reaped
    descendants = server.descendants()
    rss = server.rss_bytes()
    status = server.client.status()
    server.close_client()  # no client traffic while the idle CPU is sampled
    process = psutil.Process(server.pid)
    before = process.cpu_times()
    time.sleep(idle)
    after = process.cpu_times()
    cpu_ms = ((after.user - before.user) + (after.system - before.system)) * 1000
    return {
        "processesHeld": len(descendants),
        "processesHeldAfterIdle": len(server.descendants()),
        "runnersHeld": len(status.get("runners", [])),
        "serverRssMiB": round(rss / 2**20, 2),
        "templateRssMiB": round(server.template_rss_bytes() / 2**20, 2),
        "idleSeconds": idle,
        "idleServerCpuMsPerSecond": round(cpu_ms / idle, 2),
    }


# --- 3. timers due in one second ----------------------------------------------------------


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _count(server: OurServer, status: str) -> int:
    return int(server.client.status().get("runsByStatus", {}).get(status, 0))


def _start_timers(
    ctx: Context,
    server: OurServer,
    workflow: str,
    rate: float,
    baseline: int,
    count: int,
    window_seconds: float,
    lead_factor: float = LEAD_FACTOR,
) -> dict[str, Any]:
    """Start ``count`` timer runs (due times spread over the window) and wait until they
    sleep; the first is due ``lead_factor`` times their expected start time from now."""
    sizes = ctx.sizes
    window_ms = int(window_seconds * 1000)
    lead = lead_factor * count / max(rate, 1.0) + sizes.timers_lead_seconds
    first_due = int(time.time() * 1000 + lead * 1000)
    dues = [first_due + (i * window_ms) // count for i in range(count)]
    ctx.say(f"timers: {count} timers due over {window_ms} ms, starting in {lead:.1f} s")
    starter = parked._Starter(
        server,
        workflow,
        count,
        sizes.parked_clients,
        inputs=lambda i: {"at": _iso(dues[i])},
    )
    began = time.monotonic()
    starter.start()
    while starter.alive():
        starter.waiting = _count(server, "waiting") - baseline
        time.sleep(parked.COUNT_EVERY)
    starter.join()
    if starter.errors:
        raise BenchError(f"run.start failed: {starter.errors[0]}")
    started = len(starter.run_ids)
    while (asleep := _count(server, "waiting") - baseline) < started:
        if time.time() * 1000 >= first_due:
            break
        time.sleep(0.05)
    asleep_at = int(time.time() * 1000)
    ctx.say(
        f"timers: {asleep} of {started} asleep after {time.monotonic() - began:.1f} s, "
        f"{(first_due - asleep_at) / 1000:.1f} s before the first is due"
    )
    return {
        "runIds": starter.run_ids,
        "started": started,
        "asleepBeforeFirstDue": asleep if asleep_at < first_due else None,
        "allAsleepBeforeFirstDue": asleep >= started and asleep_at < first_due,
        "leadSeconds": round(lead, 2),
        "startSeconds": round(time.monotonic() - began, 2),
        "marginBeforeFirstDueMs": first_due - asleep_at,
        "firstDue": first_due,
    }


def _fired(
    ctx: Context,
    server: OurServer,
    started: dict[str, Any],
    baseline_completed: int,
    window_seconds: float,
    complete_seconds: float = COMPLETE_SECONDS,
) -> dict[str, Any]:
    """Wait for the timer runs to complete; their lateness and due-to-next-node times."""
    run_ids = started["runIds"]
    window_end = started["firstDue"] + int(window_seconds * 1000)
    time.sleep(max(0.0, window_end / 1000 - time.time()))
    deadline = time.monotonic() + complete_seconds
    while (done := _count(server, "completed") - baseline_completed) < len(run_ids):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    all_done = time.time() * 1000 - started["firstDue"]
    ctx.say(f"timers: {done} of {len(run_ids)} completed, {all_done / 1000:.1f} s after due")
    late: list[float] = []
    to_next: list[float] = []
    fired_at: list[int] = []
    by_due: list[tuple[int, int]] = []
    for run_id in run_ids:
        view = server.client.get_run(run_id)
        if view.get("status") != "completed":
            continue
        out = view["output"]
        due = int(datetime.fromisoformat(out["nap"]["until"]).timestamp() * 1000 + 0.5)
        late_ms = int(out["nap"]["lateMs"])
        late.append(late_ms)
        fired_at.append(due + late_ms)
        by_due.append((due, late_ms))
        to_next.append(out["wallNs"] / 1e6 - due)
    by_due.sort()
    tenth = max(1, len(by_due) // 10)
    return {
        "completed": done,
        "allCompleted": done >= len(run_ids),
        "lastCompletedAfterFirstDueMs": round(all_done, 1),
        "latenessMs": {**figure(late), **_tails(late)},
        "latenessByTenthOfWindowMs": [
            percentile([lm for _, lm in by_due[i : i + tenth]], 50)
            for i in range(0, len(by_due), tenth)
        ],
        "dueToNextNodeMs": {**figure(to_next), **_tails(to_next)},
        "distinctFireTimes": len(set(fired_at)),
        "wokenPerSecond": round(done / max(all_done / 1000, 1e-3), 1),
    }


def _tails(values: list[float]) -> dict[str, float | None]:
    return {"p90": percentile(values, 90), "p99": percentile(values, 99)}


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _kill(server: OurServer, root: Path) -> float:
    """SIGKILL the server and what is left below it (its template); remove its directory."""
    began = time.monotonic()
    below: list[psutil.Process] = []
    with contextlib.suppress(psutil.Error):
        below = psutil.Process(server.pid).children(recursive=True)
    server.kill()
    # The template exits when the server's channel closes (then it is a zombie until
    # whoever adopted it reaps it: gone for this purpose); what is left after 3 s is killed.
    deadline = time.monotonic() + 3.0
    while (alive := [p for p in below if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.01)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    shutil.rmtree(root, ignore_errors=True)
    return round(time.monotonic() - began, 2)


def _scale(ctx: Context) -> dict[str, Any]:
    """Phases 2 and 3 on one server, killed at the end."""
    sizes = ctx.sizes
    root = ctx.section_dir("timers") / "scale"
    server = OurServer(ctx.procs, root).start()
    result: dict[str, Any] = {
        "target": sizes.timers_sleeping,
        "clients": sizes.parked_clients,
        "fillBudgetSeconds": sizes.timers_fill_seconds,
        "sleepDays": SLEEP_DAYS,
    }
    try:
        far = str(write_sleep_far(server.project, SLEEP_DAYS))
        filled = parked._fill(
            ctx,
            server,
            far,
            target=sizes.timers_sleeping,
            seconds=sizes.timers_fill_seconds,
            label="timers",
        )
        filled.pop("runIds")
        filled["sleeping"] = filled.pop("parked")
        filled["sleepRatePerSecond"] = filled.pop("parkRatePerSecond")
        filled["sleepSeconds"] = filled.pop("parkedSeconds")
        result.update(filled)
        result.update(_while_sleeping(server, sizes.timers_idle_seconds))
        until = str(write_sleep_until(server.project))
        baseline = _count(server, "waiting")
        completed = _count(server, "completed")
        rate = filled["sleepRatePerSecond"]
        started = _start_timers(
            ctx, server, until, rate, baseline, sizes.timers_due, sizes.timers_due_window_seconds
        )
        timers = {k: v for k, v in started.items() if k not in ("runIds", "firstDue")}
        timers.update(
            count=sizes.timers_due,
            windowSeconds=sizes.timers_due_window_seconds,
            sleepingMeanwhile=baseline,
        )
        timers.update(_fired(ctx, server, started, completed, sizes.timers_due_window_seconds))
        result["timers"] = timers
        result["wakeups"] = _wakeups(ctx, server, until, rate)
    finally:
        result["teardownSeconds"] = _kill(server, root)
        ctx.say(f"timers: server killed and its directory removed in {result['teardownSeconds']} s")
    return result


def _wakeups(ctx: Context, server: OurServer, workflow: str, rate: float) -> dict[str, Any]:
    """Phase 4: ``wakeups_count`` runs due within ``wakeups_window_seconds``."""
    sizes = ctx.sizes
    count, window = sizes.wakeups_count, sizes.wakeups_window_seconds
    if count <= 0:
        return {"skipped": "wakeups_count is 0"}
    asleep = _count(server, "waiting")
    completed = _count(server, "completed")
    # 10,000 take over a minute to start: a lead of twice that would idle for as long.
    started = _start_timers(ctx, server, workflow, rate, asleep, count, window, 1.4)
    found = {k: v for k, v in started.items() if k not in ("runIds", "firstDue")}
    found.update(
        count=count,
        windowSeconds=window,
        sleepingMeanwhile=asleep,
        capacity=int(server.client.status().get("capacity") or 0),
    )
    # At about 100 woken runs a second, 10,000 take minutes: the budget grows with the count.
    budget = max(COMPLETE_SECONDS, count / 20)
    found.update(_fired(ctx, server, started, completed, window, budget))
    return found


def run(ctx: Context) -> dict[str, Any]:
    """Measure and summarise; see the module docstring."""
    result: dict[str, Any] = {
        "method": (
            "latency: warm server, 1-node and 2-node chains, a node failing once with "
            "retry(attempts=2, delay=0), wait_event + signal, and the start section's "
            "validated answer, rotated per round; scale: runs asleep 30 days, then timers "
            "due within one second on the same server, which is killed at the end"
        ),
    }
    result["latency"] = _latency(ctx)
    result["sleeping"] = _scale(ctx)
    return result
