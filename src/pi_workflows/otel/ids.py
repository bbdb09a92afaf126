"""Deterministic trace and span ids, derived from run, attempt and request ids.

The same run always gets the same trace id and the same attempt the same span id, in any
process and after any restart: the server's exporter can rebuild a span from committed rows
at any time without duplicating it, and a runner can make a node attempt's span its current
context without asking anyone. A child run belongs to its root run's trace. Pure functions;
nothing here imports OpenTelemetry.
"""

from __future__ import annotations

import hashlib


def _bits(nbytes: int, *parts: str) -> int:
    digest = hashlib.sha256("\x1f".join(("pi-workflows", *parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:nbytes], "big") or 1  # zero is the invalid id


def trace_id(root_run_id: str) -> int:
    """The 128-bit trace id of a run tree (its root run's id)."""
    return _bits(16, "trace", root_run_id)


def run_span_id(run_id: str, round_no: int = 0) -> int:
    """The 64-bit span id of one round of a run (a restart begins a new round)."""
    return _bits(8, "run", run_id, str(round_no))


def attempt_span_id(attempt_id: str) -> int:
    """The 64-bit span id of one node attempt."""
    return _bits(8, "attempt", attempt_id)


def request_span_id(request_id: str) -> int:
    """The 64-bit span id of an agent step's wait for the model (its interactive request)."""
    return _bits(8, "request", request_id)


def trace_hex(value: int) -> str:
    """A trace id as W3C trace-context writes it: 32 lowercase hex digits."""
    return f"{value:032x}"


def span_hex(value: int) -> str:
    """A span id as 16 lowercase hex digits."""
    return f"{value:016x}"
