"""Live views pushed by the server: one connection per watch (`run.watch`, `runs.watch`).

Owns `Watch` (blocking) and `AsyncWatch` (asyncio): each opens a connection of its own,
sends the watch request, and hands out the views the server pushes (`run.view` ->
`{runId, run, graph}`, `runs.view` -> `{runs, counts}`), first come first served. The
server keeps only the newest unsent view per watch, so a slow reader skips stale views
instead of queueing them. A watched run that is pruned ends the watch (`gone`); a watch
the server could not push ends with `run.unavailable` or `runs.unavailable`, raised as
`WatchUnavailableError` by every later read. Not thread-safe: one reader.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pi_workflows.client.connection import Connection
from pi_workflows.client.errors import NotFoundError, RejectedError, WatchUnavailableError
from pi_workflows.protocol import CLIENT_SCHEMA, Event, Outcome, Request, Response

if TYPE_CHECKING:
    from pi_workflows.client.async_connection import AsyncConnection

__all__ = ["AsyncWatch", "Watch", "watch_request"]

JsonObject = dict[str, Any]


def watch_request(
    client_id: str, operation: str, run_id: str | None, payload: JsonObject | None
) -> Request:
    """The request that starts a watch (a read: no idempotency key)."""
    return Request(
        schema=CLIENT_SCHEMA,
        request_id=f"req-{uuid.uuid4().hex}",
        client_id=client_id,
        operation=operation,
        run_id=run_id,
        payload=payload or {},
    )


def _refusal(response: Response, operation: str, run_id: str | None) -> Exception:
    """The error for a watch the server refused (`NotFoundError` for an unknown run)."""
    code = response.error.code if response.error else str(response.outcome)
    message = response.error.message if response.error else f"{operation} was refused"
    error = NotFoundError if response.outcome is Outcome.NOT_FOUND else RejectedError
    return error(message, code=code, operation=operation, run_id=run_id)


class _Views:
    """What both watches keep: the newest view, whether the run is gone, and whether the
    server ended the watch."""

    def __init__(self, run_id: str | None) -> None:
        self.run_id = run_id
        self.gone = False
        """True once the watched run was removed (retention); no more views come."""
        self.unavailable: WatchUnavailableError | None = None
        """Set once the server ended the watch (`run.unavailable`, `runs.unavailable`)."""
        self.view: JsonObject | None = None
        """The newest view received."""

    def _check(self) -> None:
        if self.unavailable is not None:
            raise self.unavailable

    def _take(self, event: Event | None) -> JsonObject | None:
        if event is None:
            return None
        if event.name == "run.gone":
            self.gone = True
            return None
        if event.name in ("run.unavailable", "runs.unavailable"):
            self.unavailable = WatchUnavailableError(event.name, dict(event.payload))
            raise self.unavailable
        self.view = dict(event.payload)
        return self.view


class Watch(_Views):
    """One connection receiving the server-pushed views of one run or of the run list."""

    def __init__(
        self,
        connection: Connection,
        client_id: str,
        operation: str,
        *,
        run_id: str | None = None,
        payload: JsonObject | None = None,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(run_id)
        self._connection = connection
        response = connection.exchange(
            watch_request(client_id, operation, run_id, payload), timeout=timeout
        )
        if not response.ok:
            connection.close()
            raise _refusal(response, operation, run_id)

    def next_view(self, timeout: float) -> JsonObject | None:
        """The next pushed view within `timeout` seconds, or None (none came, or `gone`).

        Raises `WatchUnavailableError` once the server ended the watch."""
        self._check()
        if self.gone:
            return None
        return self._take(self._connection.next_event(timeout))

    def wait_for(self, predicate: Callable[[JsonObject], bool], timeout: float) -> JsonObject:
        """The first view (the newest one first) that satisfies `predicate`.

        Raises `TimeoutError` after `timeout` seconds, `LookupError` if the run is gone,
        `WatchUnavailableError` if the server ended the watch.
        """
        until = time.monotonic() + timeout
        if self.view is not None and predicate(self.view):
            return self.view
        while True:
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no pushed view matched within {timeout:g} s")
            view = self.next_view(left)
            if self.gone:
                raise LookupError(f"run {self.run_id} was removed")
            if view is not None and predicate(view):
                return view

    def close(self) -> None:
        """Close the watch connection (the server stops pushing)."""
        self._connection.close()

    def __enter__(self) -> Watch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncWatch(_Views):
    """`Watch` for asyncio: open it with `await AsyncWatch.open(...)`; an async context
    manager and an async iterator of views (it ends when the run is gone)."""

    def __init__(self, connection: AsyncConnection, run_id: str | None) -> None:
        super().__init__(run_id)
        self._connection = connection

    @classmethod
    async def open(
        cls,
        connection: AsyncConnection,
        client_id: str,
        operation: str,
        *,
        run_id: str | None = None,
        payload: JsonObject | None = None,
        timeout: float = 30.0,  # noqa: ASYNC109 - the blocking twin's timeout=
    ) -> AsyncWatch:
        """Send the watch request on `connection` (closed if the server refuses)."""
        request = watch_request(client_id, operation, run_id, payload)
        response = await connection.exchange(request, timeout=timeout)
        if not response.ok:
            await connection.close()
            raise _refusal(response, operation, run_id)
        return cls(connection, run_id)

    async def next_view(self, timeout: float | None) -> JsonObject | None:  # noqa: ASYNC109 - the blocking twin's timeout=
        """The next pushed view within `timeout` seconds, or None (see `Watch.next_view`)."""
        self._check()
        if self.gone:
            return None
        return self._take(await self._connection.next_event(timeout))

    async def wait_for(
        self,
        predicate: Callable[[JsonObject], bool],
        timeout: float,  # noqa: ASYNC109 - the blocking twin's timeout=
    ) -> JsonObject:
        """The first view (the newest one first) that satisfies `predicate` (see `Watch`)."""
        until = time.monotonic() + timeout
        if self.view is not None and predicate(self.view):
            return self.view
        while True:
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no pushed view matched within {timeout:g} s")
            view = await self.next_view(left)
            if self.gone:
                raise LookupError(f"run {self.run_id} was removed")
            if view is not None and predicate(view):
                return view

    def __aiter__(self) -> AsyncWatch:
        return self

    async def __anext__(self) -> JsonObject:
        while True:
            view = await self.next_view(None)
            if self.gone:
                raise StopAsyncIteration
            if view is not None:
                return view

    async def close(self) -> None:
        """Close the watch connection (the server stops pushing)."""
        await self._connection.close()

    async def __aenter__(self) -> AsyncWatch:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
