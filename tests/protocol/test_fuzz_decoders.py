"""Fuzzed decoders: any frame either decodes to a valid message or raises `ProtocolError`.

The client frame decoder (`decode_request`) and the runner message decoder
(`decode_runner_message`) meet bytes from peers the server does not trust. For every input
they must either return a message that respects every bound and survives a round trip, or
raise `ProtocolError` with one safe line; never another exception, never a hang.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given

from pi_workflows.protocol import (
    MAX_ERROR_MESSAGE_CHARS,
    MAX_ID_CHARS,
    ProtocolError,
    Request,
    RunnerMessage,
    decode_request,
    decode_runner_message,
    encode_frame,
)

from .fuzzing import budget, client_envelopes, frames, fuzz_settings, runner_envelopes, tally

EXAMPLES = budget(600)


def _refusal_is_one_safe_line(exc: ProtocolError) -> None:
    message = str(exc)
    assert message, "an empty refusal"
    assert "\n" not in message
    assert "\r" not in message
    assert len(message) <= MAX_ERROR_MESSAGE_CHARS


@pytest.mark.timeout(1800)
def test_the_client_frame_decoder_returns_a_bounded_request_or_refuses() -> None:
    """Every fuzzed client frame is a valid, bounded `Request` that round-trips, or a
    `ProtocolError` with one safe line."""
    seen = {"n": 0}
    began = time.monotonic()

    @fuzz_settings(EXAMPLES)
    @given(frames(client_envelopes()))
    def check(frame: bytes) -> None:
        seen["n"] += 1
        try:
            request = decode_request(frame)
        except ProtocolError as exc:
            _refusal_is_one_safe_line(exc)
            return
        assert isinstance(request, Request)
        assert 1 <= len(request.request_id) <= MAX_ID_CHARS
        assert 1 <= len(request.client_id) <= MAX_ID_CHARS
        assert request.expected_revision is None or request.expected_revision >= 0
        assert isinstance(request.payload, dict)
        assert decode_request(encode_frame(request)) == request

    check()
    tally("decode_request", seen["n"], time.monotonic() - began)


@pytest.mark.timeout(1800)
def test_the_runner_message_decoder_returns_a_bounded_message_or_refuses() -> None:
    """Every fuzzed runner frame is a valid, bounded `RunnerMessage` (a reply or command
    sent the wrong way is refused), or a `ProtocolError` with one safe line."""
    seen = {"n": 0}
    began = time.monotonic()

    @fuzz_settings(EXAMPLES)
    @given(frames(runner_envelopes()))
    def check(frame: bytes) -> None:
        seen["n"] += 1
        try:
            message = decode_runner_message(frame)
        except ProtocolError as exc:
            _refusal_is_one_safe_line(exc)
            return
        assert isinstance(message, RunnerMessage)
        assert message.generation >= 0
        assert message.runner_epoch >= 0
        assert 1 <= len(message.run_id) <= MAX_ID_CHARS
        assert 1 <= len(message.message_id) <= MAX_ID_CHARS
        assert decode_runner_message(encode_frame(message)) == message

    check()
    tally("decode_runner_message", seen["n"], time.monotonic() - began)


def test_the_fuzz_frames_reach_both_outcomes() -> None:
    """The frame strategy is not degenerate: it yields accepted and refused client frames."""
    outcomes: set[str] = set()

    @fuzz_settings(300)
    @given(frames(client_envelopes()))
    def collect(frame: bytes) -> None:
        try:
            decode_request(frame)
        except ProtocolError:
            outcomes.add("refused")
        else:
            outcomes.add("accepted")

    collect()
    assert outcomes == {"accepted", "refused"}
