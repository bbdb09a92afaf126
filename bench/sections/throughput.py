"""Section: concurrent throughput, many runs of a chain at a fixed capacity, beside DBOS.

Runs in the bench process. For each capacity (``PI_WORKFLOWS_MAX_RUNNERS`` = 4 and 16 in
a full run) a fresh server runs ``throughput_runs`` runs of a chain of
``throughput_nodes`` no-op nodes, all started at once by ``parked_clients`` client threads
(``run.start`` answers at once: a run waits in the server's queue until a runner slot is
free). The figure is **nodes per second** = runs x nodes / (the first ``run.start`` sent
to the moment the bench sees every run completed, polling ``server.status`` every 20 ms),
with runs per second beside it; the largest number of live runners seen while polling
shows the capacity was used.

DBOS runs the same shape in its own process (a worker of ``dbos_peer.py`` per capacity):
``throughput_runs`` workflows of ``throughput_nodes`` steps enqueued on a DBOS queue with
``worker_concurrency`` = the capacity, its polling interval set to ``DBOS_POLL_SECONDS``
(DBOS's default, 1 s, would cap it at a few workflows per second), timed from the first
enqueue to the last result. Both sides get a small warm-up batch first (the runner
template and description cache; DBOS's queue worker thread, which starts within its 1 s
registration check). Systems alternate per repetition; ratios are per repetition.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from bench.context import Context
from bench.ourserver import BenchError, OurServer
from bench.peers import PeerWorker
from bench.stats import figure, ratios
from bench.workflows import write_chain
from pi_workflows.client import Client

DBOS_POLL_SECONDS = 0.01
"""DBOS queue polling interval used here (DBOS's default is 1.0 s)."""
POLL_SECONDS = 0.02
FAILED = ("failed", "timed_out", "cancelled", "ambiguous", "paused")


def _start_all(server: OurServer, workflow: str, count: int, threads: int) -> list[str]:
    """Start ``count`` runs from ``threads`` client threads; the errors, if any."""
    errors: list[str] = []

    def work(share: int) -> None:
        with Client(server.home, autostart=False, timeout=120.0) as client:
            for _ in range(share):
                try:
                    client.start_run(workflow, {})
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    return

    shares = [count // threads + (1 if i < count % threads else 0) for i in range(threads)]
    workers = [threading.Thread(target=work, args=(s,), daemon=True) for s in shares if s]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return errors


def _ours(server: OurServer, workflow: str, runs: int, clients: int) -> dict[str, float]:
    """One batch of ``runs`` on ``server``: seconds to submit, seconds to all completed."""
    status = server.client.status().get("runsByStatus", {})
    done_before = int(status.get("completed", 0))
    began = time.monotonic()
    submitted: dict[str, Any] = {}
    starter = threading.Thread(
        target=lambda: submitted.update(
            errors=_start_all(server, workflow, runs, clients), at=time.monotonic()
        ),
        daemon=True,
    )
    starter.start()
    deadline = began + max(120.0, runs * 1.0)
    most_runners = 0
    while True:
        found = server.client.status()
        by_status = found.get("runsByStatus", {})
        most_runners = max(most_runners, len(found.get("runners", [])))
        completed = int(by_status.get("completed", 0)) - done_before
        if completed >= runs:
            break
        if bad := {k: by_status[k] for k in FAILED if by_status.get(k)}:
            raise BenchError(f"runs ended {bad} (see {server.root / 'server.log'})")
        if submitted.get("errors"):
            raise BenchError(f"run.start failed: {submitted['errors'][0]}")
        if time.monotonic() > deadline:
            raise BenchError(f"only {completed} of {runs} runs completed in time")
        time.sleep(POLL_SECONDS)
    seconds = time.monotonic() - began
    starter.join()
    return {
        "seconds": seconds,
        "submitSeconds": submitted.get("at", began) - began,
        "mostRunnersSeen": float(most_runners),
    }


def _dbos(worker: PeerWorker, runs: int, nodes: int, capacity: int) -> dict[str, float]:
    answer = worker.call(
        "throughput",
        timeout=max(300.0, runs * 2.0),
        runs=runs,
        nodes=nodes,
        concurrency=capacity,
        poll=DBOS_POLL_SECONDS,
    )
    return {
        "seconds": (answer["endNs"] - answer["t0Ns"]) / 1e9,
        "submitSeconds": (answer["enqueuedNs"] - answer["t0Ns"]) / 1e9,
    }


def _capacity(ctx: Context, directory: Path, capacity: int) -> dict[str, Any]:
    """Every repetition at one capacity, pi-workflows and DBOS alternating."""
    sizes = ctx.sizes
    runs, nodes = sizes.throughput_runs, sizes.throughput_nodes
    warm = min(runs, capacity)
    server = OurServer(
        ctx.procs,
        directory / f"ours-c{capacity}",
        extra_env={"PI_WORKFLOWS_MAX_RUNNERS": str(capacity)},
    ).start()
    workflow = str(write_chain(server.project, nodes))
    dbos: PeerWorker | None = None
    dbos_error: str | None = None
    if ctx.peer("dbos") and ctx.peers.python is not None:
        try:
            dbos = PeerWorker(
                ctx.procs,
                ctx.peers.python,
                "dbos_peer.py",
                ["worker", str(directory / f"dbos-c{capacity}.sqlite")],
                directory / f"dbos-c{capacity}.log",
            )
            _dbos(dbos, warm, nodes, capacity)
        except Exception as exc:
            dbos_error = f"{type(exc).__name__}: {exc}"[:300]
            ctx.errors.append(f"throughput: dbos: {dbos_error}")
            if dbos is not None:
                dbos.close()
            dbos = None
    series: dict[str, dict[str, list[float]]] = {"ours": {}, "dbos": {}}
    try:
        _ours(server, workflow, warm, sizes.parked_clients)
        for rep in range(sizes.throughput_reps):
            order = ["ours", "dbos"] if rep % 2 == 0 else ["dbos", "ours"]
            for system in order:
                if system == "dbos" and dbos is None:
                    continue
                ctx.say(f"throughput: capacity {capacity}, rep {rep + 1}, {system}")
                if system == "ours":
                    values = _ours(server, workflow, runs, sizes.parked_clients)
                else:
                    assert dbos is not None
                    values = _dbos(dbos, runs, nodes, capacity)
                values["nodesPerSecond"] = runs * nodes / values["seconds"]
                values["runsPerSecond"] = runs / values["seconds"]
                for key, value in values.items():
                    series[system].setdefault(key, []).append(value)
    finally:
        if dbos is not None:
            dbos.close()
        server.stop()
    found: dict[str, Any] = {
        "ours": {k: _figure(k, v) for k, v in series["ours"].items()},
    }
    if series["dbos"]:
        found["dbos"] = {k: _figure(k, v) for k, v in series["dbos"].items()}
        found["ratios"] = {
            "ours/dbos (nodes per second)": ratios(
                series["ours"]["nodesPerSecond"], series["dbos"]["nodesPerSecond"]
            )
        }
    else:
        found["dbos"] = {"skipped": dbos_error or ctx.peer_status("dbos")}
    return found


def _figure(key: str, values: list[float]) -> dict[str, Any]:
    unit = {
        "nodesPerSecond": "nodes/s",
        "runsPerSecond": "runs/s",
        "mostRunnersSeen": "runners",
    }.get(key, "s")
    return figure(values, unit=unit)


def run(ctx: Context) -> dict[str, Any]:
    """Measure and summarise; see the module docstring."""
    directory = ctx.section_dir("throughput")
    sizes = ctx.sizes
    result: dict[str, Any] = {
        "method": (
            f"{sizes.throughput_runs} runs x {sizes.throughput_nodes} no-op nodes started at "
            f"once ({sizes.parked_clients} client threads), first start to all completed; "
            f"DBOS: the same chains enqueued on a queue with worker_concurrency = capacity, "
            f"polled every {DBOS_POLL_SECONDS:g} s, first enqueue to last result"
        ),
        "runs": sizes.throughput_runs,
        "nodesPerRun": sizes.throughput_nodes,
        "reps": sizes.throughput_reps,
        "dbosQueuePollSeconds": DBOS_POLL_SECONDS,
        "capacities": {},
    }
    for capacity in sizes.throughput_capacities:
        result["capacities"][str(capacity)] = _capacity(ctx, directory, capacity)
    return result
