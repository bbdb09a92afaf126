"""A damaged state file through the real CLI and server: `state diagnose` reports it as a
problem with the next step, and `state recover` copies what SQLite can read into a new file
beside it without changing the old one; the server runs on the new file."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from support.server import ServerProcess

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

CHAIN = """
from pi_workflows import Workflow, compute, edge

workflow = Workflow("chain", start="a", nodes={
    "a": compute(lambda ctx: {"n": ctx.input["n"]}),
    "b": compute(lambda ctx: {"n": ctx.outputs["a"]["n"] + 1}),
}, edges=[edge("a", "b")])
"""


def _cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return server.cli(*args, timeout=120)


def _damage(database: Path, table: str) -> None:
    """Overwrite the root page of ``table`` with garbage (the file header is kept)."""
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    finally:
        conn.close()
    assert root > 1
    with open(database, "r+b") as handle:
        handle.seek((root - 1) * size)
        handle.write(b"\xa5" * size)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_damaged_file_is_diagnosed_and_recovered_beside_the_old_one(
    server: ServerProcess,
) -> None:
    server.write_workflow("chain", CHAIN)
    runs = [server.start_run("chain", {"n": n}) for n in range(3)]
    for run_id in runs:
        server.wait_status(run_id, "completed")
    assert json.loads(_cli(server, "state", "diagnose", "--json").stdout)["problems"] == []
    server.stop()
    database = server.home / "state.sqlite"
    assert not Path(f"{database}-wal").exists() or Path(f"{database}-wal").stat().st_size == 0
    _damage(database, "attempt_logs")
    _damage(database, "events")
    server.start()
    diagnosed = _cli(server, "state", "diagnose", "--json")
    assert diagnosed.returncode == 1
    problems = json.loads(diagnosed.stdout)["problems"]
    assert problems[0]["code"] == "stateFileDamaged"
    assert "pi-workflows state recover" in problems[0]["message"]
    human = _cli(server, "state", "diagnose", "--full")
    assert "stateFileDamaged" in human.stdout
    refused = _cli(server, "state", "recover")
    assert refused.returncode != 0
    assert "stop it first: pi-workflows server stop" in refused.stderr
    server.stop()
    before = _digest(database)
    target = server.root / "salvaged.sqlite"
    recovered = _cli(server, "state", "recover", "--out", str(target), "--json")
    assert recovered.returncode == 0, recovered.stderr
    report = json.loads(recovered.stdout)
    assert _digest(database) == before, "the damaged file is never changed"
    assert report["target"] == str(target)
    assert report["tables"]["runs"]["copied"] == 3
    assert report["tables"]["runs"]["failed"] is None
    assert report["tables"]["events"]["failed"] is not None  # its only page was destroyed
    assert report["integrity"] == []
    assert (target.stat().st_mode & 0o777) == 0o600
    human = _cli(server, "state", "recover", "--out", str(server.root / "again.sqlite"))
    assert "events:" in human.stdout
    assert "to use it: move" in human.stdout
    # Switch to the salvaged file, as the report says, and run on it.
    for suffix in ("", "-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    target.rename(database)
    server.start()
    with server.client() as client:
        assert {run["runId"] for run in client.list_runs_page()[0]} == set(runs)
    again = server.start_run("chain", {"n": 7})
    assert server.wait_status(again, "completed")["output"] == {"n": 8}
