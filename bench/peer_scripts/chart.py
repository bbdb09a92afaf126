"""Draw the bench's main figures (run with bench/.venv-peers/bin/python, which has matplotlib).

Usage: chart.py RESULTS_JSON OUT_PNG. Bars are medians; the whiskers span min to max.
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {
    "pi-workflows": "#1f77b4",
    "DBOS": "#d62728",
    "LangGraph": "#2ca02c",
    "floor": "#7f7f7f",
}


def bars(ax, groups, title, ylabel):
    """``groups``: [(group label, [(series label, figure | None), ...]), ...]."""
    series = []
    for _, items in groups:
        for label, _ in items:
            if label not in series:
                series.append(label)
    width = 0.8 / max(1, len(series))
    for s_index, label in enumerate(series):
        xs, heights, low, high = [], [], [], []
        for g_index, (_, items) in enumerate(groups):
            found = dict(items).get(label)
            if not found or found.get("median") is None:
                continue
            xs.append(g_index + (s_index - (len(series) - 1) / 2) * width)
            heights.append(found["median"])
            low.append(found["median"] - found["min"])
            high.append(found["max"] - found["median"])
        if xs:
            ax.bar(
                xs,
                heights,
                width,
                yerr=[low, high],
                capsize=3,
                label=label,
                color=COLORS.get(label.split(" ")[0]),
            )
            for x, h in zip(xs, heights, strict=True):
                ax.annotate(f"{h:.3g}", (x, h), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g.replace(": ", ":\n") for g, _ in groups], fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.legend(fontsize=7)


def main(results_path, png_path):
    with open(results_path) as handle:
        results = json.load(handle)
    panels = []
    nodes = results.get("nodes", {})
    if "chains" in nodes:
        groups = []
        for n, systems in nodes["chains"].items():
            items = [
                ("pi-workflows", systems.get("ours", {}).get("netPerNodeMs")),
                ("DBOS", systems.get("dbos", {}).get("netPerNodeMs")),
                ("LangGraph", systems.get("langgraph", {}).get("netPerNodeMs")),
                ("floor (commit + IPC)", nodes.get("floor", {}).get("perNodeMs")),
            ]
            groups.append((f"N={n}", items))
        panels.append((groups, "Durable node transition (net, per node)", "ms per node"))
    start = results.get("start", {})
    if "ours" in start:
        floor = start.get("floor", {})
        groups = [
            ("run.start ack", [("pi-workflows", start["ours"]["ackMs"])]),
            ("start to first node", [("pi-workflows", start["ours"]["firstNodeMs"])]),
            ("spawn: -c pass", [("floor", floor.get("spawnPassMs"))]),
            ("spawn: runner imports", [("floor", floor.get("spawnRunnerImportsMs"))]),
            ("spawn: resolver imports", [("floor", floor.get("spawnResolverImportsMs"))]),
        ]
        if "ackMs" in start.get("dbos", {}):
            groups[0][1].append(("DBOS (in-process)", start["dbos"]["ackMs"]))
            groups[1][1].append(("DBOS (in-process)", start["dbos"]["firstNodeMs"]))
        panels.append((groups, "Start latency (cold runner)", "ms"))
    recovery = results.get("recovery", {})
    if "ours" in recovery:
        dbos = recovery.get("dbos", {})
        groups = []
        for key, label in (
            ("readyMs", "process ready"),
            ("firstResumedNodeMs", "first resumed node"),
            ("completionMs", "run completed"),
        ):
            groups.append(
                (label, [("pi-workflows", recovery["ours"][key]), ("DBOS", dbos.get(key))])
            )
        panels.append((groups, "Recovery after SIGKILL (from new process spawn)", "ms"))
    throughput = results.get("throughput", {})
    if "capacities" in throughput:
        groups = [
            (
                f"capacity {capacity}",
                [
                    ("pi-workflows", found["ours"].get("nodesPerSecond")),
                    ("DBOS (queue)", found.get("dbos", {}).get("nodesPerSecond")),
                ],
            )
            for capacity, found in throughput["capacities"].items()
        ]
        shape = f"{throughput.get('runs')} runs x {throughput.get('nodesPerRun')} nodes"
        panels.append((groups, f"Concurrent throughput ({shape})", "nodes/s"))
    if not panels:
        sys.exit("nothing to draw")
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5))
    if len(panels) == 1:
        axes = [axes]
    for ax, (groups, title, ylabel) in zip(axes, panels, strict=True):
        bars(ax, groups, title, ylabel)
    machine = results.get("machine", {})
    fig.suptitle(
        f"pi-workflows bench {results.get('startedAt', '')}: {machine.get('cores')} cores, "
        f"Python {machine.get('python')}, SQLite {machine.get('sqlite')}"
        + (" (QUICK sizes)" if results.get("quick") else ""),
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
