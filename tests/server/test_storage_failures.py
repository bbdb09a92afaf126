"""Writes that fail on a full disk never leave an unrecorded child process behind.

Runs the server's own components in-process with a real database whose write fails as a
full disk does (``sqlite3.OperationalError: database or disk is full``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.server import agents as server_agents
from pi_workflows.server import children
from pi_workflows.server.agents import HeadlessAgents
from pi_workflows.server.config import ServerConfig
from pi_workflows.store import agents

from support.store import open_test_db, reserve

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.mark.timeout(60)
def test_a_headless_agent_that_cannot_be_recorded_is_stopped_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Window: the agent process is spawned, then its record fails (a full disk); it is
    stopped and reaped before the failure is reported, so no tick leaves an untracked Pi."""
    db = open_test_db(tmp_path / "state")
    spawned: list[int] = []
    real_spawn = children.spawn_command

    async def spawn(argv: list[str], **kwargs: Any) -> children.Process:
        record = kwargs["spawned"]

        def noted(pid: int) -> None:
            spawned.append(pid)
            record(pid)

        return await real_spawn(argv, **{**kwargs, "spawned": noted})

    def full_disk(*args: Any) -> str:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(server_agents.children, "spawn_command", spawn)
    monkeypatch.setattr(server_agents.agents, "record_started", full_disk)
    monkeypatch.setattr(
        HeadlessAgents, "_command", lambda self, want: (SLEEPER, dict(os.environ), None)
    )
    headless = HeadlessAgents(db, ServerConfig.from_environment(tmp_path / "state"), 1)
    want = agents.Wanted(reserve(db), "detached-session", None)
    try:
        asyncio.run(headless._start(want))  # the failure is logged, never raised
        assert len(spawned) == 1
        with pytest.raises(ProcessLookupError):  # stopped and reaped: the pid is gone
            os.kill(spawned[0], 0)
        assert headless.count == 0
        assert db.conn.execute("SELECT COUNT(*) FROM agent_processes").fetchone()[0] == 0
    finally:
        for pid in spawned:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        db.close()
