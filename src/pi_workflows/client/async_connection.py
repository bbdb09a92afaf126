"""One asyncio connection to the server's Unix socket: connect, check the hello, exchange.

The asyncio twin of `connection.Connection`, with the same errors: `ServerUnavailableError`
when nobody listens, `ConnectionLostError` when the stream breaks or a reply does not come
in time (the connection is then closed), `ProtocolMismatchError` for a peer that is not a
v1 server, `ServerProtocolError` for an invalid frame. Events pushed while a reply is
awaited are kept (at most `MAX_BUFFERED_EVENTS`, the oldest dropped). One request at a
time: `AsyncClient` serialises its calls with a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections import deque
from pathlib import Path
from typing import Final

from pi_workflows.client.connection import (
    MAX_BUFFERED_EVENTS,
    MAX_SOCKET_PATH_BYTES,
    check_owner,
)
from pi_workflows.client.errors import (
    ConnectionLostError,
    ProtocolMismatchError,
    RequestTooLargeError,
    ServerProtocolError,
    ServerUnavailableError,
)
from pi_workflows.protocol import (
    MAX_FRAME_BYTES,
    Event,
    FrameError,
    FrameTooLarge,
    Hello,
    ProtocolError,
    Request,
    Response,
    decode_server_message,
    encode_frame,
    read_frame,
)

__all__ = ["AsyncConnection"]

_NO_LISTENER_ERRNOS: Final = frozenset({errno.ENOENT, errno.ECONNREFUSED})


class AsyncConnection:
    """An open asyncio connection on which the server has said a valid v1 `hello`."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: Hello
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._closed = False
        self.hello: Final = hello
        self.events: deque[Event] = deque(maxlen=MAX_BUFFERED_EVENTS)
        """Server-pushed events received while a reply was awaited."""

    @classmethod
    async def open(cls, path: Path, *, timeout: float) -> AsyncConnection:
        """Connect to `path` and read the server's hello within `timeout` seconds."""
        if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
            raise ServerUnavailableError(
                path, reason="the socket path is too long; use a shorter PI_WORKFLOWS_HOME",
                startable=False,
            )  # fmt: skip
        check_owner(path)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(path), limit=MAX_FRAME_BYTES), timeout
            )
        except TimeoutError:
            raise ConnectionLostError(
                f"connecting to {path} took longer than {timeout:g} s"
            ) from None
        except OSError as exc:
            if exc.errno in _NO_LISTENER_ERRNOS:
                reason = "socket missing" if exc.errno == errno.ENOENT else "connection refused"
                raise ServerUnavailableError(path, reason=reason, startable=True) from None
            raise ServerUnavailableError(path, reason=str(exc), startable=False) from None
        try:
            message = await cls._read(reader, timeout, f"the hello of {path}")
        except BaseException:
            writer.close()
            raise
        if not isinstance(message, Hello):
            writer.close()
            raise ProtocolMismatchError(f"the peer at {path} did not start with a hello")
        return cls(reader, writer, message)

    @property
    def closed(self) -> bool:
        """True once the connection was closed."""
        return self._closed

    @staticmethod
    async def _read(
        reader: asyncio.StreamReader, timeout: float | None, what: str
    ) -> Hello | Response | Event:
        try:
            frame = await asyncio.wait_for(read_frame(reader), timeout)
        except TimeoutError:
            raise ConnectionLostError(f"no answer for {what} within {timeout:g} s") from None
        except FrameTooLarge as exc:
            raise ServerProtocolError(f"the server sent a frame over {exc.limit} bytes") from None
        except (FrameError, OSError):
            raise ConnectionLostError(f"the server closed the connection during {what}") from None
        if frame is None:
            raise ConnectionLostError(f"the server closed the connection during {what}")
        try:
            return decode_server_message(frame)
        except ProtocolError as exc:
            raise ServerProtocolError(
                f"the server sent an invalid message: {exc.message}"
            ) from None

    async def exchange(self, request: Request, *, timeout: float) -> Response:
        """Send one request and return its response within `timeout` seconds."""
        if self._closed:
            raise ConnectionLostError("the connection is closed", operation=request.operation)
        try:
            frame = encode_frame(request)
        except FrameTooLarge as exc:
            raise RequestTooLargeError(request.operation, exc.limit) from None
        try:
            self._writer.write(frame)
            await asyncio.wait_for(self._writer.drain(), timeout)
        except (OSError, TimeoutError) as exc:
            await self.close()
            raise ConnectionLostError(
                str(exc) or "write failed", operation=request.operation
            ) from None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                message = await self._read(
                    self._reader, max(0.0, deadline - loop.time()), request.operation
                )
            except (ConnectionLostError, ServerProtocolError):
                await self.close()
                raise
            match message:
                case Response(request_id=request_id) if request_id == request.request_id:
                    return message
                case Event():
                    self.events.append(message)
                case _:
                    await self.close()
                    raise ServerProtocolError("the server answered another request")

    async def next_event(self, timeout: float | None) -> Event | None:
        """The next pushed event (buffered first), or None after `timeout` seconds."""
        if self.events:
            return self.events.popleft()
        if self._closed:
            raise ConnectionLostError("the connection is closed", operation="watch")
        try:
            message = await asyncio.wait_for(self._read(self._reader, None, "a watch"), timeout)
        except TimeoutError:
            return None  # the read was cancelled cleanly: the stream is where it was
        except (ConnectionLostError, ServerProtocolError):
            await self.close()
            raise
        if not isinstance(message, Event):
            await self.close()
            raise ServerProtocolError("the server sent a reply while no request was outstanding")
        return message

    async def close(self) -> None:
        """Close the connection; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await self._writer.wait_closed()
