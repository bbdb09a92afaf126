"""The performance issue's targets: every figure of this run beside its target, met or not.

Runs in the bench process, after the sections, on the results dict alone (no measurement
here). Each row is JSON-ready: the figure's name, the measured value (a median), the
target, the ratio the target asks for (from the same run), and ``status``: ``met``,
``not met``, or ``not measured`` (its section or peer did not run, or the run's shape was
not the target's: ``--quick`` sizes, fewer than 10,000 runs parked or asleep, fewer than
1,000 timers due in one second). A row is never marked met from an extrapolated figure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PARKED_TARGET = 10_000
PARKED_SECONDS = 120.0
RSS_BYTES = 100 * 10**6
THROUGHPUT_SHAPE = (500, 10)
SLEEPING_TARGET = 10_000
SLEEPING_RSS_RATIO = 1.2
"""Server RSS with 10,000 runs asleep: at most 1.2x the same-run 10,000-parked RSS."""
TIMERS_DUE = 1_000
TIMERS_WINDOW_SECONDS = 1.0
FAN_OUT_CHILDREN = 100
FAN_OUT_RATIO = 1.5
"""fan_out of 100 at concurrency 16: at most 1.5x the same 100 runs started by a client."""
WAKE_SMALL = (1_000, 1.0)
"""1,000 runs due within 1 s (the timers section's phase 3)."""
WAKE_SMALL_DBOS_SECONDS = 3.07
"""DBOS's median due -> next step for 1,000 workflows due within 1 s, as issue 35 measured
it with a script outside the bench (DBOS's durable sleep is not run by the bench)."""
WAKE_LARGE = (10_000, 10.0)
"""10,000 runs due within 10 s (the timers section's phase 4)."""
WAKE_LARGE_BEFORE_SECONDS = 115.0
"""Their median due -> next node at ac5373a (capacity 4), as issue 35 measured it."""
NO_REGRESSION = 1.10
"""This commit against the baseline commit, same run: at most 10% slower (or 10% fewer runs
a second) before the row says the change regressed."""
JOIN_CHILDREN = 1_000
UI_RUNS = 10_000
UI_FIRST_PAGE_MS = 300.0
UI_FAN_OUT_MS = 500.0
UI_LATENCY_MS = 250.0
"""The web page's targets (issue 31): the runs page's first page with 10,000 runs, a
1,000-child fan-out's run page, and commit -> browser, each a median in milliseconds."""
FORK_NODES = 100
FORK_RATIO = 2.0
"""Fork of a completed 100-node run (to completed): at most 2x starting a 1-node run."""

Row = dict[str, Any]


def _median(fig: Any) -> float | None:
    if isinstance(fig, dict) and isinstance(fig.get("median"), int | float):
        return float(fig["median"])
    return None


def _get(results: dict[str, Any], *path: str) -> Any:
    found: Any = results
    for key in path:
        if not isinstance(found, dict):
            return None
        found = found.get(key)
    return found


def _status(checks: list[bool | None]) -> str:
    """``not met`` if any check fails, ``not measured`` if one could not be made."""
    if any(check is False for check in checks):
        return "not met"
    if not checks or any(check is None for check in checks):
        return "not measured"
    return "met"


def _g(value: float | None) -> str:
    """Three significant digits, or a dash."""
    return "-" if value is None else f"{value:.3g}"


def _at_most(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


def _row(
    key: str,
    figure: str,
    value: float | None,
    unit: str,
    target: str,
    checks: list[bool | None],
    ratio: tuple[str, float | None] | None = None,
    note: str | None = None,
) -> Row:
    row: Row = {
        "id": key,
        "figure": figure,
        "value": None if value is None else round(value, 4),
        "unit": unit,
        "target": target,
        "status": _status(checks),
    }
    if ratio is not None:
        row["ratio"] = {"label": ratio[0], "value": ratio[1]}
    if note:
        row["note"] = note
    return row


def _start(results: dict[str, Any]) -> list[Row]:
    first = _median(_get(results, "start", "ours", "firstNodeMs"))
    ratio = _median(_get(results, "start", "ratios", "first node / python -c pass spawn"))
    ack = _median(_get(results, "start", "ours", "ackMs"))
    return [
        _row(
            "startToFirstNode",
            "start -> first node started (unchanged workflow, warm server)",
            first,
            "ms",
            "<= 25 ms and <= 2.5x a `python -c pass` spawn",
            [_at_most(first, 25.0), _at_most(ratio, 2.5)],
            ("x `python -c pass` spawn", ratio),
        ),
        _row(
            "runStartAck",
            "`run.start` acknowledged (durable receipt)",
            ack,
            "ms",
            "<= 10 ms",
            [_at_most(ack, 10.0)],
        ),
    ]


def _fork(results: dict[str, Any]) -> list[Row]:
    ours = _get(results, "start", "ours") or {}
    fork = _median(ours.get("forkMs"))
    ratio = _median(
        _get(results, "start", "ratios", "fork of the 100-node run / 1-node start (to completed)")
    )
    shaped = _get(results, "start", "forkedNodes") == FORK_NODES
    node = _median(ours.get("forkFirstNodeMs"))
    return [
        _row(
            "forkOf100",
            "`run fork` of a completed 100-node run (from its last node) -> completed",
            fork,
            "ms",
            "<= 2x starting a 1-node run (start -> completed, same repetitions)",
            [_at_most(ratio, FORK_RATIO) if shaped else None],
            ("x the 1-node run's start", ratio),
            None if node is None else f"fork -> its node started {_g(node)} ms",
        )
    ]


def _nodes(results: dict[str, Any]) -> list[Row]:
    fixed = _median(_get(results, "nodes", "fixedMs", "ours"))
    fixed_ratio = _median(_get(results, "nodes", "fixedRatios", "ours/langgraph (fixed cost)"))
    net = _median(_get(results, "nodes", "chains", "100", "ours", "netPerNodeMs"))
    net_ratio = _median(_get(results, "nodes", "ratios", "100", "ours/langgraph (net per node)"))
    writes = _get(results, "nodes", "durableWrites", "ours") or {}
    commits = _get(writes, "commits", "marginalPerNode")
    fsyncs = _get(writes, "fsyncs", "marginalPerNode")
    counted = fsyncs if fsyncs is not None else commits
    durable = [None if commits is None else commits >= 0.99]
    if "fsyncs" in writes:
        durable.append(fsyncs is not None and fsyncs >= 0.99)
    peers = "; ".join(
        f"{peer} {_get(results, 'nodes', 'durableWrites', peer, 'marginalPerNode')}"
        for peer in ("langgraph", "dbos")
        if _get(results, "nodes", "durableWrites", peer, "marginalPerNode") is not None
    )
    if fsyncs is not None:
        how = (
            f"fdatasync/fsync calls per node ({writes.get('syscallMethod')}); "
            f"commits per node from the WAL: {commits}"
        )
    elif commits is not None:
        how = f"commits per node from the WAL; {writes.get('syscallMethod')}"
    else:
        how = ""
    return [
        _row(
            "fixedCost",
            "fixed cost: 1-node run start -> completed",
            fixed,
            "ms",
            "<= 30 ms and <= 7x LangGraph",
            [_at_most(fixed, 30.0), _at_most(fixed_ratio, 7.0)],
            ("x LangGraph (same rounds)", fixed_ratio),
        ),
        _row(
            "netPerNode",
            "durable node, net per node, N=100",
            net,
            "ms",
            "<= 0.5 ms and <= 0.5x LangGraph",
            [_at_most(net, 0.5), _at_most(net_ratio, 0.5)],
            ("x LangGraph (same rounds)", net_ratio),
        ),
        _row(
            "fsyncedCommitsPerNode",
            "still one fsynced commit per node",
            counted,
            "per node",
            ">= 1 (no node's commit skipped or batched)",
            durable,
            note=how + (f"; peers, fsync calls per node: {peers}" if peers else ""),
        ),
    ]


def _parked(results: dict[str, Any]) -> list[Row]:
    parked = _get(results, "parked") or {}
    count = parked.get("parked")
    at_scale = isinstance(count, int) and count >= PARKED_TARGET
    scale_note = (
        None if at_scale or count is None else f"measured at {count} parked runs, not 10,000"
    )
    seconds = parked.get("parkedSeconds")
    rss = parked.get("serverRssMiB")
    listing = _median(_get(parked, "latency", "runListDefaultMs"))
    complete = parked.get("completionPerSecond")

    def scaled(check: bool | None) -> bool | None:
        return check if at_scale else None

    return [
        _row(
            "parkedPerSecond",
            "runs started and parked at a checkpoint",
            parked.get("parkRatePerSecond"),
            "runs/s",
            ">= 150 runs/s",
            [None if "parkRatePerSecond" not in parked else parked["parkRatePerSecond"] >= 150],
        ),
        _row(
            "completionsPerSecond",
            "completions after answering parked runs, default capacity",
            complete,
            "runs/s",
            ">= 150 runs/s",
            [None if complete is None else complete >= 150 and bool(parked.get("allCompleted"))],
        ),
        _row(
            "parked10k",
            "10,000 parked runs, started and parked inside `make bench`",
            count,
            "runs parked",
            "10,000 parked in <= 120 s",
            [None if count is None else at_scale and seconds <= PARKED_SECONDS],
            note=None
            if count is None
            else f"in {seconds} s (budget {parked.get('fillBudgetSeconds')} s)",
        ),
        _row(
            "parkedProcesses",
            "10,000 parked: processes below the server",
            parked.get("processesHeld"),
            "processes",
            "0",
            [scaled(None if count is None else parked.get("processesHeld") == 0)],
            note=scale_note,
        ),
        _row(
            "parkedRss",
            "10,000 parked: server RSS",
            rss,
            "MiB",
            "<= 100 MB (95.4 MiB)",
            [scaled(None if rss is None else rss * 2**20 <= RSS_BYTES)],
            note=scale_note,
        ),
        _row(
            "parkedRunList",
            "10,000 parked: `run.list` (a page of 100)",
            listing,
            "ms",
            "<= 10 ms",
            [scaled(_at_most(listing, 10.0))],
            note=scale_note,
        ),
    ]


def _throughput(results: dict[str, Any]) -> list[Row]:
    section = _get(results, "throughput") or {}
    shape = (section.get("runs"), section.get("nodesPerRun"))
    rows = []
    for capacity in ("4", "16"):
        ours = _median(_get(section, "capacities", capacity, "ours", "nodesPerSecond"))
        dbos = _median(_get(section, "capacities", capacity, "dbos", "nodesPerSecond"))
        ratio = _median(
            _get(section, "capacities", capacity, "ratios", "ours/dbos (nodes per second)")
        )
        measured = ours is not None and dbos is not None and shape == THROUGHPUT_SHAPE
        note = f"DBOS {dbos:.0f} nodes/s" if dbos is not None else "DBOS not measured"
        if section and shape != THROUGHPUT_SHAPE:
            note += f"; shape {shape[0]} x {shape[1]}, not 500 x 10"
        rows.append(
            _row(
                f"throughputCapacity{capacity}",
                f"concurrent throughput, 500 runs x 10 nodes, capacity {capacity}",
                ours,
                "nodes/s",
                "measured, beside DBOS with its queue",
                [True if measured else None],
                ("x DBOS nodes/s (same run)", ratio),
                note if section else None,
            )
        )
    return rows


def _cli(results: dict[str, Any]) -> list[Row]:
    latency = _get(results, "parked", "latency") or {}
    rows = []
    for key, label in (("cliRunShow", "run show"), ("cliRunList", "run list")):
        value = _median(latency.get(f"{key}Ms"))
        ratio = _median(latency.get(f"{key}PerSpawnPass"))
        rows.append(
            _row(
                key,
                f"CLI `pi-workflows {label}` in a new process",
                value,
                "ms",
                "<= 60 ms",
                [_at_most(value, 60.0)],
                ("x `python -c pass` spawn (same repetitions)", ratio),
            )
        )
    return rows


def _at_least(value: float | None, limit: float) -> bool | None:
    return None if value is None else value >= limit


def _per(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def _baseline(results: dict[str, Any]) -> list[Row]:
    """This commit beside the baseline commit (``bench/baseline.txt``), in the same run."""
    base = results.get("baseline") or {}
    label = base.get("commit", "")[:7] or "-"
    why = base.get("skipped")
    net = _median(_get(results, "nodes", "ratios", "100", "ours/baseline (net per node)"))
    parked = _get(results, "parked") or {}
    theirs = parked.get("baseline") or {}
    rows = [
        _row(
            "vsBaselineNetPerNode",
            f"durable node, net per node, N=100: this commit / baseline {label}",
            net,
            "x",
            f"<= {NO_REGRESSION:g} (no regression; < 1 is faster)",
            [_at_most(net, NO_REGRESSION)],
            note=why,
        )
    ]
    shape = parked.get("parked") == theirs.get("parked") and bool(theirs)
    for key, field, figure in (
        ("vsBaselineParked", "parkRatePerSecond", "runs started and parked per second"),
        ("vsBaselineCompletions", "completionPerSecond", "completions after answering"),
    ):
        ratio = _per(parked.get(field), theirs.get(field))
        rows.append(
            _row(
                key,
                f"{figure}: this commit / baseline {label}",
                ratio,
                "x",
                f">= {1 / NO_REGRESSION:.2f} (no regression; > 1 is faster)",
                [_at_least(ratio, 1 / NO_REGRESSION) if shape else None],
                note=why
                or (
                    f"this commit {parked.get(field)}, baseline {theirs.get(field)} runs/s"
                    if theirs
                    else "the baseline was not measured"
                ),
            )
        )
    mine, baseline_cli = parked.get("latency") or {}, theirs.get("latency") or {}
    for key, label_cli in (("cliRunShow", "run show"), ("cliRunList", "run list")):
        ratio = _per(_median(mine.get(f"{key}Ms")), _median(baseline_cli.get(f"{key}Ms")))
        rows.append(
            _row(
                f"vsBaseline{key[0].upper()}{key[1:]}",
                f"CLI `pi-workflows {label_cli}`: this commit / baseline {label}",
                ratio,
                "x",
                f"<= {NO_REGRESSION:g} (no regression)",
                [_at_most(ratio, NO_REGRESSION)],
                note=why,
            )
        )
    return rows


def _wakeups(results: dict[str, Any]) -> list[Row]:
    """Due -> next node started for 1,000 runs due within 1 s and 10,000 within 10 s."""
    sleeping = _get(results, "timers", "sleeping") or {}
    rows = []
    for key, found, (count, window), target, check in (
        (
            "wake1kMedian",
            sleeping.get("timers") or {},
            WAKE_SMALL,
            f"<= DBOS ({WAKE_SMALL_DBOS_SECONDS:g} s, issue 35's measurement outside the bench)",
            WAKE_SMALL_DBOS_SECONDS * 1000,
        ),
        (
            "wake10kMedian",
            sleeping.get("wakeups") or {},
            WAKE_LARGE,
            f"< {WAKE_LARGE_BEFORE_SECONDS:g} s (ac5373a, issue 35's measurement)",
            WAKE_LARGE_BEFORE_SECONDS * 1000,
        ),
    ):
        value = _get(found, "dueToNextNodeMs", "median")
        shape = (
            found.get("count") == count
            and found.get("windowSeconds") == window
            and bool(found.get("allAsleepBeforeFirstDue"))
            and bool(found.get("allCompleted"))
        )
        note = None
        if found:
            note = f"{found.get('wokenPerSecond')} woken runs/s"
            if found.get("capacity"):
                note += f" at capacity {found['capacity']}"
            if not shape:
                note += f"; shape {found.get('count')} due within {found.get('windowSeconds')} s"
        rows.append(
            _row(
                key,
                f"{count:,} runs due within {window:g} s: due -> next node started, median",
                None if value is None else value / 1000,
                "s",
                target,
                [_at_most(value, check) if shape else None],
                note=note,
            )
        )
    return rows


def _recovery(results: dict[str, Any]) -> list[Row]:
    value = _median(_get(results, "recovery", "ours", "readyToFirstResumedNodeMs"))
    dbos = _median(_get(results, "recovery", "dbos", "readyToFirstResumedNodeMs"))
    return [
        _row(
            "recoveryReadyToFirstNode",
            "recovery: server ready -> first resumed node",
            value,
            "ms",
            "<= 20 ms",
            [_at_most(value, 20.0)],
            note=None
            if dbos is None
            else f"DBOS, launch returned -> first resumed step: {dbos:.4g} ms",
        )
    ]


def _sleeping(results: dict[str, Any]) -> list[Row]:
    sleeping = _get(results, "timers", "sleeping") or {}
    count = sleeping.get("sleeping")
    at_scale = isinstance(count, int) and count >= SLEEPING_TARGET
    scale_note = (
        None if at_scale or count is None else f"measured at {count} sleeping runs, not 10,000"
    )
    rss = sleeping.get("serverRssMiB")
    parked = _get(results, "parked") or {}
    parked_rss, parked_count = parked.get("serverRssMiB"), parked.get("parked")
    parked_at_scale = isinstance(parked_count, int) and parked_count >= PARKED_TARGET
    ratio = rss / parked_rss if rss is not None and parked_rss else None
    if parked_rss is None:
        rss_note = "the parked section did not run: no 10,000-parked RSS to compare with"
    else:
        rss_note = f"parked section, {parked_count} parked: {parked_rss} MiB"
        if not parked_at_scale:
            rss_note += " (not 10,000)"
    if scale_note:
        rss_note = f"{scale_note}; {rss_note}"
    comparable = ratio is not None and at_scale and parked_at_scale
    rss_check = ratio <= SLEEPING_RSS_RATIO if comparable and ratio is not None else None
    idle = sleeping.get("idleServerCpuMsPerSecond")
    return [
        _row(
            "sleepingProcesses",
            "10,000 sleeping runs: processes below the server",
            sleeping.get("processesHeld"),
            "processes",
            "0 (the runner template apart)",
            [None if count is None or not at_scale else sleeping.get("processesHeld") == 0],
            note=scale_note
            or (None if idle is None else f"server CPU while all sleep: {idle} ms/s"),
        ),
        _row(
            "sleepingRss",
            "10,000 sleeping runs: server RSS",
            rss,
            "MiB",
            "within 20% of the 10,000-parked RSS (same run)",
            [rss_check],
            ("x the 10,000-parked RSS", None if ratio is None else round(ratio, 3)),
            rss_note,
        ),
    ]


def _timer_lateness(results: dict[str, Any]) -> list[Row]:
    timers = _get(results, "timers", "sleeping", "timers") or {}
    late = timers.get("latenessMs") or {}
    count, window = timers.get("count"), timers.get("windowSeconds")
    problems = []
    if timers:
        if not isinstance(count, int) or count < TIMERS_DUE:
            problems.append(f"{count} timers, not 1,000")
        if not isinstance(window, int | float) or window > TIMERS_WINDOW_SECONDS:
            problems.append(f"due over {window} s, not 1 s")
        if not timers.get("allAsleepBeforeFirstDue"):
            problems.append("not all were asleep before the first came due")
        if not timers.get("allCompleted"):
            problems.append(f"only {timers.get('completed')} completed")
    shape = bool(timers) and not problems
    beside = timers.get("sleepingMeanwhile")
    note = "; ".join(problems) or (
        None if beside is None else f"{count} due within {window} s, {beside} more asleep"
    )
    rows = []
    for key, stat, limit, label in (
        ("timerLatenessMedian", "median", 20.0, "median"),
        ("timerLatenessP99", "p99", 250.0, "p99"),
    ):
        value = late.get(stat)
        rows.append(
            _row(
                key,
                f"1,000 timers due in one second: {label} lateness (fired - due)",
                value,
                "ms",
                f"<= {limit:g} ms",
                [_at_most(value, limit) if shape else None],
                note=note,
            )
        )
    return rows


def _durable_latency(results: dict[str, Any]) -> list[Row]:
    latency = _get(results, "timers", "latency") or {}
    ours = latency.get("ours") or {}
    found = latency.get("ratios") or {}
    gap = _median(ours.get("retryGapMs"))
    budget_ratio = _median(found.get("retry try-to-try / (one transition + one runner start)"))
    per_transition = _median(found.get("retry try-to-try / one transition"))
    transition = _median(ours.get("transitionMs"))
    first = _median(ours.get("firstNodeMs"))
    start_first = _median(_get(results, "start", "ours", "firstNodeMs"))
    retry_note = None
    if latency:
        retry_note = (
            f"one transition {_g(transition)} ms and a runner start (start -> first node) "
            f"{_g(first)} ms in the same rounds; try-to-try / one transition "
            f"{_g(per_transition)}x"
        )
        if start_first is not None:
            retry_note += f"; start section's first node {_g(start_first)} ms"
    ack = _median(ours.get("signalAckMs"))
    to_next = _median(ours.get("signalToNextNodeMs"))
    signal_ratio = _median(found.get("signal -> next node / answer -> next node"))
    submit = _median(ours.get("submitToNextNodeMs"))
    start_submit = _median(_get(results, "start", "ours", "submitToNextNodeMs"))
    signal_note = None
    if latency:
        signal_note = f"answer -> next node in the same rounds {_g(submit)} ms"
        if start_submit is not None:
            signal_note += f"; start section's {_g(start_submit)} ms"
    return [
        _row(
            "retryNoDelay",
            "retry with `delay=0`: try 1 started -> try 2 started",
            gap,
            "ms",
            "<= one node transition + one runner start",
            [_at_most(budget_ratio, 1.0)],
            ("x (one transition + one runner start), per round", budget_ratio),
            retry_note,
        ),
        _row(
            "signalAck",
            "`run.signal` acknowledged (no validate: not held)",
            ack,
            "ms",
            "<= 10 ms",
            [_at_most(ack, 10.0)],
        ),
        _row(
            "signalToNextNode",
            "`run.signal` -> the waiting node's successor started",
            to_next,
            "ms",
            "<= 2x answer submitted -> next node started",
            [_at_most(signal_ratio, 2.0)],
            ("x answer -> next node, per round", signal_ratio),
            signal_note,
        ),
    ]


def _children(results: dict[str, Any]) -> list[Row]:
    section = _get(results, "children") or {}
    ratio = _median(section.get("ratio"))
    fan = _median(section.get("fanOutMs"))
    alone = _median(section.get("clientMs"))
    count = section.get("children")
    shaped = count == FAN_OUT_CHILDREN and section.get("capacity") == 16
    join = section.get("join") or {}
    claimed = join.get("runnersClaimed")
    join_shaped = join.get("children") == JOIN_CHILDREN and join.get("childEndsRecorded") == (
        JOIN_CHILDREN
    )
    wakes = None if claimed is None else claimed - 1  # the first runner precedes the wait
    fan_note = None
    if section:
        fan_note = f"{count} children, capacity {section.get('capacity')}; client {_g(alone)} ms"
    join_note = None
    if join:
        join_note = (
            f"{join.get('children')} children in {join.get('ms')} ms; the parent's "
            f"joins {join.get('joins')}, events "
            f"{join.get('events')} (one per child, each in that child's own transaction)"
        )
    return [
        _row(
            "fanOut100",
            "`fan_out` of 100 one-node children, concurrency 16: start -> joined",
            fan,
            "ms",
            "<= 1.5x starting the same 100 runs from a client at capacity 16",
            [_at_most(ratio, FAN_OUT_RATIO) if shaped else None],
            ("x the client's 100 runs, per round", ratio),
            fan_note,
        ),
        _row(
            "joinWakes",
            "join of 1,000 children: the parent's wakes (runners after the spawn)",
            wakes,
            "wakes",
            "1, not 1,000",
            [None if wakes is None or not join_shaped else wakes == 1],
            note=join_note,
        ),
    ]


def _ui(results: dict[str, Any]) -> list[Row]:
    section = _get(results, "ui") or {}
    first = _median(section.get("firstPageMs"))
    warm = _median(section.get("fanOutWarmMs"))
    cold = section.get("fanOutColdMs")
    latency = _median(section.get("commitToBrowserMs"))
    runs_shaped = section.get("runs") == UI_RUNS
    fan_shaped = section.get("fanOutChildren") == JOIN_CHILDREN
    fan_note = None if cold is None else f"first load {_g(float(cold))} ms, reloads {_g(warm)} ms"
    return [
        _row(
            "uiFirstPage",
            "web page: the runs page's first page with 10,000 runs",
            first,
            "ms",
            "<= 300 ms",
            [_at_most(first, UI_FIRST_PAGE_MS) if runs_shaped else None],
            note=None if not section else f"{section.get('runs')} runs",
        ),
        _row(
            "uiFanOutPage",
            "web page: the run page of a 1,000-child fan-out (first load)",
            None if cold is None else float(cold),
            "ms",
            "<= 500 ms",
            [_at_most(float(cold), UI_FAN_OUT_MS) if fan_shaped and cold is not None else None],
            note=fan_note,
        ),
        _row(
            "uiCommitToBrowser",
            "web page: a commit shown in a real browser (median)",
            latency,
            "ms",
            "<= 250 ms",
            [_at_most(latency, UI_LATENCY_MS)],
        ),
    ]


SOURCES: tuple[Callable[[dict[str, Any]], list[Row]], ...] = (
    _start,
    _nodes,
    _parked,
    _throughput,
    _cli,
    _recovery,
    _sleeping,
    _timer_lateness,
    _durable_latency,
    _children,
    _fork,
    _wakeups,
    _baseline,
    _ui,
)


def evaluate(results: dict[str, Any]) -> list[Row]:
    """Every target row, in the issue's order."""
    rows = [row for source in SOURCES for row in source(results)]
    order = [
        "startToFirstNode",
        "runStartAck",
        "fixedCost",
        "netPerNode",
        "fsyncedCommitsPerNode",
        "parkedPerSecond",
        "completionsPerSecond",
        "parked10k",
        "parkedProcesses",
        "parkedRss",
        "parkedRunList",
        "throughputCapacity4",
        "throughputCapacity16",
        "cliRunShow",
        "cliRunList",
        "wake1kMedian",
        "wake10kMedian",
        "recoveryReadyToFirstNode",
        "sleepingProcesses",
        "sleepingRss",
        "timerLatenessMedian",
        "timerLatenessP99",
        "retryNoDelay",
        "signalAck",
        "signalToNextNode",
        "fanOut100",
        "joinWakes",
        "forkOf100",
        "uiFirstPage",
        "uiFanOutPage",
        "uiCommitToBrowser",
        "vsBaselineNetPerNode",
        "vsBaselineParked",
        "vsBaselineCompletions",
        "vsBaselineCliRunShow",
        "vsBaselineCliRunList",
    ]
    return sorted(rows, key=lambda row: order.index(row["id"]))
