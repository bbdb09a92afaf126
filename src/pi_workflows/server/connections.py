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
from typing import TYPE_CHECKING

from pi_workflows.protocol import (
    CLIENT_SCHEMA,
    PROTOCOL_VERSION,
    ErrorInfo,
    Hello,
    Outcome,
    Response,
    decode_request,
    encode_frame,
    read_frame,
)
from pi_workflows.protocol.errors import ProtocolError
from pi_workflows.server.handlers import dispatch

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


async def serve_client(
    server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Serve one connection until it closes, misbehaves, or the server stops."""
    server.connection_opened(writer)
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
