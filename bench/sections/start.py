"""Section 3: start latency, beside the floor of spawning the interpreters it spawns.

Runs in the bench process. Each repetition (interleaved with the floors) starts a 1-node
workflow on a warm server and records:

- ``ackMs``: ``run.start`` sent to its receipt back (the receipt is durable: committed in
  the same transaction as the run). It includes the resolver child that loads the workflow
  to describe it.
- ``firstNodeMs``: ``run.start`` sent to the first node's own stamp, with a cold runner (a
  new ``python -m pi_workflows.runner`` process every run: there is no pool).
- ``ackToFirstNodeMs``: the part after the receipt (scheduler, runner spawn, handshake,
  ``state.get``, ``node.start``).
- ``submitAckMs``: a validated checkpoint answer sent to its answer back, which the server
  holds until the validation runner (a cold runner spawn, ``validate``, the accepting
  commit) is done; ``submitToNextNodeMs``: the same answer sent to the next node's stamp
  (that runner continues the graph).

- ``forkMs`` and ``forkFirstNodeMs``: ``run.fork`` of a completed 100-node chain from its
  last node (99 attempts carried) sent to the fork's completion (the server's commit time,
  ms resolution) and to its node's own stamp; ``startCompletedMs`` is the same repetition's
  1-node run, ``run.start`` sent to its completion measured the same way: the issue's target
  is ``forkMs`` at most 2x it.

Floors, each a fresh interpreter spawned and reaped in the same repetition: ``python -c
pass`` (the issue's target for the first node is a ratio to it), and with the
imports of the two children a start spawns (``pi_workflows.runner.main`` and
``pi_workflows.runner.resolve``). DBOS's in-process ``start_workflow`` (no child process,
no isolation) is measured beside it when DBOS is available.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from bench.context import Context
from bench.floors import spawn_ms
from bench.ourserver import BenchError, OurServer
from bench.peers import PeerWorker
from bench.stats import figure, ratios
from bench.workflows import write_chain, write_submit

FORKED_NODES = 100
"""The length of the completed chain each repetition forks from its last node."""

FLOORS = {
    "spawnPassMs": "pass",
    "spawnRunnerImportsMs": "import pi_workflows.runner.main",
    "spawnResolverImportsMs": "import pi_workflows.runner.resolve",
}


def run(ctx: Context) -> dict[str, Any]:
    """Measure and summarise; see the module docstring."""
    directory = ctx.section_dir("start")
    server = OurServer(ctx.procs, directory / "ours").start()
    workflow = write_chain(server.project, 1)
    submit_workflow = write_submit(server.project)
    forked = str(server.run_to_end(write_chain(server.project, FORKED_NODES), {})["runId"])
    dbos: PeerWorker | None = None
    if ctx.peer("dbos") and ctx.peers.python is not None:
        try:
            dbos = PeerWorker(
                ctx.procs,
                ctx.peers.python,
                "dbos_peer.py",
                ["worker", str(directory / "dbos.sqlite")],
                directory / "dbos.log",
            )
        except Exception as exc:
            ctx.errors.append(f"start: dbos: {exc}")
    series: dict[str, list[float]] = {
        "ackMs": [],
        "firstNodeMs": [],
        "ackToFirstNodeMs": [],
        "submitAckMs": [],
        "submitToNextNodeMs": [],
        "startCompletedMs": [],
        "forkMs": [],
        "forkFirstNodeMs": [],
        **{key: [] for key in FLOORS},
    }
    peer: dict[str, list[float]] = {"ackMs": [], "firstNodeMs": []}
    try:
        for rep in range(ctx.sizes.warmup + ctx.sizes.start_reps):
            measured = rep >= ctx.sizes.warmup
            ctx.say(f"start: {'rep ' + str(rep - ctx.sizes.warmup + 1) if measured else 'warm-up'}")
            floor_values = {
                key: spawn_ms(sys.executable, code, ctx.procs.environment())
                for key, code in FLOORS.items()
            }
            marks = server.run_to_end(workflow, {})
            first = marks["output"]["first"]
            values = {
                "ackMs": (marks["ackNs"] - marks["t0Ns"]) / 1e6,
                "firstNodeMs": (first - marks["t0Ns"]) / 1e6,
                "ackToFirstNodeMs": (first - marks["ackNs"]) / 1e6,
                "startCompletedMs": (marks["finishedWallNs"] - marks["t0WallNs"]) / 1e6,
                **floor_values,
            }
            values.update(_submit(server, submit_workflow))
            values.update(_fork(server, forked))
            if dbos is not None:
                answer = dbos.call("start")
                if measured:
                    peer["ackMs"].append((answer["ackNs"] - answer["t0Ns"]) / 1e6)
                    peer["firstNodeMs"].append((answer["firstNs"] - answer["t0Ns"]) / 1e6)
            if measured:
                for key, value in values.items():
                    series[key].append(value)
    finally:
        if dbos is not None:
            dbos.close()
        server.stop()
    two_spawns = [
        a + b
        for a, b in zip(
            series["spawnRunnerImportsMs"], series["spawnResolverImportsMs"], strict=True
        )
    ]
    return {
        "method": (
            "warm server, 1-node workflow per repetition; floors are fresh interpreters "
            "spawned and reaped in the same repetition"
        ),
        "reps": ctx.sizes.start_reps,
        "ours": {
            key: figure(series[key])
            for key in (
                "ackMs",
                "firstNodeMs",
                "ackToFirstNodeMs",
                "submitAckMs",
                "submitToNextNodeMs",
                "startCompletedMs",
                "forkMs",
                "forkFirstNodeMs",
            )
        },
        "forkedNodes": FORKED_NODES,
        "floor": {key: figure(series[key]) for key in FLOORS},
        "dbos": {key: figure(values) for key, values in peer.items()}
        if dbos is not None
        else {"skipped": ctx.peer_status("dbos")},
        "ratios": {
            "first node / python -c pass spawn": ratios(
                series["firstNodeMs"], series["spawnPassMs"]
            ),
            "ack / resolver-import spawn": ratios(
                series["ackMs"], series["spawnResolverImportsMs"]
            ),
            "first node / (resolver + runner import spawns)": ratios(
                series["firstNodeMs"], two_spawns
            ),
            "ack-to-first-node / runner-import spawn": ratios(
                series["ackToFirstNodeMs"], series["spawnRunnerImportsMs"]
            ),
            "submit-to-next-node / runner-import spawn": ratios(
                series["submitToNextNodeMs"], series["spawnRunnerImportsMs"]
            ),
            "fork of the 100-node run / 1-node start (to completed)": ratios(
                series["forkMs"], series["startCompletedMs"]
            ),
        },
    }


def _submit(server: OurServer, workflow: Any) -> dict[str, float]:
    """Answer a waiting validated checkpoint; time the held answer and the next node."""
    run_id = str(server.client.start_run(str(workflow), {})["runId"])
    server.wait_run(run_id, frozenset({"waiting"}))
    t0 = time.monotonic_ns()
    server.client.answer_checkpoint(run_id, {"go": True})
    ack = time.monotonic_ns()
    view = server.wait_run(run_id)
    return {
        "submitAckMs": (ack - t0) / 1e6,
        "submitToNextNodeMs": (int(view["output"]["t"]) - t0) / 1e6,
    }


def _fork(server: OurServer, source: str) -> dict[str, float]:
    """Fork the completed chain from its last node; time its completion and its node."""
    t0_wall = time.time_ns()
    t0 = time.monotonic_ns()
    receipt = server.client.fork(source, f"n{FORKED_NODES - 1}")
    view = server.wait_run(str(receipt["runId"]))
    if view.get("status") != "completed":
        raise BenchError(f"the fork of {source} ended {view.get('status')}: {view.get('error')}")
    return {
        "forkMs": (int(view["finishedAt"]) * 1_000_000 - t0_wall) / 1e6,
        "forkFirstNodeMs": (int(view["output"]["t"]) - t0) / 1e6,
    }
