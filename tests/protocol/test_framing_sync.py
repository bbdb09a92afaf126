"""Blocking framing: `FrameReader` over real sockets and pipes, and `encode_frame`."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator

import msgspec
import pytest

from pi_workflows.protocol import (
    MAX_FRAME_BYTES,
    FrameError,
    FrameReader,
    FrameTooLarge,
    encode_frame,
)

SocketPair = tuple[socket.socket, socket.socket]


@pytest.fixture
def sockets() -> Iterator[SocketPair]:
    """A connected pair of blocking Unix stream sockets, closed after the test."""
    left, right = socket.socketpair()
    with left, right:
        yield left, right


class _Sender:
    """Sends bytes from a helper thread, for payloads larger than the socket buffer."""

    def __init__(self, sock: socket.socket, data: bytes) -> None:
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(sock, data), daemon=True)
        self._thread.start()

    def _run(self, sock: socket.socket, data: bytes) -> None:
        try:
            sock.sendall(data)
        except BaseException as exc:  # reported by join()
            self.error = exc

    def join(self) -> None:
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "sender thread is stuck"
        assert self.error is None


def _drain(sock: socket.socket) -> int:
    """Count the bytes still unread in `sock` (the peer must have closed its end)."""
    total = 0
    while chunk := sock.recv(65536):
        total += len(chunk)
    return total


def test_frame_of_exactly_the_cap_is_accepted(sockets: SocketPair) -> None:
    """A 1 MiB frame (newline included) is read whole, and the frame after it too."""
    left, right = sockets
    body = b"x" * (MAX_FRAME_BYTES - 1)
    sender = _Sender(right, body + b"\n" + b"[2]\n")
    reader = FrameReader(left)
    assert reader.read_frame(timeout=30) == body
    assert reader.read_frame(timeout=30) == b"[2]"
    sender.join()


def test_frame_one_byte_over_the_cap_is_rejected(sockets: SocketPair) -> None:
    """A frame of 1 MiB + 1 byte (newline included) raises FrameTooLarge."""
    left, right = sockets
    sender = _Sender(right, b"x" * MAX_FRAME_BYTES + b"\n")
    with pytest.raises(FrameTooLarge) as caught:
        FrameReader(left).read_frame(timeout=30)
    assert caught.value.limit == MAX_FRAME_BYTES
    sender.join()


def test_oversized_line_is_refused_after_reading_exactly_the_cap(sockets: SocketPair) -> None:
    """The reader stops at the cap: the rest of an oversized line stays unread in the socket."""
    left, right = sockets
    sender = _Sender(right, b"x" * (MAX_FRAME_BYTES + 1000))
    with pytest.raises(FrameTooLarge):
        FrameReader(left).read_frame(timeout=30)
    sender.join()
    right.shutdown(socket.SHUT_WR)
    assert _drain(left) == 1000


def test_line_split_across_many_small_writes_is_reassembled(sockets: SocketPair) -> None:
    """A frame arriving in many small writes is buffered across calls and returned whole."""
    left, right = sockets
    frame = b'{"type":"event","name":"run.progress","payload":{"n":' + b"7" * 200 + b"}}"
    data = frame + b"\n"
    reader = FrameReader(left)
    pieces = [data[index : index + 7] for index in range(0, len(data), 7)]
    for piece in pieces[:-1]:
        right.sendall(piece)
        with pytest.raises(TimeoutError):
            reader.read_frame(timeout=0)
    right.sendall(pieces[-1])
    assert reader.read_frame(timeout=0) == frame


def test_multiple_frames_in_one_chunk_are_returned_one_by_one(sockets: SocketPair) -> None:
    """Several frames sent in one write come out separately, then None at end of stream."""
    left, right = sockets
    right.sendall(b'{"a":1}\n{"b":2}\n\n[3]\n')
    right.shutdown(socket.SHUT_WR)
    reader = FrameReader(left)
    frames = [reader.read_frame(timeout=5) for _ in range(6)]
    assert frames == [b'{"a":1}', b'{"b":2}', b"", b"[3]", None, None]


def test_truncated_frame_at_end_of_stream_is_a_frame_error(sockets: SocketPair) -> None:
    """A stream that ends in the middle of a line raises FrameError with the partial size."""
    left, right = sockets
    right.sendall(b'{"a":1}\n{"b"')
    right.shutdown(socket.SHUT_WR)
    reader = FrameReader(left)
    assert reader.read_frame(timeout=5) == b'{"a":1}'
    with pytest.raises(FrameError) as caught:
        reader.read_frame(timeout=5)
    assert caught.value.partial_bytes == 4


def test_reader_refuses_to_continue_after_a_framing_error(sockets: SocketPair) -> None:
    """After FrameTooLarge the stream cannot be trusted, so every later read fails too."""
    left, right = sockets
    right.sendall(b"x" * 20 + b"\n{}\n")
    reader = FrameReader(left, max_frame_bytes=16)
    with pytest.raises(FrameTooLarge):
        reader.read_frame(timeout=5)
    with pytest.raises(FrameError, match="earlier framing error"):
        reader.read_frame(timeout=5)


def test_timeout_with_no_data_raises_timeout_error(sockets: SocketPair) -> None:
    """With nothing to read, a zero timeout raises TimeoutError at once."""
    left, _ = sockets
    with pytest.raises(TimeoutError):
        FrameReader(left).read_frame(timeout=0)


def test_frames_are_read_from_a_pipe_file_descriptor() -> None:
    """A raw file descriptor (a pipe) works like a socket, including the end of stream."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, b'{"a":1}\n[2]\n')
        os.close(write_fd)
        write_fd = -1
        reader = FrameReader(read_fd)
        assert reader.read_frame() == b'{"a":1}'
        assert reader.read_frame(timeout=5) == b"[2]"
        assert reader.read_frame() is None
    finally:
        os.close(read_fd)
        if write_fd != -1:
            os.close(write_fd)


def test_non_blocking_socket_waits_for_data_instead_of_failing(sockets: SocketPair) -> None:
    """On a non-blocking socket with no timeout, the reader waits until a frame arrives."""
    left, right = sockets
    left.setblocking(False)
    results: list[bytes | None] = []
    thread = threading.Thread(target=lambda: results.append(FrameReader(left).read_frame()))
    thread.start()
    right.sendall(b'{"late":true}\n')
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert results == [b'{"late":true}']


def test_encode_frame_writes_one_compact_line() -> None:
    """An encoded frame is compact JSON ending in its only newline."""
    frame = encode_frame({"text": "two\nlines", "n": [1, 2]})
    assert frame.endswith(b"\n")
    assert frame.count(b"\n") == 1
    assert json.loads(frame) == {"text": "two\nlines", "n": [1, 2]}


def test_encode_frame_accepts_the_cap_and_refuses_one_byte_more() -> None:
    """A message encoding to exactly the cap is allowed; one byte more raises FrameTooLarge."""
    exact = "a" * (MAX_FRAME_BYTES - 3)  # two quotes and the newline
    assert len(encode_frame(exact)) == MAX_FRAME_BYTES
    with pytest.raises(FrameTooLarge):
        encode_frame(exact + "a")


def test_encode_frame_refuses_raw_json_that_contains_a_newline() -> None:
    """Pre-encoded JSON with a raw newline would split the frame, so it is refused."""
    with pytest.raises(ValueError, match="raw newline"):
        encode_frame(msgspec.Raw(b'{"a":\n1}'))
