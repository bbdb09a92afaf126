"""Client connections: peer check, hello, bounded frames, ordered replies, backpressure.

Runs in the server. Each connection is one task; anything wrong with it (another uid, a
malformed or oversized frame, an unknown envelope field, a reader too slow to keep up)
closes that connection only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from pi_workflows.protocol import (
    CLIENT_SCHEMA,
    PROTOCOL_VERSION,
    ErrorInfo,
    Event,
    Hello,
    Outcome,
    Response,
    decode_request,
    encode_frame,
    read_frame,
)
from pi_workflows.protocol.errors import ProtocolError
from pi_workflows.server.handlers import current_peer, dispatch

if TYPE_CHECKING:
    from pi_workflows.server.app import Server

log = logging.getLogger(__name__)

WRITE_HIGH_WATER = 256 * 1024
# A client whose unread responses stay above the high-water mark this long is cut off.
DRAIN_SECONDS = 10.0


def peer_uid(writer: asyncio.StreamWriter) -> int | None:
    """The uid of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


async def _send(server: Server, writer: asyncio.StreamWriter, message: object) -> bool:
    """Write one frame; False (and the connection is closed) if the peer cannot keep up."""
    writer.write(encode_frame(message))
    if writer.transport.get_write_buffer_size() > server.config.client_write_buffer_bytes:
        log.warning("closing a client that does not read its responses")
        server.slow_clients_dropped += 1
        return False
    try:
        await asyncio.wait_for(writer.drain(), timeout=DRAIN_SECONDS)
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
    event per key, never a queue."""

    def __init__(self, server: Server, writer: asyncio.StreamWriter) -> None:
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
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._slots:
                key = next(iter(self._slots))
                event = self._slots.pop(key)
                if not await _send(self._server, self._writer, event):
                    self._writer.close()
                    return

    def close(self) -> None:
        """The connection closed: stop sending and run the close callbacks."""
        self._task.cancel()
        for callback in self._closers:
            with contextlib.suppress(Exception):
                callback()


async def serve_client(
    server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Serve one connection until it closes, misbehaves, or the server stops."""
    server.connection_opened(writer)
    peer = ConnectionPeer(server, writer)
    current_peer.set(peer)
    try:
        if peer_uid(writer) != os.getuid():
            log.warning("refused a connection from another user")
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
        while True:
            try:
                frame = await read_frame(reader)
            except ProtocolError as exc:
                log.info("closing a client connection: %s", exc)
                return
            if frame is None:
                return
            try:
                request = decode_request(frame)
            except ProtocolError as exc:
                log.info("closing a client connection: %s", exc)
                with contextlib.suppress(Exception):
                    await _send(server, writer, _malformed(str(exc)))
                return
            response = await dispatch(server, request)
            if not await _send(server, writer, response):
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
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
