"""DBOS Transact peer of the pi-workflows bench (run with bench/.venv-peers/bin/python).

Uses DBOS's SQLite system database (its defaults: no journal or synchronous pragma is set,
so SQLite's own defaults apply; ``info`` reads them from DBOS's engine connection). Every
step returns about 100 bytes, like the bench's pi-workflows nodes, and stamps
``time.monotonic_ns()`` (one clock for every process on Linux).

Modes:
  worker DB              line-JSON on stdin/stdout: ops ``info``, ``chain {n}``, ``start``,
                         ``throughput {runs, nodes, concurrency, poll}`` (enqueue ``runs``
                         chains of ``nodes`` steps on a DBOS queue with that worker
                         concurrency and polling interval; wait for every result)
  victim DB WFID GATE MARKER N K
                         launch, start the gate workflow as WFID, wait to be SIGKILLed
  recover DB WFID        launch (DBOS recovers pending workflows), wait for WFID (polling
                         its status every 2 ms), print JSON stamps
"""

from __future__ import annotations

import json
import os
import sys
import time

T_PROCESS = time.monotonic_ns()

from dbos import DBOS, SetWorkflowID  # noqa: E402 - stamp the process start first

PAD = "x" * 56


@DBOS.step()
def node(i: int) -> dict:
    return {"i": i, "t": time.monotonic_ns(), "pad": PAD}


@DBOS.step()
def gate_node(i: int, gate: str, marker: str) -> dict:
    entered = time.monotonic_ns()
    with open(marker + ".tmp", "w") as handle:
        handle.write(str(os.getpid()))
    os.replace(marker + ".tmp", marker)
    while not os.path.exists(gate):
        time.sleep(0.002)
    return {"i": i, "t": entered, "pad": PAD}


@DBOS.workflow()
def chain(n: int) -> dict:
    first = None
    out: dict = {}
    for i in range(n):
        out = node(i)
        if first is None:
            first = out["t"]
    return {"first": first, "last": out["t"]}


@DBOS.workflow()
def gated(n: int, k: int, gate: str, marker: str) -> dict:
    marks: dict = {}
    for i in range(n):
        out = gate_node(i, gate, marker) if i == k else node(i)
        if i in (0, k):
            marks["first" if i == 0 else "gate"] = out["t"]
    marks["last"] = out["t"]
    return marks


def launch(db: str) -> None:
    DBOS(
        config={
            "name": "pi-workflows-bench",
            "system_database_url": f"sqlite:///{db}",
            "run_admin_server": False,
            "log_level": "WARNING",
        }
    )
    DBOS.launch()


def info() -> dict:
    import sqlite3

    import sqlalchemy as sa
    from dbos import _dbos

    engine = _dbos._dbos_global_instance._sys_db.engine
    with engine.connect() as conn:
        journal = conn.execute(sa.text("PRAGMA journal_mode")).scalar()
        sync = conn.execute(sa.text("PRAGMA synchronous")).scalar()
    return {
        "journalMode": str(journal).lower(),
        "synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(int(sync), str(sync)),
        "readFrom": "DBOS system-database engine connection",
        "sqlite": sqlite3.sqlite_version,
    }


def run_chain(n: int) -> dict:
    t0 = time.monotonic_ns()
    marks = chain(n)
    t1 = time.monotonic_ns()
    return {"t0Ns": t0, "endNs": t1, "firstNs": marks["first"], "lastNs": marks["last"]}


def run_start() -> dict:
    t0 = time.monotonic_ns()
    handle = DBOS.start_workflow(chain, 1)
    ack = time.monotonic_ns()
    marks = handle.get_result()
    return {"t0Ns": t0, "ackNs": ack, "firstNs": marks["first"], "endNs": time.monotonic_ns()}


def run_throughput(runs: int, nodes: int, concurrency: int, poll: float) -> dict:
    """Enqueue ``runs`` chains on a queue of ``concurrency`` and wait for all of them.

    The queue is registered on first use (its worker thread starts within DBOS's 1 s
    registration check, so the bench warms it up with a small batch first). Results are
    awaited in enqueue order, polling each every 5 ms (``get_result``'s default is 1 s).
    """
    name = f"bench-c{concurrency}"
    queue = DBOS.retrieve_queue(name) or DBOS.register_queue(
        name, worker_concurrency=concurrency, polling_interval_sec=poll
    )
    t0 = time.monotonic_ns()
    handles = [queue.enqueue(chain, nodes) for _ in range(runs)]
    enqueued = time.monotonic_ns()
    lasts = [handle.get_result(polling_interval_sec=0.005)["last"] for handle in handles]
    return {"t0Ns": t0, "enqueuedNs": enqueued, "endNs": time.monotonic_ns(), "lastNs": max(lasts)}


def worker(db: str) -> None:
    launch(db)
    for line in sys.stdin:
        command = json.loads(line)
        try:
            match command["op"]:
                case "info":
                    answer = info()
                case "chain":
                    answer = run_chain(int(command["n"]))
                case "start":
                    answer = run_start()
                case "throughput":
                    answer = run_throughput(
                        int(command["runs"]),
                        int(command["nodes"]),
                        int(command["concurrency"]),
                        float(command["poll"]),
                    )
                case other:
                    answer = {"error": f"unknown op {other}"}
        except Exception as exc:  # report, keep serving
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    DBOS.destroy()


def victim(db: str, wfid: str, gate: str, marker: str, n: int, k: int) -> None:
    launch(db)
    with SetWorkflowID(wfid):
        DBOS.start_workflow(gated, n, k, gate, marker)
    while True:  # the bench SIGKILLs this process while step k waits on the gate
        time.sleep(1)


def recover(db: str, wfid: str) -> None:
    launch(db)
    launched = time.monotonic_ns()
    # DBOS records completion times in whole seconds on SQLite, and get_result() polls at
    # a coarse interval; poll the status every 2 ms to see the completion instead.
    while True:
        status = DBOS.get_workflow_status(wfid)
        if status is not None and status.status in ("SUCCESS", "ERROR"):
            break
        time.sleep(0.002)
    done = time.monotonic_ns()
    marks = DBOS.retrieve_workflow(wfid).get_result()
    print(json.dumps({"processNs": T_PROCESS, "launchedNs": launched, "doneNs": done, **marks}))
    sys.stdout.flush()
    os._exit(0)  # do not wait for DBOS's background threads: the measurement is taken


def main(argv: list[str]) -> None:
    match argv:
        case ["worker", db]:
            worker(db)
        case ["victim", db, wfid, gate, marker, n, k]:
            victim(db, wfid, gate, marker, int(n), int(k))
        case ["recover", db, wfid]:
            recover(db, wfid)
        case _:
            sys.exit(f"usage: {__doc__}")


if __name__ == "__main__":
    main(sys.argv[1:])
