"""When export is on, read from the standard variables, and the ids it derives.

Pure functions: ``otel.settings`` decides from an environment mapping without importing
OpenTelemetry, and ``otel.ids`` gives every run, attempt and request the same ids in every
process (the property that makes re-export and runner-side context work).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from pi_workflows.otel import ids
from pi_workflows.otel.settings import DEFAULT_BATCH, DEFAULT_DELAY_MS, from_environment

pytestmark = pytest.mark.timeout(60)

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"}


def test_export_is_off_without_an_endpoint_and_with_the_sdk_disabled() -> None:
    """No endpoint: off. An endpoint and ``OTEL_SDK_DISABLED=true`` (any case): off."""
    assert not from_environment({}).enabled
    assert not from_environment({**ENDPOINT, "OTEL_SDK_DISABLED": "TRUE"}).enabled
    assert from_environment({**ENDPOINT, "OTEL_SDK_DISABLED": "false"}).enabled


def test_an_endpoint_turns_both_signals_on_and_none_turns_one_off() -> None:
    """The common endpoint serves both signals; ``OTEL_<SIGNAL>_EXPORTER=none`` drops one;
    a per-signal endpoint turns on only its signal."""
    both = from_environment(ENDPOINT)
    assert (both.traces, both.metrics, both.payloads) == (True, True, False)
    assert (both.delay_ms, both.batch) == (DEFAULT_DELAY_MS, DEFAULT_BATCH)
    no_metrics = from_environment({**ENDPOINT, "OTEL_METRICS_EXPORTER": "none"})
    assert (no_metrics.traces, no_metrics.metrics) == (True, False)
    traces_only = from_environment({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/t"})
    assert (traces_only.traces, traces_only.metrics) == (True, False)


def test_a_protocol_the_extra_cannot_speak_turns_export_off_with_a_reason() -> None:
    """``grpc`` (the extra exports OTLP over HTTP only): off, with a reason naming the fix."""
    found = from_environment({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert not found.enabled
    assert found.refused is not None
    assert "http/protobuf" in found.refused
    assert "grpc" in found.refused


def test_batch_settings_and_payloads_are_read_and_bad_numbers_fall_back() -> None:
    """``OTEL_BSP_*`` set the pass delay and batch; a malformed number keeps the default;
    ``PI_WORKFLOWS_OTEL_PAYLOADS=true`` opts into payloads."""
    found = from_environment(
        {**ENDPOINT, "OTEL_BSP_SCHEDULE_DELAY": "250", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "x",
         "PI_WORKFLOWS_OTEL_PAYLOADS": "true"}
    )  # fmt: skip
    assert (found.delay_ms, found.batch, found.payloads) == (250, DEFAULT_BATCH, True)


def test_ids_are_stable_distinct_and_valid_in_any_process() -> None:
    """The same inputs give the same ids in a new interpreter (no hash seed enters them);
    different runs, rounds and attempts give different ids; none is zero."""
    here = (
        ids.trace_id("run_a"),
        ids.run_span_id("run_a", 0),
        ids.run_span_id("run_a", 1),
        ids.attempt_span_id("att_1"),
        ids.request_span_id("req_1"),
    )
    code = (
        "from pi_workflows.otel import ids; print(ids.trace_id('run_a'),"
        " ids.run_span_id('run_a', 0), ids.run_span_id('run_a', 1),"
        " ids.attempt_span_id('att_1'), ids.request_span_id('req_1'))"
    )
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30,
        env={"PYTHONHASHSEED": "123"},
    ).stdout.split()  # fmt: skip
    assert tuple(int(v) for v in there) == here
    assert len(set(here[1:])) == 4
    assert all(v > 0 for v in here)
    assert here[0] < 2**128
    assert all(v < 2**64 for v in here[1:])
    assert len(ids.trace_hex(here[0])) == 32
    assert len(ids.span_hex(here[1])) == 16
    assert ids.trace_id("run_b") != here[0]
