"""Client methods for interactive requests and origin sessions, blocking
(`InteractionMethods`, mixed into `Client`) and asyncio (`AsyncInteractionMethods`, mixed
into `AsyncClient`) side by side, with the session watches.

Submissions are validated by a runner the server supervises; `submit` holds on until the
outcome is durable, asking again with the same idempotency key while the server answers
`validating`. A rejected submission raises `RejectedError` with code `validationRejected`
and the validation message. `SessionWatch` (and `AsyncSessionWatch`) is one connection
that receives the server-pushed views of one session (what the Pi extension does, for
programs and tests); a watch the server ended raises `WatchUnavailableError`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pi_workflows.client import operations as ops
from pi_workflows.client.connection import Connection
from pi_workflows.client.errors import WatchUnavailableError
from pi_workflows.client.operations import SUBMIT_POLL_SECONDS
from pi_workflows.protocol import CLIENT_SCHEMA, Event, Request, Response

if TYPE_CHECKING:
    from pi_workflows.client.async_connection import AsyncConnection
    from pi_workflows.client.operations import JsonObject, Program, Receipt, T

__all__ = [
    "SUBMIT_POLL_SECONDS",
    "AsyncInteractionMethods",
    "AsyncSessionWatch",
    "InteractionMethods",
    "SessionWatch",
]


class InteractionMethods:
    """`interaction.*`, `session.*` and report operations; needs `_run` and a socket."""

    if TYPE_CHECKING:
        timeout: float
        start_timeout: float

        @property
        def socket_path(self) -> Path: ...

        @property
        def client_id(self) -> str: ...

        def _run(self, program: Program[T]) -> T: ...

    def submit(
        self,
        request_id: str,
        output: Any,
        *,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        wait: float | None = 120.0,
    ) -> Receipt:
        """`interaction.submit`: hand in an agent, assistant-message or checkpoint answer.

        Returns the receipt once the submission is `accepted` (or, after `wait` seconds,
        still `validating`: ask again with the same key). Raises `RejectedError` (code
        `validationRejected`, the message is the validation's) when it was rejected.
        """
        return self._run(ops.submit(request_id, output, run_id, idempotency_key, wait))

    def update(self, request_id: str, body: Any, *, idempotency_key: str | None = None) -> Receipt:
        """`interaction.update`: record progress on an open step (an event of its run)."""
        payload: JsonObject = {"requestId": request_id, "body": body}
        return self._run(ops.call("interaction.update", payload, None, idempotency_key))

    def list_interactions(self, session_id: str | None = None) -> list[JsonObject]:
        """`interaction.list`: open requests, oldest first (of one origin session)."""
        return self._run(ops.list_interactions(session_id))

    def attach_session(
        self, session_id: str, *, idempotency_key: str | None = None, seat_id: str | None = None
    ) -> int:
        """`session.attach`: become the session's coordinator as seat `seat_id` (one id per
        coordinator incarnation, so a reconnect keeps its turns; none: a new seat at every
        attach); returns the epoch."""
        return self._run(ops.attach_session(session_id, idempotency_key, seat_id))

    def get_session(self, session_id: str) -> JsonObject:
        """`session.get`: the session's view (active request, messages, runs)."""
        return self._run(ops.get_session(session_id))

    def read_message_text(self, workflow_message_id: str) -> str:
        """`workflowMessage.get`: a workflow message's whole text, read in slices (a view
        carries a text over its bound cut, with `textTruncated: true`)."""
        return self._run(ops.message_text(workflow_message_id))

    def report_messages(
        self, session_id: str, epoch: int, present: Mapping[str, str], *, idle: bool = False
    ) -> JsonObject:
        """`workflowMessage.report`: `present` maps workflow message ids to session entry ids."""
        return self._run(ops.report_messages(session_id, epoch, present, idle))

    def report_turn(
        self,
        session_id: str,
        epoch: int,
        event: str,
        *,
        stop_reason: str | None = None,
        workflow_message_id: str | None = None,
        error_message: str | None = None,
    ) -> JsonObject:
        """`workflowTurn.report`: a model turn `started` or `ended` (with its stop reason and,
        for a turn ended `error`, the provider's error text, quoted when a detached run pauses)."""
        return self._run(
            ops.report_turn(
                session_id, epoch, event, stop_reason, workflow_message_id, error_message
            )
        )

    def watch_session(self, session_id: str, epoch: int) -> SessionWatch:
        """`session.watch` on a connection of its own; read views from the returned watch."""
        return SessionWatch(
            Connection.open(self.socket_path, timeout=self.start_timeout),
            self.client_id,
            session_id,
            epoch,
            self.timeout,
        )


class AsyncInteractionMethods:
    """`InteractionMethods` for asyncio: the same names, arguments and results, awaitable."""

    if TYPE_CHECKING:
        timeout: float
        start_timeout: float

        @property
        def socket_path(self) -> Path: ...

        @property
        def client_id(self) -> str: ...

        async def _run(self, program: Program[T]) -> T: ...

    async def submit(
        self,
        request_id: str,
        output: Any,
        *,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        wait: float | None = 120.0,
    ) -> Receipt:
        """`interaction.submit`, held until the submission's validation settled."""
        return await self._run(ops.submit(request_id, output, run_id, idempotency_key, wait))

    async def update(
        self, request_id: str, body: Any, *, idempotency_key: str | None = None
    ) -> Receipt:
        """`interaction.update`: record progress on an open step (an event of its run)."""
        payload: JsonObject = {"requestId": request_id, "body": body}
        return await self._run(ops.call("interaction.update", payload, None, idempotency_key))

    async def list_interactions(self, session_id: str | None = None) -> list[JsonObject]:
        """`interaction.list`: open requests, oldest first (of one origin session)."""
        return await self._run(ops.list_interactions(session_id))

    async def attach_session(
        self, session_id: str, *, idempotency_key: str | None = None, seat_id: str | None = None
    ) -> int:
        """`session.attach`: become the session's coordinator as seat `seat_id`; returns
        the epoch."""
        return await self._run(ops.attach_session(session_id, idempotency_key, seat_id))

    async def get_session(self, session_id: str) -> JsonObject:
        """`session.get`: the session's view (active request, messages, runs)."""
        return await self._run(ops.get_session(session_id))

    async def read_message_text(self, workflow_message_id: str) -> str:
        """`workflowMessage.get`: a workflow message's whole text, read in slices."""
        return await self._run(ops.message_text(workflow_message_id))

    async def report_messages(
        self, session_id: str, epoch: int, present: Mapping[str, str], *, idle: bool = False
    ) -> JsonObject:
        """`workflowMessage.report`: `present` maps workflow message ids to session entry ids."""
        return await self._run(ops.report_messages(session_id, epoch, present, idle))

    async def report_turn(
        self,
        session_id: str,
        epoch: int,
        event: str,
        *,
        stop_reason: str | None = None,
        workflow_message_id: str | None = None,
        error_message: str | None = None,
    ) -> JsonObject:
        """`workflowTurn.report`: a model turn `started` or `ended` (with its stop reason and,
        for a turn ended `error`, the provider's error text, quoted when a detached run pauses)."""
        return await self._run(
            ops.report_turn(
                session_id, epoch, event, stop_reason, workflow_message_id, error_message
            )
        )

    async def watch_session(self, session_id: str, epoch: int) -> AsyncSessionWatch:
        """`session.watch` on a connection of its own (use with `async with`)."""
        from pi_workflows.client.async_connection import AsyncConnection  # noqa: PLC0415 - asyncio on first use

        connection = await AsyncConnection.open(self.socket_path, timeout=self.start_timeout)
        return await AsyncSessionWatch.open(
            connection, self.client_id, session_id, epoch, self.timeout
        )


def _session_request(client_id: str, session_id: str, epoch: int) -> Request:
    return Request(
        schema=CLIENT_SCHEMA,
        request_id=f"req-{uuid.uuid4().hex}",
        client_id=client_id,
        operation="session.watch",
        payload={"sessionId": session_id, "coordinatorEpoch": epoch},
    )


def _refused(response: Response) -> ValueError:
    message = response.error.message if response.error else str(response.outcome)
    return ValueError(f"session.watch was refused: {message}")


class _SessionViews:
    """What both session watches keep: the newest view, whether they were fenced, and
    whether the server ended them (`session.unavailable`)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.fenced = False
        """True once a later `session.attach` took over (no more views come)."""
        self.unavailable: WatchUnavailableError | None = None
        """Set once the server ended the watch (`session.unavailable`); raised again by
        every later read."""
        self.view: JsonObject | None = None

    def _take(self, event: Event | None) -> JsonObject | None:
        if event is None:
            return None
        if event.name == "session.fenced":
            self.fenced = True
            return None
        if event.name == "session.unavailable":
            self.unavailable = WatchUnavailableError(event.name, dict(event.payload))
            raise self.unavailable
        self.view = dict(event.payload)
        return self.view


class SessionWatch(_SessionViews):
    """One connection that receives the server-pushed views of one session."""

    def __init__(
        self, connection: Connection, client_id: str, session_id: str, epoch: int, timeout: float
    ) -> None:
        super().__init__(session_id)
        self._connection = connection
        response = connection.exchange(
            _session_request(client_id, session_id, epoch), timeout=timeout
        )
        if not response.ok:
            connection.close()
            raise _refused(response)

    def next_view(self, timeout: float) -> JsonObject | None:
        """The next view pushed within `timeout` seconds (None if none came). A
        `session.fenced` event marks the watch fenced and returns None; a
        `session.unavailable` event raises `WatchUnavailableError` (the watch has ended)."""
        if self.unavailable is not None:
            raise self.unavailable
        return self._take(self._connection.next_event(timeout))

    def wait_for(self, predicate: Callable[[JsonObject], bool], timeout: float) -> JsonObject:
        """The first pushed view (or the current one) that satisfies `predicate`."""
        until = time.monotonic() + timeout
        if self.view is not None and predicate(self.view):
            return self.view
        while True:
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no view of session {self.session_id} matched in {timeout} s")
            view = self.next_view(left)
            if view is not None and predicate(view):
                return view

    def close(self) -> None:
        """Close the watch connection."""
        self._connection.close()

    def __enter__(self) -> SessionWatch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncSessionWatch(_SessionViews):
    """`SessionWatch` for asyncio: open it with `await AsyncSessionWatch.open(...)`."""

    def __init__(self, connection: AsyncConnection, session_id: str) -> None:
        super().__init__(session_id)
        self._connection = connection

    @classmethod
    async def open(
        cls,
        connection: AsyncConnection,
        client_id: str,
        session_id: str,
        epoch: int,
        timeout: float,  # noqa: ASYNC109 - the blocking twin's timeout=
    ) -> AsyncSessionWatch:
        """Send `session.watch` on `connection` (closed if the server refuses)."""
        request = _session_request(client_id, session_id, epoch)
        response = await connection.exchange(request, timeout=timeout)
        if not response.ok:
            await connection.close()
            raise _refused(response)
        return cls(connection, session_id)

    async def next_view(self, timeout: float) -> JsonObject | None:  # noqa: ASYNC109 - the blocking twin's timeout=
        """The next view pushed within `timeout` seconds (see `SessionWatch.next_view`)."""
        if self.unavailable is not None:
            raise self.unavailable
        return self._take(await self._connection.next_event(timeout))

    async def wait_for(
        self,
        predicate: Callable[[JsonObject], bool],
        timeout: float,  # noqa: ASYNC109 - the blocking twin's timeout=
    ) -> JsonObject:
        """The first pushed view (or the current one) that satisfies `predicate`."""
        until = time.monotonic() + timeout
        if self.view is not None and predicate(self.view):
            return self.view
        while True:
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no view of session {self.session_id} matched in {timeout} s")
            view = await self.next_view(left)
            if view is not None and predicate(view):
                return view

    async def close(self) -> None:
        """Close the watch connection."""
        await self._connection.close()

    async def __aenter__(self) -> AsyncSessionWatch:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
