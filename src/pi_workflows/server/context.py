"""What request handlers and connections need from the server, and nothing more.

Runs in the server. ``ServerContext`` is a ``Protocol`` that ``app.Server`` satisfies: the
store, the clock (through the store), the settings, the supervisor, the view pushers, the
description cache, the uploads held for connections, the runner template, and the few
signals a handler sends (wake the scheduler and held answers, wait for a run's next change,
fire a schedule's due times, begin a stop). Handlers and ``connections`` are typed
against it, so ``app`` imports them without them importing ``app`` back: the server
package has no import circle.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol

from pi_workflows.server.config import ServerConfig
from pi_workflows.server.describe_cache import DescriptionCache
from pi_workflows.server.run_views import RunViews
from pi_workflows.server.session_views import SessionViews
from pi_workflows.server.supervisor import Supervisor
from pi_workflows.server.template import RunnerTemplate
from pi_workflows.server.uploads import Uploads
from pi_workflows.store.database import Database


class ServerContext(Protocol):
    """The server as a handler or a connection sees it (``app.Server`` is one)."""

    db: Database
    config: ServerConfig
    version: str
    socket_path: Path
    epoch: int
    supervisor: Supervisor
    template: RunnerTemplate | None
    views: SessionViews
    run_views: RunViews
    descriptions: DescriptionCache
    uploads: Uploads
    slow_clients_dropped: int
    stopping: bool

    @property
    def drain_seconds(self) -> float:
        """How long a stop lets running nodes reach their next boundary (0 once forced)."""
        ...

    @property
    def stop_requested(self) -> bool:
        """Shutdown has begun (held answers end with ``serverStopping``)."""
        ...

    @property
    def connection_count(self) -> int:
        """Open client connections."""
        ...

    def wake(self, run_id: str | None = None, *, scheduler: bool = True) -> None:
        """Something committed: the scheduler, held answers and view pushers look now."""
        ...

    async def fire_due_schedule(self, schedule_id: str, as_of: int) -> None:
        """Fire what was due of a schedule at ``as_of``, by its catch-up rule (before a
        pause or a delete), and wait until it is committed (bounded)."""
        ...

    async def changed(self, run_id: str, seconds: float) -> None:
        """Wait until the next committed change of run ``run_id`` (or ``seconds``)."""
        ...

    def request_stop(self, *, drain_seconds: float | None = None, immediate: bool = False) -> None:
        """Begin an orderly shutdown."""
        ...

    def connection_opened(self, writer: asyncio.StreamWriter) -> None:
        """A client connected."""
        ...

    def connection_closed(self, writer: asyncio.StreamWriter) -> None:
        """A client disconnected."""
        ...
