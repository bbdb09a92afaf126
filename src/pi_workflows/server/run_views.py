"""Pushing run views and run lists to the connections that watch them (``run.watch``,
``runs.watch``).

Runs in the server. A run watcher is (run id, peer connection); a list watcher is (filters,
peer). After any committed change the server marks the views dirty; one task then gathers
changes for ``DEBOUNCE_SECONDS`` and recomputes: for each watched run whose revision moved
(one indexed read decides), its ``store.watch_views.run_watch`` view; for each list
watcher, its page. A view that differs from the last one pushed to that key is queued on
each watcher's connection as the latest event (``run.view`` or ``runs.view``). A connection
keeps only the newest unsent event per key (``ConnectionPeer``), so a slow watcher gets the
latest view, never an unbounded queue. A watched run that disappears (pruned) gets one
``run.gone`` event and its watchers are dropped.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from pi_workflows.protocol import Event
from pi_workflows.server.handlers.registry import Peer
from pi_workflows.store import watch_views
from pi_workflows.store.database import Database

log = logging.getLogger(__name__)

DEBOUNCE_SECONDS = 0.05
"""How long the push task gathers changes before it recomputes (at most 20 pushes/s)."""


@dataclass(eq=False)
class RunWatcher:
    """One connection watching one run."""

    run_id: str
    peer: Peer


@dataclass(eq=False)
class ListWatcher:
    """One connection watching the run list with its filters."""

    peer: Peer
    statuses: list[str] | None = None
    workflow: str | None = None
    limit: int = 100
    last: dict[str, Any] | None = field(default=None, repr=False)


class RunViews:
    """Every run and run list watched through this server, and the task that pushes them."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._runs: dict[str, list[RunWatcher]] = {}
        self._lists: list[ListWatcher] = []
        self._revisions: dict[str, int] = {}  # last pushed revision per watched run
        self._dirty = asyncio.Event()

    @property
    def watching(self) -> int:
        """How many watchers there are (runs and lists)."""
        return sum(len(group) for group in self._runs.values()) + len(self._lists)

    def watch_run(self, run_id: str, peer: Peer) -> RunWatcher:
        """Start pushing ``run_id``'s view to ``peer`` (the current view goes out soon)."""
        watcher = RunWatcher(run_id, peer)
        self._runs.setdefault(run_id, []).append(watcher)
        self._revisions.pop(run_id, None)  # so the new watcher gets the current view
        self.mark_dirty()
        return watcher

    def watch_list(self, watcher: ListWatcher) -> ListWatcher:
        """Start pushing the run list ``watcher`` asks for (the current one goes out soon)."""
        self._lists.append(watcher)
        self.mark_dirty()
        return watcher

    def unwatch(self, watcher: RunWatcher | ListWatcher) -> None:
        """Stop pushing to ``watcher`` (its connection closed)."""
        if isinstance(watcher, ListWatcher):
            if watcher in self._lists:
                self._lists.remove(watcher)
            return
        group = self._runs.get(watcher.run_id, [])
        if watcher in group:
            group.remove(watcher)
        if not group:
            self._runs.pop(watcher.run_id, None)
            self._revisions.pop(watcher.run_id, None)

    def mark_dirty(self) -> None:
        """Something committed: recompute the watched views soon."""
        if self._runs or self._lists:
            self._dirty.set()

    async def run(self) -> None:
        """The push task: wait for a change, gather for a moment, push what changed."""
        while True:
            await self._dirty.wait()
            await asyncio.sleep(DEBOUNCE_SECONDS)
            self._dirty.clear()
            try:
                self.push_changed()
            except Exception:
                log.exception("could not push run views")

    def push_changed(self) -> None:
        """Recompute every watched run whose revision moved, and every list; push changes."""
        with self.db.read() as conn:
            for run_id, group in list(self._runs.items()):
                row = conn.execute(
                    "SELECT revision FROM runs WHERE run_id = ?", (run_id,)
                ).fetchone()
                if row is None:
                    gone = Event(name="run.gone", payload={"runId": run_id})
                    for watcher in list(group):
                        watcher.peer.push(f"run:{run_id}", gone)
                        self.unwatch(watcher)
                    continue
                if self._revisions.get(run_id) == row[0]:
                    continue
                self._revisions[run_id] = int(row[0])
                view = watch_views.run_watch(conn, run_id)
                event = Event(name="run.view", payload={"runId": run_id, **view})
                for watcher in group:
                    watcher.peer.push(f"run:{run_id}", event)
            for lister in list(self._lists):
                page = watch_views.runs_watch(
                    conn, statuses=lister.statuses, workflow=lister.workflow, limit=lister.limit
                )
                if page == lister.last:
                    continue
                lister.last = page
                lister.peer.push("runs", Event(name="runs.view", payload=page))
