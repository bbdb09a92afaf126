"""Newline-delimited JSON framing with a hard size cap, for asyncio streams and blocking sockets.

Owns cutting a byte stream into frames (one JSON document per line, at most `MAX_FRAME_BYTES`
including the newline) and encoding one message into one frame. A reader never holds more
than about one cap of unconsumed bytes per connection. It only reads from streams, sockets or
file descriptors it is handed; it never opens, closes or writes to them (writing with
backpressure is the server's and the clients' business).

After a read raises `FrameTooLarge` or `FrameError` the stream is positioned inside a bad line
and cannot be re-synchronised: close that connection.
"""

from __future__ import annotations

import math
import os
import select
import socket
import time
from typing import TYPE_CHECKING, Final

import msgspec

from pi_workflows.protocol.errors import FrameError, FrameTooLarge

if TYPE_CHECKING:
    import asyncio

__all__ = ["MAX_FRAME_BYTES", "FrameReader", "encode_frame", "read_frame"]

MAX_FRAME_BYTES: Final = 1024 * 1024
"""Largest frame in bytes, including its newline. Create asyncio stream readers with
`limit=MAX_FRAME_BYTES` (for example `asyncio.start_unix_server(..., limit=MAX_FRAME_BYTES)`)."""

_NEWLINE: Final = b"\n"
_RECV_CHUNK: Final = 64 * 1024
_ENCODER: Final = msgspec.json.Encoder()


def encode_frame(message: object, *, max_frame_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """Encode a msgspec struct (or a plain JSON value) as one compact JSON line.

    JSON from msgspec never contains a raw newline, so the only newline is the terminator.
    Floats that are NaN or infinite encode as `null` (msgspec's behaviour); pass values that
    must stay exact through `canonical_json` first.

    Raises:
        FrameTooLarge: the encoded line, newline included, is longer than `max_frame_bytes`.
        TypeError: the message contains a type msgspec cannot encode.
    """
    frame = bytearray()
    _ENCODER.encode_into(message, frame)
    frame += _NEWLINE
    if len(frame) > max_frame_bytes:
        raise FrameTooLarge(max_frame_bytes)
    if frame.find(_NEWLINE, 0, len(frame) - 1) != -1:
        # Only possible through msgspec.Raw carrying a raw newline; it would split the frame.
        raise ValueError("encoded message contains a raw newline and cannot be framed")
    return bytes(frame)


async def read_frame(
    reader: asyncio.StreamReader, *, max_frame_bytes: int = MAX_FRAME_BYTES
) -> bytes | None:
    """Read one frame and return it without its newline, or None at a clean end of stream.

    Memory stays bounded by the reader's `limit`, which should be `MAX_FRAME_BYTES`: then an
    oversized line is refused once the limit is passed, and the call is cancellation-safe
    (a cancelled read leaves the stream where it was). A reader with a smaller limit still
    accepts frames up to the cap, by accumulating them here, but a read cancelled in the
    middle of such a frame loses its beginning.

    Raises:
        FrameTooLarge: the line is longer than `max_frame_bytes` including its newline.
        FrameError: the stream ended in the middle of a line.
    """
    import asyncio  # noqa: PLC0415 - blocking clients (the CLI) never pay for asyncio

    head = bytearray()  # only used when the reader's limit is below the frame cap
    while True:
        try:
            line = await reader.readuntil(_NEWLINE)
        except asyncio.IncompleteReadError as exc:
            received = len(head) + len(exc.partial)
            if received == 0:
                return None
            raise FrameError(
                f"stream ended inside a frame after {received} bytes without a newline",
                partial_bytes=received,
            ) from None
        except asyncio.LimitOverrunError as exc:
            # `consumed` bytes before the newline (or before the end of the buffer when there
            # is no newline yet) are still buffered in the reader; the frame is longer still.
            if len(head) + exc.consumed + 1 > max_frame_bytes:
                raise FrameTooLarge(max_frame_bytes) from None
            head += await reader.readexactly(exc.consumed)
            continue
        if head:
            head += line
            line = bytes(head)
        if len(line) > max_frame_bytes:
            raise FrameTooLarge(max_frame_bytes)
        return line[:-1]


class FrameReader:
    """Reads frames from a blocking (or non-blocking) socket or file descriptor.

    For the synchronous Python client and the runner child. It owns a buffer of at most
    `max_frame_bytes` unconsumed bytes and never reads past the cap: after `FrameTooLarge` the
    rest of the oversized line is still unread in the socket. It does not own the socket or
    descriptor and never closes it. Not thread-safe: one reading thread per reader.
    """

    def __init__(
        self, source: socket.socket | int, *, max_frame_bytes: int = MAX_FRAME_BYTES
    ) -> None:
        self._source = source
        self._fd = source if isinstance(source, int) else source.fileno()
        self._max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()  # invariant: len <= max_frame_bytes
        self._scanned = 0  # bytes at the start of the buffer known to hold no newline
        self._eof = False  # the peer closed its end; buffered frames may remain
        self._broken = False  # a framing error was raised; the stream cannot be trusted

    def read_frame(self, timeout: float | None = None) -> bytes | None:
        """Return the next frame without its newline, or None at a clean end of stream.

        `timeout` bounds the whole call in seconds (None waits forever, 0 takes only what is
        already available). On timeout the bytes received so far stay buffered, so the next
        call continues the same frame.

        Raises:
            TimeoutError: no complete frame arrived within `timeout`.
            FrameTooLarge: the line is longer than the cap including its newline.
            FrameError: the stream ended inside a line, or an earlier call raised a framing
                error.
        """
        if self._broken:
            raise FrameError("frame reader is unusable after an earlier framing error")
        deadline = None if timeout is None else time.monotonic() + timeout
        buffer = self._buffer
        while True:
            end = buffer.find(_NEWLINE, self._scanned)
            if end != -1:
                frame = bytes(buffer[:end])
                del buffer[: end + 1]
                self._scanned = 0
                return frame
            self._scanned = len(buffer)
            if len(buffer) >= self._max_frame_bytes:
                # A cap's worth of bytes and no newline: the frame is at least one byte over.
                self._broken = True
                raise FrameTooLarge(self._max_frame_bytes)
            if self._eof:
                if not buffer:
                    return None
                self._broken = True
                raise FrameError(
                    f"stream ended inside a frame after {len(buffer)} bytes without a newline",
                    partial_bytes=len(buffer),
                )
            chunk = self._receive(min(_RECV_CHUNK, self._max_frame_bytes - len(buffer)), deadline)
            if chunk:
                buffer += chunk
            else:
                self._eof = True

    def _receive(self, size: int, deadline: float | None) -> bytes:
        """Receive up to `size` bytes, waiting no later than `deadline` (monotonic seconds)."""
        while True:
            if deadline is not None:
                _wait_readable(self._fd, max(0.0, deadline - time.monotonic()))
            try:
                if isinstance(self._source, int):
                    return os.read(self._source, size)
                return self._source.recv(size)
            except BlockingIOError:
                # A non-blocking source with nothing to read yet: wait, then try again.
                if deadline is None:
                    _wait_readable(self._fd, None)


def _wait_readable(fd: int, timeout: float | None) -> None:
    """Block until `fd` is readable (or closed), or raise TimeoutError after `timeout` seconds."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        ready = bool(poller.poll(None if timeout is None else math.ceil(timeout * 1000)))
    else:  # pragma: no cover - platforms without poll (Windows)
        ready = bool(select.select([fd], [], [], timeout)[0])
    if not ready:
        raise TimeoutError("no complete frame arrived before the timeout")
