"""Async framing: `read_frame` over real socketpairs and hand-fed asyncio stream readers."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from pi_workflows.protocol import MAX_FRAME_BYTES, FrameError, FrameTooLarge, read_frame

Scenario = Callable[[], Coroutine[Any, Any, None]]


def _run(scenario: Scenario) -> None:
    asyncio.run(scenario())


@contextlib.asynccontextmanager
async def _stream_pair(
    limit: int = MAX_FRAME_BYTES,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A reader over one end of a real socketpair and a writer over the other end."""
    left, right = socket.socketpair()
    reader, reader_side = await asyncio.open_connection(sock=left, limit=limit)
    _, writer = await asyncio.open_connection(sock=right)
    try:
        yield reader, writer
    finally:
        for stream in (reader_side, writer):
            stream.close()
        for stream in (reader_side, writer):
            with contextlib.suppress(ConnectionError):
                await stream.wait_closed()


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()


async def _read_frames(reader: asyncio.StreamReader, count: int) -> list[bytes | None]:
    return [await read_frame(reader) for _ in range(count)]


def _feed_in_turns(reader: asyncio.StreamReader, pieces: list[bytes]) -> None:
    """Feed one piece per event-loop turn, then EOF, so the reader sees every split."""
    loop = asyncio.get_running_loop()

    def feed(index: int) -> None:
        if index == len(pieces):
            reader.feed_eof()
            return
        reader.feed_data(pieces[index])
        loop.call_soon(feed, index + 1)

    loop.call_soon(feed, 0)


def test_frame_of_exactly_the_cap_is_accepted_over_a_socket() -> None:
    """A 1 MiB frame (newline included) is read whole, and the next frame after it too."""

    async def scenario() -> None:
        body = b"x" * (MAX_FRAME_BYTES - 1)
        async with _stream_pair() as (reader, writer):
            _, frames = await asyncio.gather(
                _send(writer, body + b"\n" + b'{"next":1}\n'), _read_frames(reader, 2)
            )
        assert frames == [body, b'{"next":1}']

    _run(scenario)


def test_frame_one_byte_over_the_cap_is_rejected_over_a_socket() -> None:
    """A frame of 1 MiB + 1 byte (newline included) raises FrameTooLarge."""

    async def scenario() -> None:
        async with _stream_pair() as (reader, writer):
            sender = asyncio.ensure_future(_send(writer, b"x" * MAX_FRAME_BYTES + b"\n"))
            with pytest.raises(FrameTooLarge) as caught:
                await read_frame(reader)
            await sender
        assert caught.value.limit == MAX_FRAME_BYTES

    _run(scenario)


def test_endless_line_is_rejected_without_reading_it_all() -> None:
    """A line with no newline is refused while most of it is still unsent (bounded buffer)."""

    async def scenario() -> None:
        async with _stream_pair() as (reader, writer):
            writer.write(b"x" * (8 * MAX_FRAME_BYTES))
            drained = asyncio.ensure_future(writer.drain())
            with pytest.raises(FrameTooLarge):
                await read_frame(reader)
            assert not drained.done()
            drained.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drained

    _run(scenario)


def test_reader_with_a_small_limit_still_accepts_a_frame_up_to_the_cap() -> None:
    """With asyncio's default 64 KiB limit, a 1 MiB frame is still reassembled and accepted."""

    async def scenario() -> None:
        body = b"y" * (MAX_FRAME_BYTES - 1)
        async with _stream_pair(limit=2**16) as (reader, writer):
            _, frame = await asyncio.gather(_send(writer, body + b"\n"), read_frame(reader))
        assert frame == body

    _run(scenario)


def test_reader_with_a_small_limit_still_rejects_a_frame_over_the_cap() -> None:
    """With asyncio's default 64 KiB limit, a frame of 1 MiB + 1 byte is still refused."""

    async def scenario() -> None:
        async with _stream_pair(limit=2**16) as (reader, writer):
            sender = asyncio.ensure_future(_send(writer, b"y" * MAX_FRAME_BYTES + b"\n"))
            with pytest.raises(FrameTooLarge):
                await read_frame(reader)
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await sender

    _run(scenario)


def test_line_split_across_many_small_writes_is_reassembled() -> None:
    """A frame arriving a few bytes per event-loop turn is returned whole, once."""

    async def scenario() -> None:
        frame = b'{"type":"request","payload":{"text":"' + b"z" * 500 + b'"}}'
        data = frame + b"\n" + b"[1]\n"
        pieces = [data[index : index + 3] for index in range(0, len(data), 3)]
        reader = asyncio.StreamReader(limit=MAX_FRAME_BYTES)
        _feed_in_turns(reader, pieces)
        assert await read_frame(reader) == frame
        assert await read_frame(reader) == b"[1]"
        assert await read_frame(reader) is None

    _run(scenario)


def test_small_writes_over_a_socket_are_reassembled() -> None:
    """Many one-byte socket writes, each drained, still form the original frames."""

    async def scenario() -> None:
        data = b'{"a":"' + b"q" * 300 + b'"}\n{"b":2}\n'

        async def trickle(writer: asyncio.StreamWriter) -> None:
            for index in range(len(data)):
                await _send(writer, data[index : index + 1])

        async with _stream_pair() as (reader, writer):
            _, frames = await asyncio.gather(trickle(writer), _read_frames(reader, 2))
        assert frames == data.split(b"\n")[:2]

    _run(scenario)


def test_multiple_frames_in_one_chunk_are_returned_one_by_one() -> None:
    """Several frames delivered in one chunk come out separately and in order."""

    async def scenario() -> None:
        async with _stream_pair() as (reader, writer):
            await _send(writer, b'{"a":1}\n{"b":2}\n[3]\n')
            writer.write_eof()
            frames = [await read_frame(reader) for _ in range(4)]
        assert frames == [b'{"a":1}', b'{"b":2}', b"[3]", None]

    _run(scenario)


def test_clean_end_of_stream_returns_none() -> None:
    """A stream closed between frames reads as None, repeatedly."""

    async def scenario() -> None:
        reader = asyncio.StreamReader(limit=MAX_FRAME_BYTES)
        reader.feed_data(b"{}\n")
        reader.feed_eof()
        assert await read_frame(reader) == b"{}"
        assert await read_frame(reader) is None
        assert await read_frame(reader) is None

    _run(scenario)


def test_truncated_frame_at_end_of_stream_is_a_frame_error() -> None:
    """A stream that ends in the middle of a line raises FrameError with the partial size."""

    async def scenario() -> None:
        async with _stream_pair() as (reader, writer):
            await _send(writer, b'{"a":1}\n{"b"')
            writer.write_eof()
            assert await read_frame(reader) == b'{"a":1}'
            with pytest.raises(FrameError) as caught:
                await read_frame(reader)
        assert caught.value.partial_bytes == 4

    _run(scenario)


@pytest.mark.parametrize("piece_size", [1, 5, 100])
def test_frame_cap_holds_when_the_reader_limit_is_below_it(piece_size: int) -> None:
    """With a reader limit far below the cap, cap-sized frames pass and longer ones fail."""

    async def scenario() -> None:
        cap = 40
        exact = b"e" * (cap - 1) + b"\n"
        over = b"o" * cap + b"\n"
        for data, expected in ((exact, exact[:-1]), (over, None)):
            reader = asyncio.StreamReader(limit=8)
            pieces = [data[index : index + piece_size] for index in range(0, len(data), piece_size)]
            _feed_in_turns(reader, pieces)
            if expected is None:
                with pytest.raises(FrameTooLarge):
                    await read_frame(reader, max_frame_bytes=cap)
            else:
                assert await read_frame(reader, max_frame_bytes=cap) == expected
                assert await read_frame(reader, max_frame_bytes=cap) is None

    _run(scenario)


def test_truncated_frame_after_a_limit_overrun_reports_all_partial_bytes() -> None:
    """A truncated frame longer than the reader limit counts every byte that arrived."""

    async def scenario() -> None:
        reader = asyncio.StreamReader(limit=8)
        _feed_in_turns(reader, [b"a" * 10, b"b" * 10])
        with pytest.raises(FrameError) as caught:
            await read_frame(reader, max_frame_bytes=100)
        assert caught.value.partial_bytes == 20

    _run(scenario)
