"""Physical floors: what one durable commit, one IPC round trip and one spawn cost here.

Runs in the bench process (the echo peer and the spawned interpreters are its children).

- ``commit_floor``: ``BEGIN IMMEDIATE`` + one ~100-byte ``INSERT`` + ``COMMIT`` on a WAL
  database with ``synchronous=FULL`` (the settings pi-workflows uses), stdlib ``sqlite3``.
- ``EchoPeer``: one newline-JSON round trip over a Unix socket to another process that
  decodes and re-encodes the message with stdlib ``json`` (the shape of one runner message
  and its reply, without any work in between).
- ``spawn_ms``: wall time to spawn an interpreter with ``python -c CODE`` and reap it.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.processes import Processes

# A message about the size of a runner's node.finish (envelope + a ~100-byte output).
SAMPLE_MESSAGE: dict[str, Any] = {
    "type": "message",
    "schema": "pi-workflows.runner.v1",
    "runId": "run_0123456789abcdef",
    "generation": 1,
    "runnerEpoch": 7,
    "messageId": "7-12",
    "kind": "node.finish",
    "expectedRevision": 42,
    "payload": {
        "attemptId": "att_0123456789abcdef",
        "outcome": "completed",
        "output": {"i": 5, "t": 123456789012345, "pad": "x" * 56},
        "next": {"type": "goto", "nodeId": "n6"},
        "startNext": True,
    },
}

_ECHO = """
import json, socket, sys
sock = socket.socket(fileno=int(sys.argv[1]))
reader = sock.makefile("rb")
for line in reader:
    sock.sendall(json.dumps(json.loads(line), separators=(",", ":")).encode() + b"\\n")
"""


def commit_floor(directory: Path, count: int) -> list[float]:
    """``count`` durable commits on a fresh WAL/FULL database; each one's ms."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "floor.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        found = pragmas(conn)
        if found != {"journalMode": "wal", "synchronous": "FULL"}:
            raise RuntimeError(f"the floor database is not WAL/FULL: {found}")
        conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        value = json.dumps(SAMPLE_MESSAGE["payload"]["output"])
        times = []
        for _ in range(count):
            start = time.perf_counter_ns()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (v) VALUES (?)", (value,))
            conn.execute("COMMIT")
            times.append((time.perf_counter_ns() - start) / 1e6)
        return times
    finally:
        conn.close()


def pragmas(conn: sqlite3.Connection) -> dict[str, Any]:
    """``journal_mode`` and ``synchronous`` as this connection sees them."""
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = int(conn.execute("PRAGMA synchronous").fetchone()[0])
    return {"journalMode": str(journal).lower(), "synchronous": synchronous_name(sync)}


def synchronous_name(value: int) -> str:
    """SQLite's ``synchronous`` number as its name."""
    return {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(value, str(value))


class EchoPeer:
    """A child process that echoes newline-JSON over a socketpair."""

    def __init__(self, procs: Processes) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock = parent
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _ECHO, str(child.fileno())],
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=procs.environment(),
            )
        finally:
            child.close()
        self._reader = parent.makefile("rb")

    def round_trips(self, count: int) -> list[float]:
        """``count`` round trips (encode, send, peer decodes and re-encodes, receive,
        decode); each one's ms."""
        times = []
        for _ in range(count):
            start = time.perf_counter_ns()
            self._sock.sendall(json.dumps(SAMPLE_MESSAGE, separators=(",", ":")).encode() + b"\n")
            json.loads(self._reader.readline())
            times.append((time.perf_counter_ns() - start) / 1e6)
        return times

    def close(self) -> None:
        """End the peer and reap it."""
        self._reader.close()
        self._sock.close()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=5)


def spawn_ms(python: str, code: str, env: dict[str, str] | None = None) -> float:
    """Spawn ``python -c code``, wait for it to exit; the wall time in ms."""
    start = time.perf_counter_ns()
    subprocess.run([python, "-c", code], check=True, env=env, stdin=subprocess.DEVNULL)
    return (time.perf_counter_ns() - start) / 1e6
