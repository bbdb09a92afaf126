"""The server over a real socket, fed fuzzed frames: only the offending connection closes.

Each example opens a connection, sends a few hostile frames (valid, truncated, oversized,
deeply nested, wrong-typed, unknown-field, garbage), and reads what comes back, while a
bystander connection keeps sending valid requests in between. Whatever arrives must be
valid protocol frames, at most one response per request; the bystander is always answered;
and at the end the same server process is serving, with bounded memory and no traceback in
its log.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, BinaryIO

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_workflows.protocol import MAX_FRAME_BYTES, Hello, Response, decode_server_message

from .fuzzing import SAFE_OPERATIONS, budget, client_envelopes, frames, fuzz_settings, tally
from support.server import running_server

FRAMES = budget(400)
"""Hostile frames per run (about two per example): a few hundred in CI; the campaign's
`--fuzz N` sends at least N."""
RSS_GROWTH_LIMIT = 64 * 1024 * 1024


def _connect(home: Path) -> tuple[socket.socket, BinaryIO]:
    """A raw connection whose hello was read, and its buffered reader."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(str(home / "server.sock"))
    stream = sock.makefile("rb")
    assert isinstance(decode_server_message(_line(stream)), Hello)
    return sock, stream


def _line(stream: Any) -> bytes:
    line = stream.readline(MAX_FRAME_BYTES + 1)
    assert line.endswith(b"\n"), f"the server sent a partial frame: {line[:80]!r}"
    return bytes(line)


def _status_request(number: int) -> bytes:
    return (
        json.dumps(
            {
                "type": "request",
                "schema": "pi-workflows.client.v1",
                "requestId": f"bystander-{number}",
                "clientId": "bystander",
                "operation": "server.status",
            }
        ).encode()
        + b"\n"
    )


@st.composite
def wire_frames(draw: st.DrawFn) -> bytes:
    """One frame as sent: usually a line, sometimes an oversized line or no newline."""
    body = draw(frames(client_envelopes(st.sampled_from(SAFE_OPERATIONS))))
    match draw(st.integers(0, 199)):
        case 0:
            return b'{"type":"request","x":"' + b"a" * MAX_FRAME_BYTES + b'"}\n'
        case 1 | 2 | 3:
            return body  # the stream ends inside a frame
        case _:
            return body.replace(b"\n", b" ") + b"\n"


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_fuzzed_frames_close_only_the_offending_connection(tmp_path: Path) -> None:
    """Hostile frames interleaved with a bystander's valid traffic: every reply is a valid
    frame, the bystander is always served, and the server survives with bounded memory."""
    with running_server(tmp_path) as server:
        assert server.process is not None
        pid = server.process.pid
        bystander, bystander_in = _connect(server.home)
        rss_before = psutil.Process(pid).memory_info().rss
        sent = {"frames": 0, "examples": 0, "closed": 0}
        began = time.monotonic()

        @fuzz_settings(max(1, FRAMES * 2 // 5))
        @given(st.lists(wire_frames(), min_size=1, max_size=4))
        def check(batch: list[bytes]) -> None:
            sent["examples"] += 1
            sock, stream = _connect(server.home)
            requests = 0
            try:
                for frame in batch:
                    sent["frames"] += 1
                    requests += frame.count(b"\n")
                    try:
                        sock.sendall(frame)
                    except (BrokenPipeError, ConnectionResetError):
                        break
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_WR)
                answers = 0
                while True:
                    try:
                        line = stream.readline(MAX_FRAME_BYTES + 1)
                    except ConnectionResetError:
                        break
                    if not line:
                        break
                    assert line.endswith(b"\n"), "a partial frame from the server"
                    message = decode_server_message(line)
                    if isinstance(message, Response):
                        answers += 1
                        assert message.error is None or "\n" not in message.error.message
                assert answers <= requests
                if answers < requests:
                    sent["closed"] += 1
            finally:
                stream.close()
                sock.close()
            number = sent["examples"]
            bystander.sendall(_status_request(number))
            reply = decode_server_message(_line(bystander_in))
            assert isinstance(reply, Response)
            assert reply.request_id == f"bystander-{number}"
            assert reply.outcome == "accepted"

        check()
        while sent["frames"] < FRAMES and "CAMPAIGN_FUZZ_BUDGET" in os.environ:
            check()  # campaign mode: fresh random examples until the budget is spent
        tally("server socket", sent["frames"], time.monotonic() - began)
        assert server.process.poll() is None, "the server died"
        with server.client() as client:
            assert client.status()["pid"] == pid
        assert sent["closed"] > 0, "no example ever made the server close a connection"
        rss_after = psutil.Process(pid).memory_info().rss
        assert rss_after - rss_before < RSS_GROWTH_LIMIT, (rss_before, rss_after)
        bystander_in.close()
        bystander.close()
    log = server.log.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
