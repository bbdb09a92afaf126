"""``latest.md``: the bench's results as tables a person reads; and the stdout summary.

Runs in the bench process. Every number is ``median [min-max]`` over the repetitions the
JSON names; ratios are per-round ratios summarised the same way.
"""

from __future__ import annotations

from typing import Any

from bench.sections import otel, ui

NAMES = {
    "ours": "pi-workflows",
    "baseline": "pi-workflows at the baseline commit",
    "dbos": "DBOS",
    "langgraph": "LangGraph",
    "floor": "floor",
}
DURABLE_SYNC = ("FULL", "EXTRA")


def fmt(fig: dict[str, Any] | None, digits: int = 3) -> str:
    """``median [min-max]`` of a figure, or a dash."""
    if not fig or fig.get("median") is None:
        return "-"
    unit = fig.get("unit", "")
    suffix = "x" if unit == "x" else ""
    return f"{fig['median']:.{digits}g}{suffix} [{fig['min']:.{digits}g}-{fig['max']:.{digits}g}]"


def _durability(system: dict[str, Any]) -> str:
    journal, sync = system.get("journalMode"), system.get("synchronous")
    if not journal:
        return "-"
    label = f"journal_mode={journal}, synchronous={sync}"
    if sync not in DURABLE_SYNC:
        label += " (WEAKER fsync than pi-workflows)"
    return label


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


MARKS = {"met": "met", "not met": "**NOT met**", "not measured": "not measured"}


def _value(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g} {unit}"
    return f"{value} {unit}"


def _targets(results: dict[str, Any]) -> list[str]:
    rows = results.get("targets") or []
    if not rows:
        return []
    lines = [
        "## Targets (the performance issue's table)",
        "",
        "Each figure of this run (a median) beside its target; a ratio is from the same run. "
        "A figure taken at another shape (`--quick`, fewer than 10,000 runs parked or "
        "asleep, fewer than 1,000 timers due in one second) is *not measured*, never met; "
        "extrapolations are never used here.",
        "",
    ]
    table = []
    for row in rows:
        ratio = row.get("ratio")
        ratio_text = ""
        if ratio and isinstance(ratio.get("value"), int | float):
            ratio_text = f"{ratio['value']:.3g}{ratio['label']}"
        elif ratio:
            ratio_text = f"ratio not measured ({ratio['label'].lstrip('x ')})"
        measured = _value(row["value"], row["unit"])
        if ratio_text and row["value"] is not None:
            measured += f"; {ratio_text}"
        table.append(
            [row["figure"], measured, row["target"], MARKS[row["status"]], row.get("note", "")]
        )
    lines += _table(["figure", "this run", "target", "", "note"], table)
    counts = {status: sum(r["status"] == status for r in rows) for status in MARKS}
    lines += [", ".join(f"{n} {status}" for status, n in counts.items()) + ".", ""]
    return lines


def _machine(results: dict[str, Any]) -> list[str]:
    m = results.get("machine", {})
    return [
        "## Machine",
        "",
        *_table(
            ["cores", "CPU", "memory", "Python", "SQLite", "temp file system", "load at start"],
            [
                [
                    str(m.get("cores")),
                    str(m.get("cpuModel")),
                    f"{m.get('memoryGiB')} GiB",
                    str(m.get("python")),
                    str(m.get("sqlite")),
                    str(m.get("tempFilesystem")),
                    " ".join(str(x) for x in m.get("loadAverageAtStart", [])),
                ]
            ],
        ),
        f"Bytecode cache: {m.get('bytecodeCache')}. Kernel {m.get('kernel')}. Code: commit "
        f"{m.get('code', {}).get('commit')} with {m.get('code', {}).get('changedSrcFiles')} "
        "changed tracked files under src/.",
        "",
    ]


def _systems(results: dict[str, Any]) -> list[str]:
    systems = results.get("systems", {})
    rows = []
    for key in ("ours", "floor", "dbos", "langgraph"):
        s = systems.get(key)
        if not s:
            continue
        versions = s.get("versions") or {}
        version = s.get("version") or ", ".join(
            f"{k} {v}" for k, v in versions.items() if k not in ("python", "sqlite")
        )
        rows.append(
            [
                str(s.get("name")),
                version or "-",
                str(s.get("status")),
                _durability(s),
                str(s.get("sqlite") or versions.get("sqlite") or "-"),
                str(s.get("readFrom", "-")),
            ]
        )
    venv = systems.get("peerVenv", {})
    return [
        "## Systems and their SQLite durability settings",
        "",
        *_table(
            ["system", "version", "status", "durability (read with PRAGMA)", "SQLite", "read from"],
            rows,
        ),
        f"Peers run in their own venv `{venv.get('path')}` (pins: `bench/peers-requirements.txt`;"
        f" created this run: {venv.get('created')}, setup {venv.get('setupSeconds')} s).",
        "",
    ]


def _nodes(section: dict[str, Any]) -> list[str]:
    lines = ["## Durable node transition", ""]
    if "error" in section:
        return [*lines, f"FAILED: {section['error']}", ""]
    lines += [
        f"ms per node, median [min-max] over {section['rounds']} interleaved rounds after a "
        "warm-up. gross = total/N; **net = (total(N) - fixed) / (N-1)**, where fixed is the "
        "median total of a 1-node workflow, measured separately in the same rounds; steady = "
        "(last node stamp - first node stamp) / (N-1), the nodes' own clocks.",
        "",
    ]
    rows = []
    for n, systems in section["chains"].items():
        for key, fig in systems.items():
            rows.append(
                [
                    f"N={n}",
                    NAMES.get(key, key),
                    fmt(fig["grossPerNodeMs"]),
                    f"**{fmt(fig['netPerNodeMs'])}**",
                    fmt(fig["steadyPerNodeMs"]),
                    fmt(fig["totalMs"]),
                ]
            )
        floor = section["floor"]
        rows.append(
            [f"N={n}", "floor: 1 commit + 1 IPC round trip", "-", fmt(floor["perNodeMs"]), "-", "-"]
        )
    lines += _table(["N", "system", "gross", "net", "steady", "total ms"], rows)
    fixed = section.get("fixedMs", {})
    lines += [
        "Fixed cost (1-node workflow, start to completion, ms): "
        + "; ".join(f"{NAMES.get(k, k)} {fmt(v)}" for k, v in fixed.items())
        + "".join(f"; {k} {fmt(v)}" for k, v in section.get("fixedRatios", {}).items()),
        "",
        "Floor: durable commit (WAL, synchronous=FULL) "
        f"{fmt(section['floor']['commitMs'])} ms; newline-JSON round trip over a Unix socket "
        f"{fmt(section['floor']['ipcRoundTripMs'])} ms.",
        "",
    ]
    for peer, why in section.get("skipped", {}).items():
        lines += [f"{NAMES.get(peer, peer)}: {why}", ""]
    rows = []
    for n, pairs in section["ratios"].items():
        for label, fig in pairs.items():
            rows.append([f"N={n}", label, fmt(fig)])
    lines += ["Ratios (per round, then median [min-max]; < 1 means pi-workflows is faster):", ""]
    lines += _table(["N", "ratio", "value"], rows)
    return lines + _durable_writes(section.get("durableWrites", {}))


def _durable_writes(found: dict[str, Any]) -> list[str]:
    """Commits and fsync calls per node (bench/fsyncs.py)."""
    if not found:
        return []
    lines = [
        "### Commits and fsyncs per node",
        "",
        "Counted on a server (and peer workers) of their own, over a 1-node and an N-node "
        "run: per node = (count(N) - count(1)) / (N - 1), gross = count(N) / N. Commits are "
        "the valid commit frames the WAL gained (a read transaction held meanwhile so SQLite "
        "cannot restart the log); fsync calls are `fdatasync` + `fsync` system calls logged "
        "by strace in the run's window (server and its children).",
        "",
    ]
    ours = found.get("ours", {})
    rows = []
    if "error" in ours:
        rows.append(["pi-workflows", "FAILED", ours["error"], "-"])
    else:
        commits, fsync = ours.get("commits", {}), ours.get("fsyncs")
        rows.append(
            [
                "pi-workflows: commits (WAL commit frames)",
                f"**{commits.get('marginalPerNode')}**",
                str(commits.get("grossPerNode")),
                f"{commits.get('walFramesPerNode')} WAL pages written per node",
            ]
        )
        if fsync is not None:
            rows.append(
                [
                    "pi-workflows: fdatasync/fsync calls",
                    f"**{fsync.get('marginalPerNode')}**",
                    str(fsync.get("grossPerNode")),
                    f"calls by the server's children (runners): {fsync.get('childrenCalls')}",
                ]
            )
        else:
            rows.append(["pi-workflows: fdatasync/fsync calls", "-", "-", ours["syscallMethod"]])
    for peer in ("langgraph", "dbos"):
        if peer in found:
            them = found[peer]
            rows.append(
                [
                    f"{NAMES[peer]}: fdatasync/fsync calls",
                    str(them.get("marginalPerNode", "-")),
                    str(them.get("grossPerNode", "-")),
                    them.get("error", "in-process worker under strace"),
                ]
            )
    lines += _table(["count", "per node", "gross per node", "note"], rows)
    if "syscallMethod" in ours:
        lines += [f"System calls: {ours['syscallMethod']}.", ""]
    return lines


def _start(section: dict[str, Any]) -> list[str]:
    lines = ["## Start latency", ""]
    if "error" in section:
        return [*lines, f"FAILED: {section['error']}", ""]
    ours, floor, dbos = section["ours"], section["floor"], section.get("dbos", {})
    rows = [
        ["pi-workflows: `run.start` acknowledged (durable receipt)", fmt(ours["ackMs"])],
        ["pi-workflows: start to first node started (cold runner)", fmt(ours["firstNodeMs"])],
        ["pi-workflows: receipt to first node started", fmt(ours["ackToFirstNodeMs"])],
        [
            "pi-workflows: validated answer acknowledged (held for the validation runner)",
            fmt(ours["submitAckMs"]),
        ],
        [
            "pi-workflows: answer submitted to the next node started",
            fmt(ours["submitToNextNodeMs"]),
        ],
        ["floor: spawn `python -c pass`", fmt(floor["spawnPassMs"])],
        ["floor: spawn with the runner's imports", fmt(floor["spawnRunnerImportsMs"])],
        ["floor: spawn with the resolver's imports", fmt(floor["spawnResolverImportsMs"])],
    ]
    if "ackMs" in dbos:
        rows += [
            ["DBOS (in-process, no isolation): `start_workflow` returned", fmt(dbos["ackMs"])],
            ["DBOS (in-process): start to first step", fmt(dbos["firstNodeMs"])],
        ]
    else:
        rows.append(["DBOS", str(dbos.get("skipped", "-"))])
    lines += [f"ms, median [min-max] over {section['reps']} repetitions.", ""]
    lines += _table(["measure", "ms"], rows)
    lines += _table(
        ["ratio", "value"], [[label, fmt(fig)] for label, fig in section["ratios"].items()]
    )
    return lines


def _recovery(section: dict[str, Any]) -> list[str]:
    lines = ["## Recovery after SIGKILL", ""]
    if "error" in section:
        return [*lines, f"FAILED: {section['error']}", ""]
    lines += [
        f"{section['method']}. ms from spawning the new process, median [min-max] over "
        f"{section['reps']} repetitions.",
        "",
    ]
    dbos = section.get("dbos", {})
    ratios = section.get("ratios", {})
    rows = []
    for key, label in (
        ("readyMs", "new process ready (server hello / DBOS.launch returned)"),
        ("firstResumedNodeMs", "first resumed node started"),
        ("readyToFirstResumedNodeMs", "ready to first resumed node"),
        ("completionMs", "run completed"),
    ):
        if key not in section["ours"]:
            continue
        rows.append(
            [
                label,
                fmt(section["ours"][key]),
                fmt(dbos.get(key)) if key in dbos else str(dbos.get("skipped", "-")),
                fmt(ratios.get(f"ours/dbos ({key})")),
            ]
        )
    lines += _table(["measure", "pi-workflows", "DBOS", "ours/DBOS"], rows)
    floor = section.get("floor", {})
    lines += [
        "Floors: "
        + "; ".join(
            f"{label} {fmt(floor.get(key))} ms"
            for key, label in (
                ("spawnServerImportsMs", "spawn with the server's imports"),
                ("spawnDbosImportMs", "spawn with `import dbos`"),
            )
            if key in floor
        ),
        "",
    ]
    return lines


def _parked_baseline(found: dict[str, Any] | None) -> list[list[str]]:
    """The parked section's rows for the baseline commit, measured after this one's."""
    if not found:
        return []
    if "error" in found:
        return [["baseline commit", f"FAILED: {found['error']}"]]
    lat = found.get("latency") or {}
    return [
        [
            "baseline commit, the same section after this one: parked",
            f"{found['parked']} runs in {found['parkedSeconds']} s = "
            f"**{found['parkRatePerSecond']} runs/s**",
        ],
        [
            "baseline commit: answer all, completion throughput",
            f"{found['completed']} completed in {found['completionSeconds']} s = "
            f"**{found['completionPerSecond']} runs/s**",
        ],
        ["baseline commit: CLI `run list` (its own CLI)", f"{fmt(lat.get('cliRunListMs'))} ms"],
        ["baseline commit: CLI `run show ID`", f"{fmt(lat.get('cliRunShowMs'))} ms"],
    ]


def _parked(section: dict[str, Any]) -> list[str]:
    lines = ["## Parked scale", ""]
    if "error" in section:
        return [*lines, f"FAILED: {section['error']}", ""]
    lat = section["latency"]
    reached = (
        "the target reached"
        if section["reachedTarget"]
        else f"**target NOT reached in the {section.get('fillBudgetSeconds', '?')} s budget**"
    )
    lines += [
        f"Target {section['target']} runs waiting at a checkpoint, default capacity, "
        f"{section['clients']} client threads. Measured: **{section['parked']} runs parked** in "
        f"{section['parkedSeconds']} s = **{section['parkRatePerSecond']} runs/s** ({reached}). "
        f"Every figure below is measured with {section['parked']} runs parked.",
        "",
    ]

    def ms(key: str) -> str:
        found = lat.get(key) or {}
        return f"FAILED: {found['error']}" if "error" in found else f"{fmt(found)} ms"

    def ratio(key: str) -> str:
        found = lat.get(key)
        return f" ({fmt(found)} a `python -c pass` spawn)" if found else ""

    lines += _table(
        ["measure", "value"],
        [
            ["processes below the server while parked", str(section["processesHeld"])],
            ["runners held (server status)", str(section["runnersHeld"])],
            [
                "server RSS (parked / after the reads below)",
                f"{section['serverRssMiB']} / {section.get('serverRssAfterReadsMiB')} MiB",
            ],
            ["runner template RSS (a child of the server)", f"{section.get('templateRssMiB')} MiB"],
            ["`run.list` (default limit 100)", ms("runListDefaultMs")],
            ["`run.list` status=waiting, limit 100", ms("runListWaitingMs")],
            ["`run.list` limit 1000", ms("runList1000Ms")],
            [
                f"every run, paged with the `next` cursor ({section.get('listPages')} pages of "
                f"up to 1000; {section.get('listedByPaging')} listed)",
                ms("runListEveryRunPagedMs"),
            ],
            ["`run.get` (run show)", ms("runGetMs")],
            [
                "CLI `pi-workflows run list` (new process)",
                ms("cliRunListMs") + ratio("cliRunListPerSpawnPass"),
            ],
            [
                "CLI `pi-workflows run show ID` (new process)",
                ms("cliRunShowMs") + ratio("cliRunShowPerSpawnPass"),
            ],
            ["floor: spawn and reap `python -c pass` (same repetitions)", ms("spawnPassMs")],
            ["`run.list` bytes per run", str(section["listBytesPerRun"])],
            [
                "answer all, completion throughput",
                f"{section['completed']} completed in {section['completionSeconds']} s = "
                f"**{section['completionPerSecond']} runs/s**"
                + ("" if section["allCompleted"] else " (NOT all completed in the budget)"),
            ],
            [
                "server stop (SIGTERM to exit; killed after 10 s)",
                f"{section.get('serverStopSeconds')} s",
            ],
            *_parked_baseline(section.get("baseline")),
        ],
    )
    extra = section.get("extrapolated")
    if extra:
        lines += [
            f"**{extra['label']}:** {extra['count']} runs would take ~{extra['parkSeconds']} s "
            f"to start and park and ~{extra['completionSeconds']} s to complete after answers;"
            f" server RSS ~{extra['serverRssMiB']} MiB; every run paged in "
            f"~{extra['runListEveryRunPagedMs']} ms. Not measured: the targets table does not "
            "use these.",
            "",
        ]
    return lines


def _timers(section: dict[str, Any]) -> list[str]:
    lines = ["## Durable time: retries, events, sleeping runs, timers", ""]
    if "error" in section:
        return [*lines, f"FAILED: {section['error']}", ""]
    latency = section["latency"]
    ours = latency["ours"]
    lines += [
        f"Latency on a warm server, ms, median [min-max] over {latency['reps']} rounds (the "
        "five runs of a round in an order rotated every round); stamps are the nodes' own "
        "monotonic clocks, totals the completing transaction's time (ms resolution).",
        "",
    ]
    rows = [
        ["1-node chain: start to first node started (a runner start)", fmt(ours["firstNodeMs"])],
        ["2-node chain: node 1 to node 2 started (one transition)", fmt(ours["transitionMs"])],
        [
            "node failing once, `retry(attempts=2, delay=0)`: try 1 started to try 2 started",
            f"**{fmt(ours['retryGapMs'])}**",
        ],
        [
            "run totals: retry run - 1-node run / 2-node run - 1-node run",
            f"{fmt(latency['retryExtraTotalMs'])} / {fmt(latency['transitionTotalMs'])}",
        ],
        ["`run.signal` acknowledged (no validate)", f"**{fmt(ours['signalAckMs'])}**"],
        ["`run.signal` to the successor node started", f"**{fmt(ours['signalToNextNodeMs'])}**"],
        ["validated answer acknowledged (`start` section's code)", fmt(ours["submitAckMs"])],
        ["answer submitted to the next node started (same)", fmt(ours["submitToNextNodeMs"])],
    ]
    lines += _table(["measure", "ms"], rows)
    lines += _table(
        ["ratio (per round)", "value"],
        [[label, fmt(fig)] for label, fig in latency["ratios"].items()],
    )
    sleeping = section["sleeping"]
    if "sleeping" not in sleeping:
        return lines
    reached = (
        "the target reached"
        if sleeping["reachedTarget"]
        else f"**target NOT reached in the {sleeping['fillBudgetSeconds']} s budget**"
    )
    lines += [
        f"Sleeping scale: target {sleeping['target']} runs asleep for {sleeping['sleepDays']} "
        f"days, {sleeping['clients']} client threads, default capacity. Measured: "
        f"**{sleeping['sleeping']} runs asleep** in {sleeping['sleepSeconds']} s = "
        f"{sleeping['sleepRatePerSecond']} runs/s ({reached}).",
        "",
    ]
    rows = [
        [
            f"processes below the server while asleep (0.5 s / {sleeping['idleSeconds']} s later)",
            f"{sleeping['processesHeld']} / {sleeping['processesHeldAfterIdle']}",
        ],
        ["runners held (server status)", str(sleeping["runnersHeld"])],
        ["server RSS", f"{sleeping['serverRssMiB']} MiB"],
        ["runner template RSS (a child of the server)", f"{sleeping['templateRssMiB']} MiB"],
        [
            f"server CPU while every run sleeps ({sleeping['idleSeconds']} s, no client)",
            f"{sleeping['idleServerCpuMsPerSecond']} ms/s",
        ],
    ]
    timers = sleeping.get("timers")
    if timers:
        late, to_next = timers["latenessMs"], timers["dueToNextNodeMs"]

        def tails(fig: dict[str, Any]) -> str:
            p90, p99 = fig.get("p90"), fig.get("p99")
            if p90 is None or p99 is None:
                return fmt(fig)
            return f"{fmt(fig)}; p90 {p90:.3g}, p99 {p99:.3g}"

        asleep = (
            "all asleep"
            if timers["allAsleepBeforeFirstDue"]
            else f"**only {timers['asleepBeforeFirstDue']} asleep**"
        )
        rows += [
            [
                f"timers due over {timers['windowSeconds']} s ({timers['sleepingMeanwhile']} "
                "more asleep)",
                f"{timers['count']} started in {timers['startSeconds']} s, {asleep} "
                f"{timers['marginBeforeFirstDueMs']} ms before the first was due",
            ],
            ["timer lateness, fired - due (server clock, ms)", f"**{tails(late)}**"],
            [
                "median lateness by tenth of the window (ms)",
                ", ".join(f"{v:g}" for v in timers["latenessByTenthOfWindowMs"] if v is not None),
            ],
            ["distinct fire times (ms) of the timers", str(timers["distinctFireTimes"])],
            ["due to the successor node started (4 runner slots)", tails(to_next)],
            [
                "completed",
                f"{timers['completed']} of {timers['count']}, the last "
                f"{timers['lastCompletedAfterFirstDueMs']} ms after the first was due",
            ],
        ]
    woken = sleeping.get("wakeups") or {}
    if "dueToNextNodeMs" in woken:
        asleep = "all asleep" if woken["allAsleepBeforeFirstDue"] else "**not all asleep**"
        rows += [
            [
                f"mass wake-ups: {woken['count']} runs due over {woken['windowSeconds']} s "
                f"({woken['sleepingMeanwhile']} more asleep, capacity {woken['capacity']})",
                f"started in {woken['startSeconds']} s, {asleep} "
                f"{woken['marginBeforeFirstDueMs']} ms before the first was due",
            ],
            [
                "mass wake-ups: due to the successor node started (ms)",
                f"**{fmt(woken['dueToNextNodeMs'])}**; p99 {woken['dueToNextNodeMs'].get('p99')}",
            ],
            [
                "mass wake-ups: woken runs per second (completed / first due to last completed)",
                f"**{woken['wokenPerSecond']}**; {woken['completed']} completed, the last "
                f"{woken['lastCompletedAfterFirstDueMs']} ms after the first was due",
            ],
        ]
    rows.append(
        [
            "teardown (SIGKILL the server, remove its directory)",
            f"{sleeping.get('teardownSeconds')} s",
        ]
    )
    return lines + _table(["measure", "value"], rows)


def _throughput(section: dict[str, Any]) -> list[str]:
    lines = ["## Concurrent throughput", ""]
    if "error" in section:
        return [*lines, f"FAILED: {section['error']}", ""]
    lines += [f"{section['method']}. Median [min-max] over {section['reps']} repetitions.", ""]
    rows = []
    for capacity, found in section["capacities"].items():
        ours, dbos = found["ours"], found.get("dbos", {})
        rows.append(
            [
                capacity,
                f"**{fmt(ours['nodesPerSecond'])}**",
                fmt(ours["runsPerSecond"]),
                fmt(ours["mostRunnersSeen"]),
                f"**{fmt(dbos['nodesPerSecond'])}**"
                if "nodesPerSecond" in dbos
                else str(dbos.get("skipped", "-")),
                fmt(found.get("ratios", {}).get("ours/dbos (nodes per second)")),
            ]
        )
    lines += _table(
        [
            "capacity",
            "pi-workflows nodes/s",
            "pi-workflows runs/s",
            "most live runners seen",
            "DBOS nodes/s",
            "ours/DBOS",
        ],
        rows,
    )
    return lines


def _pi(section: dict[str, Any]) -> list[str]:
    lines = ["## The Pi bridge (real `pi`, scripted model)", ""]
    if "error" in section:
        return [*lines, f"FAILED: {section['error']}", ""]
    if "skipped" in section:
        return [*lines, f"Skipped: {section['skipped']}.", ""]
    ours = section["ours"]
    rows = [
        [
            "Pi started on a waiting run's session to the step at the model",
            fmt(ours["piStartToStepMs"]),
        ],
        ["`run.start` (Pi warm and idle) to the step at the model", fmt(ours["runStartToStepMs"])],
        [
            "the model's submitting tool call to the next node started",
            fmt(ours["submitToNextNodeMs"]),
        ],
    ]
    lines += [f"ms, median [min-max] over {section['reps']} repetitions ({section['method']}).", ""]
    return lines + _table(["measure", "ms"], rows)


def _profile(section: dict[str, Any]) -> list[str]:
    lines = ["## Profile: where one node's time goes", ""]
    if "error" in section:
        return [*lines, f"FAILED: {section['error']}", ""]
    server, runner = section["server"], section["runner"]
    lines += [f"{section['method']}.", ""]
    lines += _table(
        ["server, ms per node", "value"],
        [[k, f"{v:.3f}"] for k, v in server["perNodeMs"].items()]
        + [
            ["busy (all but idle)", f"{server['busyPerNodeMs']:.3f}"],
            ["SQL statements per node", str(server["sqlStatementsPerNode"])],
            ["transactions per node", str(server["transactionsPerNode"])],
        ]
        + [[f"entry point: {k}", f"{v:.3f}"] for k, v in server["entryPointsPerNodeMs"].items()],
    )
    lines += _table(
        ["runner, ms per node", "value"],
        [[k, f"{v:.3f}"] for k, v in runner["perNodeMs"].items()]
        + [["start-up per runner (imports, handshake, load)", f"{runner['startupPerRunnerMs']}"]],
    )
    lines += [f"Top functions: {', '.join(section['files'])} beside this file.", ""]
    return lines


def _otel(section: dict[str, Any]) -> list[str]:
    return otel.render(section, fmt)


def _ui(section: dict[str, Any]) -> list[str]:
    return ui.render(section, fmt)


def markdown(results: dict[str, Any]) -> str:
    """The whole ``latest.md``."""
    lines = [
        f"# pi-workflows bench, {results.get('startedAt')}",
        "",
        "One invocation of `python -m bench` on one machine; systems interleaved within each "
        "section; every figure is median [min-max] after a warm-up. Shared machines are noisy: "
        "compare ratios from the same run, not numbers across runs.",
        "",
    ]
    if results.get("quick"):
        lines += ["**QUICK sizes (smoke run): not for conclusions.**", ""]
    lines += _targets(results)
    lines += _machine(results)
    lines += _systems(results)
    for name, render in (
        ("nodes", _nodes),
        ("start", _start),
        ("recovery", _recovery),
        ("parked", _parked),
        ("timers", _timers),
        ("throughput", _throughput),
        ("pi", _pi),
        ("otel", _otel),
        ("ui", _ui),
        ("profile", _profile),
    ):
        if name in results:
            lines += render(results[name])
    if results.get("chart"):
        lines += [f"![main figures]({results['chart']})", ""]
    elif results.get("chartNote"):
        lines += [f"Chart: {results['chartNote']}.", ""]
    lines += [
        f"Total time: {results.get('durationSeconds')} s. Sections (load average at the end): "
        + ", ".join(
            f"{s} {results.get(s, {}).get('seconds')} s "
            f"({results.get(s, {}).get('loadAverageAtEnd', ['-'])[0]})"
            for s in results["sections"]
        ),
        "",
    ]
    if results.get("errors"):
        lines += ["## Errors", "", *[f"- {e}" for e in results["errors"]], ""]
    return "\n".join(lines)


def summary(results: dict[str, Any]) -> str:
    """A few headline lines for the terminal."""
    lines = [f"bench finished in {results.get('durationSeconds')} s"]
    m = results.get("machine", {})
    lines.append(
        f"  machine: {m.get('cores')} cores, {m.get('cpuModel')}, Python {m.get('python')}, "
        f"SQLite {m.get('sqlite')}, temp on {m.get('tempFilesystem')}"
    )
    for key, system in results.get("systems", {}).items():
        if key in NAMES:
            lines.append(f"  {system.get('name')}: {system.get('status')}; {_durability(system)}")
    nodes = results.get("nodes", {})
    for n, systems in nodes.get("chains", {}).items():
        parts = [f"{NAMES.get(k, k)} {fmt(v['netPerNodeMs'])}" for k, v in systems.items()]
        parts.append(f"floor {fmt(nodes['floor']['perNodeMs'])}")
        lines.append(f"  net ms per node, N={n}: " + "; ".join(parts))
    start = results.get("start", {})
    if "ours" in start:
        lines.append(
            f"  run.start ack {fmt(start['ours']['ackMs'])} ms; first node "
            f"{fmt(start['ours']['firstNodeMs'])} ms"
        )
    recovery = results.get("recovery", {})
    if "ours" in recovery:
        dbos = recovery.get("dbos", {})
        lines.append(
            f"  recovery first resumed node: ours {fmt(recovery['ours']['firstResumedNodeMs'])}"
            f" ms, DBOS {fmt(dbos.get('firstResumedNodeMs'))} ms"
        )
    parked = results.get("parked", {})
    if "parked" in parked:
        lines.append(
            f"  parked {parked['parked']} runs in {parked['parkedSeconds']} s "
            f"({parked['parkRatePerSecond']} runs/s): {parked['processesHeld']} processes held, "
            f"RSS {parked['serverRssMiB']} MiB; completion {parked['completionPerSecond']} runs/s"
        )
    timers = results.get("timers", {})
    if "latency" in timers:
        ours = timers["latency"]["ours"]
        lines.append(
            f"  retry delay=0 try-to-try {fmt(ours['retryGapMs'])} ms (one transition "
            f"{fmt(ours['transitionMs'])} ms); signal ack {fmt(ours['signalAckMs'])} ms, to "
            f"next node {fmt(ours['signalToNextNodeMs'])} ms"
        )
    sleeping = timers.get("sleeping", {})
    if "sleeping" in sleeping:
        late = sleeping.get("timers", {}).get("latenessMs", {})
        lines.append(
            f"  {sleeping['sleeping']} asleep: {sleeping['processesHeld']} processes held, RSS "
            f"{sleeping['serverRssMiB']} MiB; timer lateness median {late.get('median')} ms, "
            f"p99 {late.get('p99')} ms"
        )
    for capacity, found in results.get("throughput", {}).get("capacities", {}).items():
        dbos = found.get("dbos", {})
        lines.append(
            f"  throughput at capacity {capacity}: {fmt(found['ours']['nodesPerSecond'])} "
            f"nodes/s; DBOS {fmt(dbos.get('nodesPerSecond'))} nodes/s"
        )
    bridge = results.get("pi", {})
    if "ours" in bridge:
        lines.append(
            f"  Pi: start to step {fmt(bridge['ours']['piStartToStepMs'])} ms; submit to next "
            f"node {fmt(bridge['ours']['submitToNextNodeMs'])} ms"
        )
    elif "skipped" in bridge:
        lines.append(f"  Pi: skipped ({bridge['skipped']})")
    rows = results.get("targets") or []
    if rows:
        lines.append(
            "  targets: "
            + ", ".join(
                f"{sum(r['status'] == status for r in rows)} {status}"
                for status in ("met", "not met", "not measured")
            )
            + " (latest.md)"
        )
        for row in rows:
            if row["status"] == "not met":
                lines.append(f"    not met: {row['figure']}: {_value(row['value'], row['unit'])}")
    if results.get("errors"):
        lines.append(f"  ERRORS: {len(results['errors'])} (see latest.md)")
    return "\n".join(lines)
