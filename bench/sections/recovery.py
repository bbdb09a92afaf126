"""Section 4: recovery after SIGKILL, pi-workflows beside DBOS, same workflow shape.

Runs in the bench process. The workflow has ``recovery_nodes`` no-op nodes; node
``recovery_gate`` blocks until a gate file exists (it first writes a marker file, so the
bench knows the moment). Per repetition, interleaved:

- pi-workflows: start the run on a live server; when node k is running, SIGKILL the
  server (its runner is left an orphan, as after a crash); create the gate file; spawn a
  new server process. Measured from that spawn: ``readyMs`` (the new server says hello),
  ``firstResumedNodeMs`` (node k's stamp when it runs again in a new runner),
  ``readyToFirstResumedNodeMs`` (from that hello to node k's stamp: the issue's target) and
  ``completionMs`` (the completing transaction's time, server clock, ms resolution).
- DBOS: a process launches DBOS and starts the same workflow; when step k is running,
  SIGKILL the process; create the gate file; spawn a new process that launches DBOS
  (which recovers pending workflows on launch) and waits for the workflow. Measured from
  that spawn: ``readyMs`` (``DBOS.launch()`` returned), ``firstResumedNodeMs``,
  ``readyToFirstResumedNodeMs`` and ``completionMs`` (the recovering process polls the
  workflow's status every 2 ms: DBOS stores completion times in whole seconds on SQLite,
  and ``get_result()`` polls at a coarse interval).

Floors: spawning an interpreter that imports the server (``pi_workflows.server.main``),
and one that imports ``dbos``.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.context import Context
from bench.floors import spawn_ms
from bench.ourserver import BenchError, OurServer
from bench.peers import SCRIPTS
from bench.stats import figure, ratios
from bench.workflows import write_gate

KEYS = ("readyMs", "firstResumedNodeMs", "readyToFirstResumedNodeMs", "completionMs")


def _wait_file(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise BenchError(f"{path.name} did not appear in {timeout:g} s")
        time.sleep(0.002)


def _ours(server: OurServer, workflow: Path, directory: Path) -> dict[str, float]:
    gate, marker = directory / "gate", directory / "marker"
    receipt = server.client.start_run(str(workflow), {"gate": str(gate), "marker": str(marker)})
    run_id = str(receipt["runId"])
    _wait_file(marker)
    server.kill()
    gate.touch()
    spawn_wall = time.time_ns()
    spawned = server.spawn()
    ready = server.wait_ready()
    view = server.wait_run(run_id)
    if view.get("status") != "completed":
        raise BenchError(f"recovered run ended {view.get('status')}: {view.get('parkReason')}")
    output = view["output"]
    return {
        "readyMs": (ready - spawned) / 1e6,
        "firstResumedNodeMs": (output["gate"] - spawned) / 1e6,
        "readyToFirstResumedNodeMs": (output["gate"] - ready) / 1e6,
        "completionMs": (int(view["finishedAt"]) * 1_000_000 - spawn_wall) / 1e6,
    }


def _dbos(ctx: Context, python: str, directory: Path, n: int, k: int) -> dict[str, float]:
    gate, marker = directory / "gate-dbos", directory / "marker-dbos"
    database = str(directory.parent / "dbos.sqlite")
    wfid = f"bench-{uuid.uuid4().hex}"
    script = str(SCRIPTS / "dbos_peer.py")
    log = directory.parent / "dbos.log"
    victim = ctx.procs.spawn(
        [python, script, "victim", database, wfid, str(gate), str(marker), str(n), str(k)],
        log=log,
        cwd=directory,
    )
    try:
        _wait_file(marker)
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
    gate.touch()
    spawned = time.monotonic_ns()
    recoverer = ctx.procs.spawn(
        [python, script, "recover", database, wfid], log=log, cwd=directory, pipes=True
    )
    out, _ = recoverer.communicate(timeout=120)
    if recoverer.returncode != 0:
        raise BenchError(f"DBOS recovery process exited {recoverer.returncode} (see {log})")
    marks = json.loads(out.decode().strip().splitlines()[-1])
    return {
        "readyMs": (marks["launchedNs"] - spawned) / 1e6,
        "firstResumedNodeMs": (marks["gate"] - spawned) / 1e6,
        "readyToFirstResumedNodeMs": (marks["gate"] - marks["launchedNs"]) / 1e6,
        "completionMs": (marks["doneNs"] - spawned) / 1e6,
    }


def run(ctx: Context) -> dict[str, Any]:
    """Measure and summarise; see the module docstring."""
    directory = ctx.section_dir("recovery")
    n, k = ctx.sizes.recovery_nodes, ctx.sizes.recovery_gate
    server = OurServer(ctx.procs, directory / "ours").start()
    workflow = write_gate(server.project, n, k)
    python = ctx.peers.python if ctx.peer("dbos") else None
    ours: dict[str, list[float]] = {key: [] for key in KEYS}
    dbos: dict[str, list[float]] = {key: [] for key in KEYS}
    floors: dict[str, list[float]] = {"spawnServerImportsMs": [], "spawnDbosImportMs": []}
    dbos_error: str | None = None
    try:
        for rep in range(ctx.sizes.warmup + ctx.sizes.recovery_reps):
            measured = rep >= ctx.sizes.warmup
            ctx.say(
                f"recovery: {'rep ' + str(rep - ctx.sizes.warmup + 1) if measured else 'warm-up'}"
            )
            rep_dir = directory / f"rep{rep}"
            rep_dir.mkdir()
            order = ["ours", "dbos"] if rep % 2 == 0 else ["dbos", "ours"]
            for system in order:
                if system == "ours":
                    values = _ours(server, workflow, rep_dir)
                    target = ours
                elif python is not None and dbos_error is None:
                    try:
                        values = _dbos(ctx, python, rep_dir, n, k)
                    except Exception as exc:
                        dbos_error = f"{type(exc).__name__}: {exc}"
                        ctx.errors.append(f"recovery: dbos: {dbos_error}")
                        continue
                    target = dbos
                else:
                    continue
                if measured:
                    for key in KEYS:
                        target[key].append(values[key])
            if measured:
                floors["spawnServerImportsMs"].append(
                    spawn_ms(sys.executable, "import pi_workflows.server.main")
                )
                if python is not None:
                    floors["spawnDbosImportMs"].append(spawn_ms(python, "import dbos"))
    finally:
        server.stop()
    result: dict[str, Any] = {
        "method": (
            f"{n}-node workflow, node {k} (0-based) blocks on a gate file; SIGKILL while it "
            "runs, then time from spawning the new process"
        ),
        "reps": ctx.sizes.recovery_reps,
        "nodes": n,
        "killedAtNode": k,
        "ours": {key: figure(values) for key, values in ours.items()},
        "floor": {key: figure(values) for key, values in floors.items() if values},
    }
    if python is None or dbos_error is not None:
        result["dbos"] = {"skipped": dbos_error or ctx.peer_status("dbos")}
    else:
        result["dbos"] = {key: figure(values) for key, values in dbos.items()}
        result["ratios"] = {
            f"ours/dbos ({key})": ratios(ours[key], dbos[key]) for key in KEYS if dbos[key]
        }
    return result
