"""One blocking connection to the server's Unix socket: connect, check the hello, exchange.

Owns the socket of one connection and its `FrameReader`: connecting with a deadline, reading
and checking the server's `hello` (client protocol v1 only), sending one `Request` and reading
its `Response` with a timeout. Any failure that leaves the stream in an unknown state closes
the connection. It never retries, reconnects or starts a server (that is `sync_client` and
`autostart`), and it never builds requests itself. Not thread-safe: one caller at a time.
"""

from __future__ import annotations

import errno
import os
import socket
import time
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Final

import msgspec

from pi_workflows.client.errors import (
    ConnectionLostError,
    OtherUserServerError,
    ProtocolMismatchError,
    RequestTooLargeError,
    ServerProtocolError,
    ServerUnavailableError,
)
from pi_workflows.protocol import (
    CLIENT_SCHEMA,
    PROTOCOL_VERSION,
    Event,
    FrameError,
    FrameReader,
    FrameTooLarge,
    Hello,
    ProtocolError,
    Request,
    Response,
    decode_server_message,
    encode_frame,
)

__all__ = ["MAX_SOCKET_PATH_BYTES", "Connection"]

MAX_SOCKET_PATH_BYTES: Final = 107
"""Longest Unix socket path Linux accepts (108 bytes including the terminating NUL)."""

_NO_LISTENER_ERRNOS: Final = frozenset({errno.ENOENT, errno.ECONNREFUSED})

MAX_BUFFERED_EVENTS: Final = 64
"""Events kept while a reply is awaited; a watcher reads the newest view anyway."""


class Connection:
    """An open connection on which the server has already said a valid v1 `hello`.

    Create one with `Connection.open`. After `ConnectionLostError` or `ServerProtocolError`
    the connection is closed and `closed` is True; open a new one to continue.
    """

    def __init__(self, sock: socket.socket, reader: FrameReader, hello: Hello, path: Path):
        self._sock = sock
        self._reader = reader
        self._closed = False
        self.events: deque[Event] = deque(maxlen=MAX_BUFFERED_EVENTS)
        """Server-pushed events received while a reply was awaited (oldest dropped first)."""
        self.hello: Final = hello
        """The server's greeting: its pid, epoch and version."""
        self.socket_path: Final = path

    @classmethod
    def open(cls, path: Path, *, timeout: float) -> Connection:
        """Connect to the socket at `path` and read the server's hello within `timeout` seconds.

        Raises:
            ServerUnavailableError: nobody listens (`startable` True: the socket is missing or
                refuses connections) or the socket cannot be used (`startable` False).
            ConnectionLostError: the server accepted but closed, or sent no hello in time.
            ProtocolMismatchError: the first frame is not a client-protocol v1 hello.
        """
        encoded = os.fsencode(path)
        if len(encoded) > MAX_SOCKET_PATH_BYTES:
            raise ServerUnavailableError(
                path,
                reason=f"the socket path is longer than {MAX_SOCKET_PATH_BYTES} bytes; "
                "use a shorter PI_WORKFLOWS_HOME",
                startable=False,
            )
        check_owner(path)
        deadline = time.monotonic() + timeout
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(encoded)
        except TimeoutError:
            sock.close()
            raise ConnectionLostError(
                f"connecting to {path} took longer than {timeout:g} s"
            ) from None
        except OSError as exc:
            sock.close()
            if exc.errno in _NO_LISTENER_ERRNOS:
                reason = "socket missing" if exc.errno == errno.ENOENT else "connection refused"
                raise ServerUnavailableError(path, reason=reason, startable=True) from None
            raise ServerUnavailableError(
                path, reason=os.strerror(exc.errno) if exc.errno else str(exc), startable=False
            ) from None
        reader = FrameReader(sock)
        try:
            hello = _read_hello(reader, path, max(0.0, deadline - time.monotonic()))
        except BaseException:
            sock.close()
            raise
        return cls(sock, reader, hello, path)

    @property
    def closed(self) -> bool:
        """True once the connection was closed, by `close` or after a failure."""
        return self._closed

    def exchange(self, request: Request, *, timeout: float) -> Response:
        """Send one request and return its response, waiting at most `timeout` seconds.

        Events the server pushes in between are skipped.

        Raises:
            RequestTooLargeError: the request exceeds the frame cap; nothing was sent and the
                connection stays open.
            ConnectionLostError: the stream ended, broke, or no reply came in time; the
                connection is closed (the server may or may not have received the request).
            ServerProtocolError: the server sent an invalid frame or a response to another
                request; the connection is closed.
        """
        if self._closed:
            raise ConnectionLostError("the connection is closed", operation=request.operation)
        try:
            frame = encode_frame(request)
        except FrameTooLarge as exc:
            raise RequestTooLargeError(request.operation, exc.limit) from None
        deadline = time.monotonic() + timeout
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(frame)
        except OSError as exc:
            self.close()
            raise ConnectionLostError(
                _describe_os_error(exc), operation=request.operation
            ) from None
        while True:
            message = self._read_message(request.operation, deadline, timeout)
            match message:
                case Response(request_id=request_id) if request_id == request.request_id:
                    return message
                case Response():
                    self.close()
                    raise ServerProtocolError(
                        f"the server answered request {message.request_id!r} "
                        f"while {request.request_id!r} was outstanding"
                    )
                case Event():
                    self.events.append(message)
                case Hello():
                    self.close()
                    raise ServerProtocolError("the server sent a second hello")

    def next_event(self, timeout: float) -> Event | None:
        """The next server-pushed event (buffered first), or None after ``timeout`` seconds.

        Only while no request is outstanding. Raises ``ConnectionLostError`` when the stream
        ends and ``ServerProtocolError`` for a response nobody asked for.
        """
        if self.events:
            return self.events.popleft()
        if self._closed:
            raise ConnectionLostError("the connection is closed", operation="watch")
        try:
            frame = self._reader.read_frame(timeout=timeout)
        except TimeoutError:
            return None
        except (FrameError, OSError):
            self.close()
            raise ConnectionLostError("the server closed the watch", operation="watch") from None
        if frame is None:
            self.close()
            raise ConnectionLostError("the server closed the watch", operation="watch")
        try:
            message = decode_server_message(frame)
        except ProtocolError as exc:
            self.close()
            raise ServerProtocolError(
                f"the server sent an invalid message: {exc.message}"
            ) from None
        if not isinstance(message, Event):
            self.close()
            raise ServerProtocolError("the server sent a reply while no request was outstanding")
        return message

    def close(self) -> None:
        """Close the socket; safe to call more than once."""
        if not self._closed:
            self._closed = True
            self._sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _read_message(
        self, operation: str, deadline: float, timeout: float
    ) -> Hello | Response | Event:
        """Read and decode the next server frame, closing the connection on any failure."""
        try:
            frame = self._reader.read_frame(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            self.close()
            raise ConnectionLostError(
                f"no reply within {timeout:g} s", operation=operation
            ) from None
        except FrameTooLarge as exc:
            self.close()
            raise ServerProtocolError(
                f"the server sent a frame over the {exc.limit}-byte limit"
            ) from None
        except FrameError:
            self.close()
            raise ConnectionLostError(
                "the server closed the connection in the middle of a reply", operation=operation
            ) from None
        except OSError as exc:
            self.close()
            raise ConnectionLostError(_describe_os_error(exc), operation=operation) from None
        if frame is None:
            self.close()
            raise ConnectionLostError(
                "the server closed the connection before replying", operation=operation
            )
        try:
            return decode_server_message(frame)
        except ProtocolError as exc:
            self.close()
            raise ServerProtocolError(
                f"the server sent an invalid message: {exc.message}"
            ) from None


def check_owner(path: Path) -> None:
    """Refuse, before connecting, a socket of another user: its server would refuse the
    connection (it serves only its own uid), and a retry cannot help
    (`OtherUserServerError`). A missing socket passes (nobody listens)."""
    try:
        owner = os.stat(path).st_uid
    except FileNotFoundError:
        return
    except PermissionError:
        raise OtherUserServerError(path, owner_uid=None) from None
    except OSError:
        return  # connect reports it
    if owner != os.getuid():
        raise OtherUserServerError(path, owner_uid=owner)


def _read_hello(reader: FrameReader, path: Path, timeout: float) -> Hello:
    """Read the first frame and require a client-protocol v1 hello."""
    try:
        frame = reader.read_frame(timeout=timeout)
    except TimeoutError:
        raise ConnectionLostError(
            f"the server at {path} sent no hello within {timeout:g} s"
        ) from None
    except FrameTooLarge as exc:
        raise ProtocolMismatchError(
            f"the peer at {path} sent a first frame over the {exc.limit}-byte limit, "
            "not a pi-workflows hello"
        ) from None
    except (FrameError, OSError):
        raise ConnectionLostError(
            f"the server at {path} closed the connection before its hello"
        ) from None
    if frame is None:
        raise ConnectionLostError(f"the server at {path} closed the connection before its hello")
    try:
        message = decode_server_message(frame)
    except ProtocolError as exc:
        raise _mismatch(frame, path, exc.message) from None
    if not isinstance(message, Hello):
        raise ProtocolMismatchError(
            f"the peer at {path} did not start with a hello (got a {_tag(message)} message)"
        )
    return message


def _mismatch(frame: bytes, path: Path, detail: str) -> ProtocolMismatchError:
    """Describe a first frame that is not a valid v1 hello, naming what the peer announced."""
    try:
        raw = msgspec.json.decode(frame)
    except msgspec.DecodeError:
        raw = None
    if isinstance(raw, dict) and raw.get("type") == "hello":
        schema = raw.get("schema")
        version = raw.get("protocolVersion")
        if schema != CLIENT_SCHEMA or version != PROTOCOL_VERSION:
            return ProtocolMismatchError(
                f"the server at {path} speaks {schema!r} protocol version {version!r}; "
                f"this client speaks {CLIENT_SCHEMA!r} protocol version {PROTOCOL_VERSION} "
                "(upgrade or restart the server with this version of pi-workflows)",
                server_schema=schema if isinstance(schema, str) else None,
                server_protocol_version=version,
            )
    return ProtocolMismatchError(f"the peer at {path} sent an invalid hello: {detail}")


def _tag(message: msgspec.Struct) -> str:
    return str(type(message).__struct_config__.tag)


def _describe_os_error(exc: OSError) -> str:
    if isinstance(exc, TimeoutError):
        return "sending the request timed out"
    if isinstance(exc, BrokenPipeError):
        return "broken pipe"
    if isinstance(exc, ConnectionResetError):
        return "connection reset by the server"
    return os.strerror(exc.errno) if exc.errno else type(exc).__name__
