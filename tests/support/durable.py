"""Checks shared by the durable-time tests: a waiting run holds nothing that runs."""

from __future__ import annotations

import time
from typing import Any

from support.server import ServerProcess, wait_for


def holds_nothing(server: ServerProcess, run_id: str) -> None:
    """The run's runner has exited (its exit is recorded just after the wait commits), no
    claim is held, and the server supervises no runner of it."""

    def idle() -> bool:
        with server.client() as client:
            runners = client.status()["runners"]
        return server.query(
            "SELECT COUNT(*) FROM run_runners WHERE run_id = ? AND status != 'exited'", run_id
        ) == [(0,)] and not [r for r in runners if r["runId"] == run_id]

    wait_for(idle, 15, f"run {run_id}'s runner to exit")
    assert server.query(
        "SELECT COUNT(*) FROM leases WHERE run_id = ? AND status = 'held'", run_id
    ) == [(0,)]


def attempts(server: ServerProcess, run_id: str, node: str) -> list[tuple[Any, ...]]:
    """``(visit, attempt_no, try_no, status, retry_outcome)`` of a node, oldest first."""
    return server.query(
        "SELECT visit, attempt_no, try_no, status, retry_outcome FROM node_attempts"
        " WHERE run_id = ? AND node_id = ? ORDER BY started_at, rowid",
        run_id,
        node,
    )


def now_ms() -> int:
    """The wall clock in epoch milliseconds (the server's store clock)."""
    return time.time_ns() // 1_000_000
