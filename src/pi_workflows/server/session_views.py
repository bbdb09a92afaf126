"""Pushing session views to the connections that watch them.

Runs in the server. A watcher is (session id, coordinator epoch, peer connection). After
any committed change the server marks the views dirty; one task then recomputes the view of
every watched session (``store.sessions.view``, a few short reads) and, when it differs from
the last one pushed, gives it the next revision and queues it on each watcher's connection
as the latest ``session.view`` event. A connection keeps only the newest unsent view, so a
slow watcher gets the latest view, never an unbounded queue. A watcher whose coordinator
epoch was fenced by a newer attach gets one ``session.fenced`` event and is dropped.

Each session's view is computed, encoded and size-checked on its own: when that fails (the
view cannot be read, or its bounded form would not fit a frame), the failure is logged and
only that session's watchers get one ``session.unavailable`` event and are dropped; the task
goes on with every other session and never stops.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from pi_workflows.protocol import Event
from pi_workflows.server import pushes
from pi_workflows.server.peers import Peer
from pi_workflows.store import sessions
from pi_workflows.store.database import Database

log = logging.getLogger(__name__)

DEBOUNCE_SECONDS = 0.02
"""How long the view task gathers changes before it recomputes (a node burst is one push)."""


@dataclass(eq=False)
class Watcher:
    """One connection watching one session as its coordinator."""

    session_id: str
    coordinator_epoch: int
    peer: Peer


class SessionViews:
    """Every session watched through this server, and the task that pushes their views."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._watchers: dict[str, list[Watcher]] = {}
        self._last: dict[str, Any] = {}
        self._revision = 0
        self._dirty = asyncio.Event()

    def begin_epoch(self, server_epoch: int) -> None:
        """Revisions of this server start above every earlier server's (epochs only grow)."""
        self._revision = server_epoch << 32

    def watch(self, session_id: str, coordinator_epoch: int, peer: Peer) -> Watcher:
        """Start pushing the session's view to ``peer`` (the current view goes out soon)."""
        watcher = Watcher(session_id, coordinator_epoch, peer)
        self._watchers.setdefault(session_id, []).append(watcher)
        self._last.pop(session_id, None)  # push the current view to the new watcher
        self.mark_dirty()
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        """Stop pushing to ``watcher`` (its connection closed)."""
        group = self._watchers.get(watcher.session_id, [])
        if watcher in group:
            group.remove(watcher)
        if not group:
            self._watchers.pop(watcher.session_id, None)
            self._last.pop(watcher.session_id, None)

    def mark_dirty(self) -> None:
        """Something committed: recompute the watched views soon."""
        if self._watchers:
            self._dirty.set()

    @property
    def watching(self) -> int:
        """How many watchers there are."""
        return sum(len(group) for group in self._watchers.values())

    async def run(self) -> None:
        """The push task: wait for a change, gather for a moment, push what changed."""
        while True:
            await self._dirty.wait()
            await asyncio.sleep(DEBOUNCE_SECONDS)
            self._dirty.clear()
            try:
                self.push_changed()
            except Exception:
                log.exception("could not push session views")

    def push_changed(self) -> None:
        """Recompute every watched session's view and push the ones that changed; a session
        whose view fails ends its own watches (``session.unavailable``), never the others'."""
        for session_id in list(self._watchers):
            try:
                self._push_session(session_id)
            except Exception as exc:
                log.exception("could not push the view of session %s", session_id)
                self._end(session_id, pushes.code_of(exc))

    def _push_session(self, session_id: str) -> None:
        with self.db.read() as conn:
            view = sessions.view(conn, session_id)
        current = view["coordinatorEpoch"]
        for watcher in list(self._watchers.get(session_id, [])):
            if watcher.coordinator_epoch != current:
                watcher.peer.push(
                    f"session:{session_id}",
                    Event(
                        name="session.fenced",
                        payload={"sessionId": session_id, "coordinatorEpoch": current},
                    ),
                )
                self.unwatch(watcher)
        if session_id not in self._watchers or self._last.get(session_id) == view:
            return
        event = Event(name="session.view", payload={**view, "revision": self._revision + 1})
        pushes.checked_frame(event)
        self._revision += 1
        self._last[session_id] = view
        for watcher in self._watchers[session_id]:
            watcher.peer.push(f"session:{session_id}", event)

    def _end(self, session_id: str, code: str) -> None:
        """End every watch of ``session_id`` with one ``session.unavailable`` event."""
        for watcher in list(self._watchers.get(session_id, [])):
            event = pushes.unavailable(
                "session",
                {"sessionId": session_id, "coordinatorEpoch": watcher.coordinator_epoch},
                code,
                f"the view of session {session_id}",
                operation="session.watch",
            )
            watcher.peer.push(f"session:{session_id}", event)
            self.unwatch(watcher)
