"""Client connections: peer check, hello, bounded frames, ordered replies, backpressure.

Runs in the server. Each connection is one task that answers requests in order, fed by a
reader task that reads and decodes frames ahead of it. Anything wrong with a connection
(another uid, a malformed or oversized frame, an unknown envelope field, more than
`MAX_OUTSTANDING` unanswered requests, a reader too slow to keep up) closes that connection
only. Per connection the server holds at most `MAX_OUTSTANDING` decoded requests and about
`QUEUED_BYTES` of their frames, plus one frame being read and a bounded write buffer. The
number of connections is capped below the file-descriptor limit (`connection_limit`), so a
client that opens connections until descriptors run out cannot starve runners and SQLite.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from pi_workflows.protocol import (
    CLIENT_SCHEMA,
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    ErrorInfo,
    Event,
    Hello,
    Outcome,
    Request,
    Response,
    decode_request,
    encode_frame,
    read_frame,
)
from pi_workflows.protocol.errors import ProtocolError
from pi_workflows.server.context import ServerContext
from pi_workflows.server.handlers import current_peer, dispatch
from pi_workflows.server.pushes import unavailable_for_key

log = logging.getLogger(__name__)

WRITE_HIGH_WATER = 256 * 1024
# A client whose unread responses stay above the high-water mark this long is cut off.
DRAIN_SECONDS = 10.0

MAX_OUTSTANDING: Final = 64
"""Requests read from one connection and not yet answered; one more closes it."""
QUEUED_BYTES: Final = 2 * MAX_FRAME_BYTES
"""Frames read ahead and not yet dispatched, per connection; beyond it the reader waits."""
MAX_CONNECTIONS: Final = 1024
"""Open client connections at most, whatever the descriptor limit."""
RESERVED_FDS: Final = 64
"""Descriptors kept for the database, the log, the listener and the event loop."""
FDS_PER_RUNNER: Final = 8
"""Descriptors kept per runner slot (its socketpair, output pipes, process handles)."""
REFUSAL_LOG_SECONDS: Final = 10.0
_last_refusal_log = 0.0


def connection_limit(max_runners: int) -> int:
    """How many client connections may be open at once, from ``RLIMIT_NOFILE`` now.

    Read at every connection, so a limit lowered while the server runs takes effect.
    """
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = MAX_CONNECTIONS + RESERVED_FDS
    spare = soft - RESERVED_FDS - FDS_PER_RUNNER * max_runners
    return max(4, min(MAX_CONNECTIONS, spare))


def peer_uid(writer: asyncio.StreamWriter) -> int | None:
    """The uid of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


async def _send(server: ServerContext, writer: asyncio.StreamWriter, message: object) -> bool:
    """Write one frame; False (and the connection is closed) if the peer cannot keep up."""
    return await _send_frame(server, writer, encode_frame(message))


async def _send_frame(server: ServerContext, writer: asyncio.StreamWriter, frame: bytes) -> bool:
    """Write one encoded frame (see ``_send``)."""
    writer.write(frame)
    if writer.transport.get_write_buffer_size() > server.config.client_write_buffer_bytes:
        log.warning("closing a client that does not read its responses")
        server.slow_clients_dropped += 1
        return False
    try:
        async with asyncio.timeout(DRAIN_SECONDS):  # no task per reply, unlike wait_for
            await writer.drain()
    except TimeoutError:
        log.warning("closing a client that does not read its responses")
        server.slow_clients_dropped += 1
        return False
    except ConnectionError:
        return False
    return True


class ConnectionPeer:
    """Server-pushed events of one connection: the newest unsent event per key, sent by one
    task in between (and never instead of) responses, so a slow reader holds at most one
    event per key, never a queue. An event that cannot be encoded (it would exceed a frame)
    is logged and replaced by its watch's ``*.unavailable`` event; nothing an event holds
    stops the sending task."""

    def __init__(self, server: ServerContext, writer: asyncio.StreamWriter) -> None:
        self._server = server
        self._writer = writer
        self._slots: dict[str, Event] = {}
        self._wakeup = asyncio.Event()
        self._closers: list[Callable[[], None]] = []
        self._task = asyncio.create_task(self._pump())

    def push(self, key: str, event: Event) -> None:
        """Queue ``event`` as the latest for ``key``; an older unsent one is replaced."""
        self._slots[key] = event
        self._wakeup.set()

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the connection closes."""
        self._closers.append(callback)

    async def _pump(self) -> None:
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup.clear()
                while self._slots:
                    key = next(iter(self._slots))
                    frame = _event_frame(key, self._slots.pop(key))
                    if frame is None:
                        continue
                    if not await _send_frame(self._server, self._writer, frame):
                        self._writer.close()
                        return
        except asyncio.CancelledError:
            raise
        except Exception:  # a sender that died silently would leave a watcher waiting
            log.exception("closing a client connection whose pushed events failed")
            self._writer.close()

    def close(self) -> None:
        """The connection closed: stop sending and run the close callbacks."""
        self._task.cancel()
        for callback in self._closers:
            with contextlib.suppress(Exception):
                callback()


def _event_frame(key: str, event: Event) -> bytes | None:
    """``event`` encoded, or (logged) its watch's ``*.unavailable`` event when it cannot be
    encoded; None when not even that can be sent."""
    try:
        return encode_frame(event)
    except Exception:
        log.exception("could not send the %s event for %s", event.name, key)
    fallback = unavailable_for_key(key)
    if fallback is None:
        return None
    try:
        return encode_frame(fallback)
    except Exception:  # pragma: no cover - a few hundred bytes of plain JSON
        log.exception("could not send the %s event for %s", fallback.name, key)
        return None


@dataclass(frozen=True)
class _Closing:
    """The reader stopped: why, and whether a best-effort rejection goes out first."""

    reason: str
    reply: bool = False
    level: int = logging.INFO


class _Inbox:
    """Requests of one connection that were read and not yet answered (bounded)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[Request, int] | _Closing | None] = asyncio.Queue()
        self.outstanding = 0  # read, not yet answered; at most MAX_OUTSTANDING
        self.queued_bytes = 0  # frame bytes read, not yet dispatched
        self._room = asyncio.Event()
        self._room.set()

    async def wait_for_room(self) -> None:
        """Wait until the frames read ahead fit under ``QUEUED_BYTES`` again."""
        while self.queued_bytes >= QUEUED_BYTES:
            self._room.clear()
            await self._room.wait()

    def dispatched(self, size: int) -> None:
        """A request left the queue for its handler."""
        self.queued_bytes -= size
        if self.queued_bytes < QUEUED_BYTES:
            self._room.set()


async def _read_requests(reader: asyncio.StreamReader, inbox: _Inbox) -> None:
    """Read and decode frames into ``inbox`` until the end of the stream or a bad frame.

    Runs as a task beside the connection's serving loop; it ends by queueing ``None`` (a
    clean end) or a ``_Closing``.
    """
    try:
        while True:
            await inbox.wait_for_room()
            frame = await read_frame(reader)
            if frame is None:
                inbox.queue.put_nowait(None)
                return
            try:
                request = decode_request(frame)
            except ProtocolError as exc:
                inbox.queue.put_nowait(_Closing(str(exc), reply=True))
                return
            if inbox.outstanding >= MAX_OUTSTANDING:
                inbox.queue.put_nowait(
                    _Closing(
                        f"more than {MAX_OUTSTANDING} requests outstanding", level=logging.WARNING
                    )
                )
                return
            inbox.outstanding += 1
            inbox.queued_bytes += len(frame)
            inbox.queue.put_nowait((request, len(frame)))
    except ProtocolError as exc:  # an oversized or truncated frame: nothing to answer
        inbox.queue.put_nowait(_Closing(str(exc)))
    except (ConnectionError, asyncio.IncompleteReadError):
        inbox.queue.put_nowait(None)


def _over_capacity(server: ServerContext) -> bool:
    """Refuse a connection beyond the cap (its descriptor is closed at once)."""
    global _last_refusal_log  # noqa: PLW0603 - one rate limit for the whole process
    limit = connection_limit(server.config.max_runners)
    if server.connection_count <= limit:
        return False
    now = time.monotonic()
    if now - _last_refusal_log > REFUSAL_LOG_SECONDS:
        _last_refusal_log = now
        log.warning(
            "refusing client connections: %d are open (limit %d, from the descriptor limit)",
            server.connection_count - 1,
            limit,
        )
    return True


async def serve_client(
    server: ServerContext, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Serve one connection until it closes, misbehaves, or the server stops."""
    server.connection_opened(writer)
    peer = ConnectionPeer(server, writer)
    current_peer.set(peer)
    reading: asyncio.Task[None] | None = None
    try:
        if peer_uid(writer) != os.getuid():
            log.warning("refused a connection from another user")
            return
        if _over_capacity(server):
            return
        writer.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        hello = Hello(
            schema=CLIENT_SCHEMA,
            server_version=server.version,
            protocol_version=PROTOCOL_VERSION,
            server_epoch=server.epoch,
            server_pid=os.getpid(),
        )
        if not await _send(server, writer, hello):
            return
        inbox = _Inbox()
        reading = asyncio.create_task(_read_requests(reader, inbox), name="client reader")
        while True:
            item = await inbox.queue.get()
            if item is None:
                return
            if isinstance(item, _Closing):
                log.log(item.level, "closing a client connection: %s", item.reason)
                if item.reply:
                    with contextlib.suppress(Exception):
                        await _send(server, writer, _malformed(item.reason))
                return
            request, size = item
            inbox.dispatched(size)
            response = await dispatch(server, request)
            # Answered once it is handed to the transport: the client may read the reply and
            # send its next request before ``_send`` returns from draining.
            inbox.outstanding -= 1
            sent = await _send(server, writer, response)
            if not sent:
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        if reading is not None:
            reading.cancel()
        peer.close()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        server.connection_closed(writer)


def _malformed(message: str) -> Response:
    return Response(
        request_id="unknown",
        outcome=Outcome.REJECTED,
        error=ErrorInfo(code="badRequest", message=message[:400]),
    )
