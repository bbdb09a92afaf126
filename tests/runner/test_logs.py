"""The runner's output capture keeps a bounded tail per attempt and counts every byte."""

from __future__ import annotations

import pytest

from pi_workflows.runner.logs import LOG_CHUNK_BYTES, TRACEBACK_CHARS, AttemptLog, Capture

pytestmark = pytest.mark.timeout(30)


def test_unsent_output_keeps_its_newest_bytes_and_counts_the_rest() -> None:
    """Beyond the bound the oldest text is dropped, but `bytes` still counts all of it."""
    log = AttemptLog("att_1")
    for index in range(20_000):
        log.write(f"{index:06d}\n")
    payload = log.take()
    assert payload is not None
    assert payload["bytes"] == 20_000 * 7
    assert len(payload["text"].encode()) <= LOG_CHUNK_BYTES
    assert payload["text"].endswith("019999\n")
    assert log.take() is None  # everything was handed over


def test_a_long_traceback_keeps_its_end() -> None:
    """The exception line at the end of a traceback survives the bound."""
    log = AttemptLog("att_1")
    log.set_traceback("frame\n" * 5000 + "KeyError: 'x'\n")
    payload = log.take()
    assert payload is not None
    assert len(payload["traceback"]) == TRACEBACK_CHARS
    assert payload["traceback"].endswith("KeyError: 'x'\n")
    assert payload["bytes"] == 0


def test_shell_output_split_inside_a_character_is_decoded_whole() -> None:
    """A UTF-8 character cut between two pipe reads is not replaced."""
    capture = Capture()
    capture.begin("att_1")
    data = "ünïcode\n".encode()
    capture.shell_output("stdout", data[:1])
    capture.shell_output("stdout", data[1:])
    assert capture.current is not None
    payload = capture.current.take()
    assert payload is not None
    assert payload["text"] == "ünïcode\n"


def test_nothing_is_held_without_a_current_attempt() -> None:
    """Output before any attempt began belongs to no attempt's logs."""
    capture = Capture()
    capture.shell_output("stdout", b"early\n")
    capture.record_traceback("Traceback ...")
    assert capture.current is None
    assert capture.due_in() is None
