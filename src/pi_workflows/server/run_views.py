"""Pushing run views and run lists to the connections that watch them (``run.watch``,
``runs.watch``).

Runs in the server. A run watcher is (run id, peer connection); a list watcher is (filters,
peer). After any committed change the server marks the views dirty; one task then gathers
changes for ``DEBOUNCE_SECONDS`` and recomputes: for each watched run whose revision or
progress mark moved (two indexed reads decide: a progress value that history does not
sample moves no revision, ``store/progress.py``), its ``store.watch_views.run_watch``
view; for each list
watcher, its page. A view that differs from the last one pushed to that key is queued on
each watcher's connection as the latest event (``run.view`` or ``runs.view``). A connection
keeps only the newest unsent event per key (``ConnectionPeer``), so a slow watcher gets the
latest view, never an unbounded queue. A watched run that disappears (pruned) gets one
``run.gone`` event and its watchers are dropped.

Views are bounded (``store.watch_views``), and each run's view and each list is computed,
encoded and size-checked on its own: when that fails, the failure is logged and only that
run's watchers (``run.unavailable``) or that list watcher (``runs.unavailable``) are ended;
the task goes on with every other watch and never stops.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from pi_workflows.protocol import Event
from pi_workflows.server import pushes
from pi_workflows.server.peers import Peer
from pi_workflows.store import progress, watch_views
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
        # The last pushed (revision, progress mark) per watched run.
        self._revisions: dict[str, tuple[int, int]] = {}
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
        """Recompute every watched run whose revision moved, and every list; push changes.
        A view that fails ends only its own watches (``run.unavailable``,
        ``runs.unavailable``)."""
        for run_id in list(self._runs):
            try:
                self._push_run(run_id)
            except Exception as exc:
                log.exception("could not push the view of run %s", run_id)
                self._end_run(run_id, pushes.code_of(exc))
        for lister in list(self._lists):
            try:
                self._push_list(lister)
            except Exception as exc:
                log.exception("could not push a run list")
                event = pushes.unavailable(
                    "runs", {}, pushes.code_of(exc), "the run list", operation="runs.watch"
                )
                lister.peer.push("runs", event)
                self.unwatch(lister)

    def _push_run(self, run_id: str) -> None:
        with self.db.read() as conn:
            row = conn.execute("SELECT revision FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                gone = Event(name="run.gone", payload={"runId": run_id})
                for watcher in list(self._runs.get(run_id, [])):
                    watcher.peer.push(f"run:{run_id}", gone)
                    self.unwatch(watcher)
                return
            seen = (int(row[0]), progress.mark(conn, run_id))
            if self._revisions.get(run_id) == seen:
                return
            view = watch_views.run_watch(conn, run_id)
        event = Event(name="run.view", payload={"runId": run_id, **view})
        pushes.checked_frame(event)
        self._revisions[run_id] = seen
        for watcher in self._runs.get(run_id, []):
            watcher.peer.push(f"run:{run_id}", event)

    def _end_run(self, run_id: str, code: str) -> None:
        """End every watch of ``run_id`` with one ``run.unavailable`` event."""
        event = pushes.unavailable(
            "run", {"runId": run_id}, code, f"the view of run {run_id}", operation="run.watch"
        )
        for watcher in list(self._runs.get(run_id, [])):
            watcher.peer.push(f"run:{run_id}", event)
            self.unwatch(watcher)

    def _push_list(self, lister: ListWatcher) -> None:
        with self.db.read() as conn:
            page = watch_views.runs_watch(
                conn, statuses=lister.statuses, workflow=lister.workflow, limit=lister.limit
            )
        if page == lister.last:
            return
        event = Event(name="runs.view", payload=page)
        pushes.checked_frame(event)
        lister.last = page
        lister.peer.push("runs", event)
