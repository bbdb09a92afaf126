"""LangGraph peer of the pi-workflows bench (run with bench/.venv-peers/bin/python).

A chain of N nodes compiled with ``SqliteSaver`` on a file database, invoked with
``durability="sync"`` (each step's checkpoint is written before the next step starts). The
saver sets ``journal_mode=WAL`` itself and leaves ``synchronous`` at SQLite's default;
``info`` reads both from the saver's own connection. Every node returns about 100 bytes and
stamps ``time.monotonic_ns()``.

Mode:
  worker DB    line-JSON on stdin/stdout: ops ``info``, ``chain {n}``
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
import uuid
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

PAD = "x" * 56


class State(TypedDict, total=False):
    last: dict[str, Any]
    first: int


def make(i: int) -> Any:
    def node(state: State) -> State:
        out = {"i": i, "t": time.monotonic_ns(), "pad": PAD}
        update: State = {"last": out}
        if i == 0:
            update["first"] = out["t"]
        return update

    return node


def build(saver: SqliteSaver, n: int) -> Any:
    graph = StateGraph(State)
    for i in range(n):
        graph.add_node(f"n{i}", make(i))
    graph.add_edge(START, "n0")
    for i in range(n - 1):
        graph.add_edge(f"n{i}", f"n{i + 1}")
    graph.add_edge(f"n{n - 1}", END)
    return graph.compile(checkpointer=saver)


def worker(db: str) -> None:
    conn = sqlite3.connect(db, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    graphs: dict[int, Any] = {}
    for line in sys.stdin:
        command = json.loads(line)
        try:
            match command["op"]:
                case "info":
                    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
                    sync = int(conn.execute("PRAGMA synchronous").fetchone()[0])
                    answer = {
                        "journalMode": str(journal).lower(),
                        "synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(
                            sync, str(sync)
                        ),
                        "readFrom": "SqliteSaver connection",
                        "sqlite": sqlite3.sqlite_version,
                    }
                case "chain":
                    n = int(command["n"])
                    graph = graphs.get(n) or graphs.setdefault(n, build(saver, n))
                    config = {
                        "configurable": {"thread_id": uuid.uuid4().hex},
                        "recursion_limit": n + 10,
                    }
                    t0 = time.monotonic_ns()
                    state = graph.invoke({}, config, durability="sync")
                    end = time.monotonic_ns()
                    answer = {
                        "t0Ns": t0,
                        "endNs": end,
                        "firstNs": state["first"],
                        "lastNs": state["last"]["t"],
                    }
                case other:
                    answer = {"error": f"unknown op {other}"}
        except Exception as exc:  # report, keep serving
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    conn.close()


def main(argv: list[str]) -> None:
    match argv:
        case ["worker", db]:
            worker(db)
        case _:
            sys.exit(f"usage: {__doc__}")


if __name__ == "__main__":
    main(sys.argv[1:])
