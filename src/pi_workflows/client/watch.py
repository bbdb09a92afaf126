"""Live views pushed by the server: one connection per watch (`run.watch`, `runs.watch`).

Owns the blocking `Watch`: it opens a connection of its own, sends the watch request, and
hands out the views the server pushes (`run.view` -> `{runId, run, graph}`, `runs.view` ->
`{runs, counts}`), the newest first-come. The server keeps only the newest unsent view per
watch, so a slow reader skips stale views instead of queueing them. A watched run that is
pruned ends the watch (`gone`). Not thread-safe: one reader.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any

from pi_workflows.client.connection import Connection
from pi_workflows.client.errors import NotFoundError, RejectedError
from pi_workflows.protocol import CLIENT_SCHEMA, Outcome, Request

__all__ = ["Watch"]

JsonObject = dict[str, Any]


class Watch:
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
        self._connection = connection
        self.run_id = run_id
        self.gone = False
        """True once the watched run was removed (retention); no more views come."""
        self.view: JsonObject | None = None
        """The newest view received."""
        request = Request(
            schema=CLIENT_SCHEMA,
            request_id=f"req-{uuid.uuid4().hex}",
            client_id=client_id,
            operation=operation,
            run_id=run_id,
            payload=payload or {},
        )
        response = connection.exchange(request, timeout=timeout)
        if not response.ok:
            connection.close()
            code = response.error.code if response.error else str(response.outcome)
            message = response.error.message if response.error else f"{operation} was refused"
            error = NotFoundError if response.outcome is Outcome.NOT_FOUND else RejectedError
            raise error(message, code=code, operation=operation, run_id=run_id)

    def next_view(self, timeout: float) -> JsonObject | None:
        """The next pushed view within `timeout` seconds, or None (none came, or `gone`)."""
        if self.gone:
            return None
        event = self._connection.next_event(timeout)
        if event is None:
            return None
        if event.name == "run.gone":
            self.gone = True
            return None
        self.view = dict(event.payload)
        return self.view

    def wait_for(self, predicate: Callable[[JsonObject], bool], timeout: float) -> JsonObject:
        """The first view (the newest one first) that satisfies `predicate`.

        Raises `TimeoutError` after `timeout` seconds, `LookupError` if the run is gone.
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
