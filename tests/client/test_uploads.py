"""A large input is uploaded in slices that each fit a frame, then named in `run.start`.

Against a scripted peer that keeps an upload per connection the way the server does, so the
client's side of a lost connection (the upload starts over) and of an upload the server no
longer holds (uploaded again once, the start sent with the same key) can be played exactly.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from client.scripted_peer import DROP, Reply, ok, refuse, serving
from pi_workflows.client import InputTooLargeError
from pi_workflows.protocol import (
    MAX_FRAME_BYTES,
    MAX_INPUT_BYTES,
    UPLOAD_CHUNK_BYTES,
    Outcome,
    Request,
    canonical_json,
    encode_frame,
)

pytestmark = pytest.mark.timeout(60)

BIG = {"text": "x" * (3 * UPLOAD_CHUNK_BYTES // 2)}  # over the inline bound: two slices
DATA = canonical_json(BIG)
DIGEST = hashlib.sha256(DATA).hexdigest()


class Server:
    """What the peer holds of each connection's upload, and how it answers."""

    def __init__(self, *, drop_put_at: int | None = None, forget_first_start: bool = False):
        self.held: dict[int, bytearray] = {}
        self.puts = 0
        self.drop_put_at = drop_put_at
        self.forget_first_start = forget_first_start
        self.starts: list[Request] = []

    def __call__(self, connection: int, request: Request) -> Reply:
        if request.operation == "upload.put":
            self.puts += 1
            if self.puts == self.drop_put_at:
                return DROP
            held = self.held.setdefault(connection, bytearray())
            payload = request.payload
            if payload["offset"] == len(held):
                held += base64.b64decode(payload["data"])
            return ok(request, {"received": len(held), "complete": len(held) == len(DATA)})
        assert request.operation == "run.start"
        self.starts.append(request)
        if self.forget_first_start and len(self.starts) == 1:
            self.held.clear()
            return refuse(request, Outcome.REJECTED, "inputNotUploaded", "no upload")
        digest = request.payload["inputRef"]["digest"]
        assert hashlib.sha256(self.held[connection]).hexdigest() == digest
        return ok(request, {"runId": "run_1", "workflow": "big", "revision": 1})


def _puts(requests: list[tuple[int, Request]]) -> list[tuple[int, int]]:
    return [(c, int(r.payload["offset"])) for c, r in requests if r.operation == "upload.put"]


def test_a_large_input_goes_in_slices_that_each_fit_a_frame(tmp_path: Path) -> None:
    """Every upload.put is well under the 1 MiB frame; run.start carries only the digest."""
    server = Server()
    with serving(tmp_path, server) as (client, peer):
        receipt = client.start_run("big", BIG, project_dir=tmp_path)
    assert receipt["runId"] == "run_1"
    assert _puts(peer.requests) == [(0, 0), (0, UPLOAD_CHUNK_BYTES)]
    for _, request in peer.requests:
        assert len(encode_frame(request)) < MAX_FRAME_BYTES
        assert request.operation != "upload.put" or request.idempotency_key is None
    (start,) = server.starts
    assert "input" not in start.payload
    assert start.payload["inputRef"] == {"digest": DIGEST, "bytes": len(DATA)}


def test_an_upload_cut_by_a_lost_connection_starts_over_on_the_next(tmp_path: Path) -> None:
    """The server forgets an upload with its connection: the slice sent again on the new
    connection is answered with 0 held, and the client sends the whole input from there."""
    server = Server(drop_put_at=2)
    with serving(tmp_path, server) as (client, peer):
        client.start_run("big", BIG, project_dir=tmp_path)
    assert _puts(peer.requests) == [
        (0, 0),
        (0, UPLOAD_CHUNK_BYTES),  # dropped
        (1, UPLOAD_CHUNK_BYTES),  # the retry: the new connection holds nothing
        (1, 0),
        (1, UPLOAD_CHUNK_BYTES),
    ]


def test_a_start_whose_upload_is_gone_uploads_again_once_with_the_same_key(
    tmp_path: Path,
) -> None:
    """`inputNotUploaded` (the connection closed between the upload and the start) makes
    the client upload again and send the same start, with the same idempotency key."""
    server = Server(forget_first_start=True)
    with serving(tmp_path, server) as (client, peer):
        receipt = client.start_run("big", BIG, project_dir=tmp_path)
    assert receipt["runId"] == "run_1"
    first, second = server.starts
    assert first.idempotency_key == second.idempotency_key is not None
    assert first.payload == second.payload
    assert len(_puts(peer.requests)) == 4


def test_an_input_over_16_mib_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    """One byte over the bound is `InputTooLargeError`, naming 16 MiB; nothing is sent."""
    over: Any = "y" * (MAX_INPUT_BYTES - 1)  # with its quotes: the bound plus one byte
    assert len(json.dumps(over)) == MAX_INPUT_BYTES + 1
    with serving(tmp_path, Server()) as (client, peer), pytest.raises(InputTooLargeError) as err:
        client.start_run("big", over, project_dir=tmp_path)
    assert peer.requests == []
    assert "the limit is 16 MiB (16777216 bytes" in str(err.value)
    assert err.value.size == MAX_INPUT_BYTES + 1
