"""Section: what OpenTelemetry export costs per node, beside the same chain with export off.

Runs in the bench process. Two servers, started alike, each over its own state directory:
``off`` with ``OTEL_SDK_DISABLED=true`` (nothing of OpenTelemetry is imported, as when no
endpoint is set), ``on`` exporting traces and metrics over OTLP/HTTP to a receiver in this
process on 127.0.0.1 (it answers every request 200 and counts them; decoding is not what is
measured). ``OTEL_BSP_SCHEDULE_DELAY`` is 200 ms, so the exporter runs several passes
during each chain and its thread competes with the runs for the CPU (the default 5 s would
mostly run between chains). Each round runs, on both servers in a rotating order, a
1-node workflow (the fixed cost) and a chain of N no-op nodes; per system, as in the
``nodes`` section:

- ``netPerNodeMs`` = (total(N) - median total(1)) / (N - 1);
- ``steadyPerNodeMs`` = (stamp of the last node - stamp of the first) / (N - 1), from the
  nodes' own clocks;
- ``serverCpuPerNodeMs``: the server process's CPU time (user + system, every thread, the
  exporter's included) over the chain's run, divided by N: a cost that other load on the
  machine does not inflate the way it inflates wall time;

and per round the difference ``on - off`` of the net per node and the ratio ``on / off``.
After the rounds, ``catchUpMs``: from the last run's completion until the exporter's
cursor reached the newest event (every span of the section sent).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psutil

from bench.context import Context
from bench.ourserver import BenchError, OurServer
from bench.stats import figure, median, ratios
from bench.workflows import write_chain

DELAY_MS = 200
CATCH_UP_SECONDS = 60.0


class Receiver:
    """An OTLP/HTTP endpoint that accepts everything (an empty protobuf answer is a valid
    export response) and counts requests and bytes."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                del args

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", "0"))
                self.rfile.read(size)
                with lock:
                    receiver.requests += 1
                    receiver.bytes += size
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _caught_up(server: OurServer) -> bool:
    conn = sqlite3.connect(f"file:{server.home / 'state.sqlite'}?mode=ro", uri=True)
    try:
        row = conn.execute(
            "SELECT (SELECT event_id FROM telemetry_cursors WHERE name = 'otlp'),"
            " (SELECT MAX(event_id) FROM events)"
        ).fetchone()
    finally:
        conn.close()
    return row[0] is not None and row[0] == row[1]


def _cpu_ms(server: OurServer) -> float:
    """CPU time (user + system) the server process has used, all its threads."""
    times = psutil.Process(server.pid).cpu_times()
    return (times.user + times.system) * 1000


def run(ctx: Context) -> dict[str, Any]:
    """Measure and summarise; see the module docstring."""
    directory = ctx.section_dir("otel")
    n = max(ctx.sizes.chain_sizes)
    receiver = Receiver()
    off_env = {"OTEL_SDK_DISABLED": "true"}
    on_env = {
        "OTEL_SDK_DISABLED": "false",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_BSP_SCHEDULE_DELAY": str(DELAY_MS),
        "OTEL_METRIC_EXPORT_INTERVAL": "1000",
        "OTEL_SERVICE_NAME": "pi-workflows-bench",
    }
    servers = {
        "off": OurServer(ctx.procs, directory / "off", off_env),
        "on": OurServer(ctx.procs, directory / "on", on_env),
    }
    totals: dict[str, dict[int, list[float]]] = {s: {1: [], n: []} for s in servers}
    steady: dict[str, list[float]] = {s: [] for s in servers}
    cpu: dict[str, list[float]] = {s: [] for s in servers}  # server CPU ms per node
    catch_up: list[float] = []
    try:
        for server in servers.values():
            server.start()
        files = {
            name: {size: write_chain(server.project, size) for size in (1, n)}
            for name, server in servers.items()
        }
        order = list(servers)
        for round_no in range(ctx.sizes.warmup + ctx.sizes.rounds):
            measured = round_no >= ctx.sizes.warmup
            turn = order[round_no % 2 :] + order[: round_no % 2]
            ctx.say(f"otel: {'round' if measured else 'warm-up'} {round_no} ({' '.join(turn)})")
            for name in turn:
                for size in (1, n):
                    before = _cpu_ms(servers[name])
                    marks = servers[name].run_to_end(files[name][size], {})
                    if not measured:
                        continue
                    if size == n:
                        cpu[name].append((_cpu_ms(servers[name]) - before) / n)
                    totals[name][size].append((marks["finishedWallNs"] - marks["t0WallNs"]) / 1e6)
                    if size == n:
                        output = marks["output"]
                        steady[name].append((output["t"] - output["first"]) / 1e6 / (n - 1))
        finished = time.monotonic()
        while not _caught_up(servers["on"]):
            if time.monotonic() - finished > CATCH_UP_SECONDS:
                raise BenchError("the exporter did not catch up within a minute")
            time.sleep(0.01)
        catch_up.append((time.monotonic() - finished) * 1000)
    finally:
        for server in servers.values():
            server.stop()
        receiver.close()
    net = {
        name: [(total - median(totals[name][1])) / (n - 1) for total in totals[name][n]]
        for name in servers
    }
    return {
        "method": (
            f"per round, a 1-node run and a {n}-node chain on a server with export off"
            " (OTEL_SDK_DISABLED=true) and one exporting to a local OTLP/HTTP receiver"
            f" (OTEL_BSP_SCHEDULE_DELAY={DELAY_MS} ms), order rotated; net per node ="
            " (total(N) - median total(1)) / (N - 1); median/min/max over rounds"
        ),
        "n": n,
        "rounds": ctx.sizes.rounds,
        "off": {
            "fixedMs": figure(totals["off"][1]),
            "netPerNodeMs": figure(net["off"]),
            "steadyPerNodeMs": figure(steady["off"]),
            "serverCpuPerNodeMs": figure(cpu["off"]),
        },
        "on": {
            "fixedMs": figure(totals["on"][1]),
            "netPerNodeMs": figure(net["on"]),
            "steadyPerNodeMs": figure(steady["on"]),
            "serverCpuPerNodeMs": figure(cpu["on"]),
        },
        "netDeltaMs": figure(a - b for a, b in zip(net["on"], net["off"], strict=True)),
        "ratios": {
            "on/off (net per node)": ratios(net["on"], net["off"]),
            "on/off (steady per node)": ratios(steady["on"], steady["off"]),
        },
        "exporter": {
            "catchUpMs": figure(catch_up),
            "requests": receiver.requests,
            "bytes": receiver.bytes,
        },
    }


def render(section: dict[str, Any], fmt: Any) -> list[str]:
    """The section's part of ``latest.md`` (``fmt`` formats a figure)."""
    lines = ["## OpenTelemetry export", ""]
    if "error" in section:
        return [*lines, f"FAILED: {section['error']}", ""]
    lines += [
        f"A chain of {section['n']} no-op nodes, export off vs on, ms, median [min-max] over"
        f" {section['rounds']} rounds.",
        "",
        "| measure | off | on |",
        "|---|---|---|",
    ]
    for key, label in (
        ("fixedMs", "fixed cost (1-node run)"),
        ("netPerNodeMs", "net per node"),
        ("steadyPerNodeMs", "steady per node"),
        ("serverCpuPerNodeMs", "server CPU per node (all its threads)"),
    ):
        lines.append(f"| {label} | {fmt(section['off'][key])} | {fmt(section['on'][key])} |")
    lines += [
        "",
        f"- net per node, on - off: {fmt(section['netDeltaMs'])} ms; "
        + "; ".join(f"{label}: {fmt(fig)}" for label, fig in section["ratios"].items()),
        f"- exporter caught up {fmt(section['exporter']['catchUpMs'])} ms after the last run"
        f" ended; {section['exporter']['requests']} OTLP requests,"
        f" {section['exporter']['bytes']} bytes",
        "",
    ]
    return lines
