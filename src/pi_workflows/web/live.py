"""What the page shows live: the server's pushed views, shared by every open tab.

Runs in the page process. `Hub` holds at most one server watch per thing watched and fans
its views out to the browsers' event streams (server-sent events):

- one `runs.watch` for the life of the page process (the newest runs and the counts per
  status). Each pushed list is a *signal*: list pages fetch their own filtered page again.
  It is also how the page learns that its server has gone: the watch's connection ends,
  `lifetime` returns, and the page process stops.
- one `run.watch` per run a page shows (`RunFeed`), opened by the first page or stream of
  that run and closed `LINGER_SECONDS` after the last one left. Each pushed view is turned
  into the run page's sections once (`render`) and handed to every stream of that run.

Nothing here reads the database or polls: every change comes from a server push, within
the server's 50 ms gathering of changes plus one render. A subscriber keeps only the newest
unsent item (a slow browser gets the latest sections, never a queue).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from pi_workflows.client import (
    AsyncWatch,
    ClientError,
    ConnectionLostError,
    NotFoundError,
    ServerUnavailableError,
    WatchUnavailableError,
)
from pi_workflows.web.clients import Clients

__all__ = ["Hub", "RunFeed", "Subscriber"]

log = logging.getLogger(__name__)

LINGER_SECONDS: Final = 30.0
"""How long a run's watch stays open after its last page or stream left (a reload, or the
stream a page opens right after it loaded, finds it still open)."""

RUNS_WATCH_LIMIT: Final = 100
"""The newest runs the page's list watch follows (beyond them, a change of status still
moves the counts, which signals the lists too)."""

Sections = dict[str, dict[str, str]]
Renderer = Callable[[str, dict[str, Any]], Awaitable[Sections]]


class Subscriber:
    """One browser stream: the newest item not yet sent to it."""

    def __init__(self) -> None:
        self._item: Any = None
        self._ready = asyncio.Event()

    def offer(self, item: Any) -> None:
        """Replace what is waiting with `item` (the newest wins)."""
        self._item = item
        self._ready.set()

    async def next(self, timeout: float) -> Any:  # noqa: ASYNC109 - a wait with a bound
        """The newest item within `timeout` seconds, or None."""
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            return None
        self._ready.clear()
        item, self._item = self._item, None
        return item


class RunFeed:
    """One server watch of one run, rendered once per pushed view for every subscriber."""

    def __init__(self, hub: Hub, run_id: str) -> None:
        self.hub = hub
        self.run_id = run_id
        self.view: dict[str, Any] | None = None
        """The newest pushed `{run, graph}`."""
        self.sections: Sections | None = None
        """The run page's sections rendered from `view`."""
        self.problem: str | None = None
        """Why there is no view: the run is unknown, was removed, or cannot be watched."""
        self.ready = asyncio.Event()
        self.subscribers: set[Subscriber] = set()
        self.last_used = time.monotonic()
        self.task = asyncio.create_task(self._follow(), name=f"pi-workflows-ui-run-{run_id}")

    async def current(self, timeout: float) -> Sections | None:  # noqa: ASYNC109 - a wait with a bound
        """The current sections, once the first view came (None: see `problem`)."""
        self.last_used = time.monotonic()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ready.wait(), timeout)
        if self.sections is None and self.problem is None:
            self.problem = "the server did not send the run's view in time; reload the page"
        return self.sections

    async def _follow(self) -> None:
        watch: AsyncWatch | None = None
        try:
            watch = await self.hub.clients.watcher().watch_run(self.run_id)
            async for view in watch:
                self.view = view
                self.sections = await self.hub.render(self.run_id, view)
                self.ready.set()
                for subscriber in list(self.subscribers):
                    subscriber.offer(self.sections)
            self.problem = f"run {self.run_id} was removed"
        except NotFoundError:
            self.problem = f"no run {self.run_id}"
        except WatchUnavailableError as exc:
            self.problem = exc.message
        except ClientError as exc:
            self.problem = exc.message
        except Exception:  # a render bug must not leave the page waiting for ever
            log.exception("could not follow run %s", self.run_id)
            self.problem = "the page could not show this run (see the page log)"
        finally:
            self.ready.set()
            for subscriber in list(self.subscribers):
                subscriber.offer({"problem": self.problem})
            if watch is not None:
                await watch.close()
            self.hub.forget(self)


class Hub:
    """Every watch of one page process and the streams that read them."""

    def __init__(self, clients: Clients, render: Renderer) -> None:
        self.clients = clients
        self.render = render
        self._feeds: dict[str, RunFeed] = {}
        self._lists: set[Subscriber] = set()
        self.list_version = 0
        """How many list pushes came; list pages refetch when it moves."""
        self._sweeper: asyncio.Task[None] | None = None

    def feed(self, run_id: str) -> RunFeed:
        """The watch of `run_id`, opened now if there is none."""
        found = self._feeds.get(run_id)
        if found is None or found.task.done():
            found = self._feeds[run_id] = RunFeed(self, run_id)
        found.last_used = time.monotonic()
        return found

    def forget(self, feed: RunFeed) -> None:
        if self._feeds.get(feed.run_id) is feed:
            del self._feeds[feed.run_id]

    @contextlib.contextmanager
    def run_stream(self, run_id: str) -> Any:
        """A subscriber of `run_id`'s sections for one browser stream."""
        feed = self.feed(run_id)
        subscriber = Subscriber()
        feed.subscribers.add(subscriber)
        if feed.sections is not None:
            subscriber.offer(feed.sections)
        elif feed.problem is not None:
            subscriber.offer({"problem": feed.problem})
        try:
            yield subscriber
        finally:
            feed.subscribers.discard(subscriber)
            feed.last_used = time.monotonic()

    @contextlib.contextmanager
    def list_stream(self) -> Any:
        """A subscriber of the list signal (the version number of the newest push)."""
        subscriber = Subscriber()
        self._lists.add(subscriber)
        try:
            yield subscriber
        finally:
            self._lists.discard(subscriber)

    @property
    def feeds(self) -> int:
        """How many run watches are open."""
        return len(self._feeds)

    async def lifetime(self) -> None:
        """Follow the run list until the server goes away (then return): each push
        signals the list pages. A watch the server ended is opened again after the delay
        it asked for."""
        self._sweeper = asyncio.create_task(self._sweep(), name="pi-workflows-ui-sweep")
        try:
            while True:
                try:
                    watch = await self.clients.watcher().watch_runs(limit=RUNS_WATCH_LIMIT)
                except (ConnectionLostError, ServerUnavailableError):
                    return
                try:
                    async for _ in watch:
                        self.list_version += 1
                        for subscriber in list(self._lists):
                            subscriber.offer(self.list_version)
                except WatchUnavailableError as exc:
                    await asyncio.sleep(exc.retry_after)
                    continue
                except ConnectionLostError:
                    return
                finally:
                    await watch.close()
                return
        finally:
            self._sweeper.cancel()

    async def _sweep(self) -> None:
        """Close the run watches nobody used for `LINGER_SECONDS`."""
        while True:
            await asyncio.sleep(LINGER_SECONDS / 3)
            now = time.monotonic()
            for feed in list(self._feeds.values()):
                if not feed.subscribers and now - feed.last_used > LINGER_SECONDS:
                    feed.task.cancel()

    async def close(self) -> None:
        """Close every run watch (the page process is stopping)."""
        feeds = list(self._feeds.values())
        for feed in feeds:
            feed.task.cancel()
        for feed in feeds:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await feed.task
