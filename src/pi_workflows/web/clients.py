"""The page process's connections to the server: a few for reads, one per command.

Runs in the page process. Every connection is an `AsyncClient` with the page's client id
(`web:ui`) and no auto-start: the page never starts a server (it exits when its server goes
away). `AsyncClient` serialises its calls on one connection, so reads share a small pool
and a command gets a connection of its own: a checkpoint answer held for its validation
(up to `PI_WORKFLOWS_SUBMIT_WAIT_SECONDS`) never delays a page render.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

from pi_workflows.client import AsyncClient

__all__ = ["CLIENT_ID", "Clients"]

CLIENT_ID: Final = "web:ui"
"""The client id of every command the page sends: `client:web:ui` in a run's history, so
the page's answers and actions are told from the CLI's (`client:cli`) and Pi's."""

READERS: Final = 4
"""Connections the page's reads share."""


class Clients:
    """The read pool and the command connections of one page process."""

    def __init__(self, home: Path, *, timeout: float = 30.0) -> None:
        self.home = home
        self.timeout = timeout
        self._idle: asyncio.Queue[AsyncClient] = asyncio.Queue()
        for _ in range(READERS):
            self._idle.put_nowait(self._new())
        self._watcher = self._new()

    def _new(self) -> AsyncClient:
        return AsyncClient(self.home, client_id=CLIENT_ID, autostart=False, timeout=self.timeout)

    @contextlib.asynccontextmanager
    async def reader(self) -> AsyncIterator[AsyncClient]:
        """One of the shared read connections, for the duration of a few reads."""
        client = await self._idle.get()
        try:
            yield client
        finally:
            self._idle.put_nowait(client)

    @contextlib.asynccontextmanager
    async def commander(self) -> AsyncIterator[AsyncClient]:
        """A connection of its own for one command (closed after it)."""
        client = self._new()
        try:
            yield client
        finally:
            await client.close()

    def watcher(self) -> AsyncClient:
        """The client whose watches (`watch_run`, `watch_runs`) each open a connection of
        their own (the watch's `close` closes it)."""
        return self._watcher

    async def close(self) -> None:
        """Close every idle read connection and the watcher's own."""
        while not self._idle.empty():
            await self._idle.get_nowait().close()
        await self._watcher.close()
