"""``latest.md``: the bench's results as tables a person reads; and the stdout summary.

Runs in the bench process. Every number is ``median [min-max]`` over the repetitions the
JSON names; ratios are per-round ratios summarised the same way.
"""

from __future__ import annotations

from typing import Any

NAMES = {"ours": "pi-workflows", "dbos": "DBOS", "langgraph": "LangGraph", "floor": "floor"}
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
        + "; ".join(f"{NAMES.get(k, k)} {fmt(v)}" for k, v in fixed.items()),
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
        ("completionMs", "run completed"),
    ):
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


def _parked(section: dict[str, Any]) -> list[str]:
    lines = ["## Parked scale", ""]
    if "error" in section:
        return [*lines, f"FAILED: {section['error']}", ""]
    lat = section["latency"]
    lines += [
        f"Target {section['target']} runs waiting at a checkpoint, default capacity, "
        f"{section['clients']} client threads. Measured: **{section['parked']} runs parked** in "
        f"{section['parkedSeconds']} s ({section['parkRatePerSecond']} runs/s).",
        "",
    ]

    def ms(key: str) -> str:
        found = lat.get(key) or {}
        return f"FAILED: {found['error']}" if "error" in found else f"{fmt(found)} ms"

    lines += _table(
        ["measure", "value"],
        [
            ["processes below the server while parked", str(section["processesHeld"])],
            ["runners held (server status)", str(section["runnersHeld"])],
            [
                "server RSS (parked / after the reads below)",
                f"{section['serverRssMiB']} / {section.get('serverRssAfterReadsMiB')} MiB",
            ],
            ["`run.list` (default limit 100)", ms("runListDefaultMs")],
            ["`run.list` status=waiting, limit 100", ms("runListWaitingMs")],
            ["`run.list` limit 1000", ms("runList1000Ms")],
            [f"`run.list` every run (limit {section['parked']})", ms("runListAllMs")],
            ["`run.get` (run show)", ms("runGetMs")],
            ["CLI `pi-workflows run list` (new process)", ms("cliRunListMs")],
            ["CLI `pi-workflows run show ID` (new process)", ms("cliRunShowMs")],
            [
                "`run.list` bytes per run / most runs one 1 MiB response holds",
                f"{section['listBytesPerRun']} / {section['maxRunsPerListResponse']}",
            ],
            [
                "answer all, completion throughput",
                f"{section['completed']} completed in {section['completionSeconds']} s = "
                f"**{section['completionPerSecond']} runs/s**"
                + ("" if section["allCompleted"] else " (NOT all completed in the budget)"),
            ],
        ],
    )
    extra = section.get("extrapolated")
    if extra:
        lines += [
            f"**{extra['label']}:** {extra['count']} runs would take ~{extra['parkSeconds']} s "
            f"to start and park and ~{extra['completionSeconds']} s to complete after answers;"
            f" server RSS ~{extra['serverRssMiB']} MiB; `run.list` of every run "
            + (
                f"~{extra['runListAllMs']} ms"
                if extra["runListAllFitsOneFrame"]
                else "does not fit one 1 MiB response (the connection is closed)"
            )
            + "; processes held while parked: 0 (a waiting run holds none).",
            "",
        ]
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
    lines += _machine(results)
    lines += _systems(results)
    for name, render in (
        ("nodes", _nodes),
        ("start", _start),
        ("recovery", _recovery),
        ("parked", _parked),
        ("pi", _pi),
        ("profile", _profile),
    ):
        if name in results:
            lines += render(results[name])
    if results.get("chart"):
        lines += [f"![main figures]({results['chart']})", ""]
    elif results.get("chartNote"):
        lines += [f"Chart: {results['chartNote']}.", ""]
    lines += [
        f"Total time: {results.get('durationSeconds')} s. Sections: "
        + ", ".join(f"{s} {results.get(s, {}).get('seconds')} s" for s in results["sections"]),
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
            f"  parked {parked['parked']} runs: {parked['processesHeld']} processes held, RSS "
            f"{parked['serverRssMiB']} MiB; completion {parked['completionPerSecond']} runs/s"
        )
    bridge = results.get("pi", {})
    if "ours" in bridge:
        lines.append(
            f"  Pi: start to step {fmt(bridge['ours']['piStartToStepMs'])} ms; submit to next "
            f"node {fmt(bridge['ours']['submitToNextNodeMs'])} ms"
        )
    elif "skipped" in bridge:
        lines.append(f"  Pi: skipped ({bridge['skipped']})")
    if results.get("errors"):
        lines.append(f"  ERRORS: {len(results['errors'])} (see latest.md)")
    return "\n".join(lines)
