"""The server's OpenTelemetry exporters: spans from records, counters, histograms, gauges.

Runs in the server process, imported only when ``settings`` says export is on. ``export``
sends one batch of finished spans over OTLP/HTTP and says whether the collector took it
(it blocks: the server calls it from its exporter thread, never from its event loop).
Metrics go through the SDK's periodic reader (its own thread, ``OTEL_METRIC_EXPORT_INTERVAL``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status as OtelStatus
from opentelemetry.trace.status import StatusCode

from pi_workflows.otel.records import (
    HISTOGRAMS,
    RUNNERS_LIVE,
    RUNS_PARKED,
    Attributes,
    Batch,
    Instrument,
    Kind,
    SpanRecord,
    Status,
)
from pi_workflows.otel.resource import resource
from pi_workflows.otel.settings import Settings

SCOPE = "pi_workflows"
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_MS = 1_000_000  # nanoseconds
DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0,
)  # fmt: skip
_DESCRIPTIONS = {
    Instrument.RUNS_STARTED: "Runs started (a restart starts one again), by workflow",
    Instrument.RUNS_FINISHED: "Runs that reached a terminal status, by workflow and status",
    Instrument.NODE_DURATION: "Node attempt duration, from start to settlement, by kind",
    Instrument.QUEUE_WAIT: "Time a queued run waited for a runner",
    Instrument.EFFECT_OUTCOMES: "Managed effect outcomes, by effect kind and outcome",
    Instrument.VALIDATION_REJECTIONS: "Answers and events a validate rejected, by kind",
}


def _attributes(attrs: Attributes) -> dict[str, Any]:
    return {
        k: (v if isinstance(v, str | bool | int | float) else tuple(v)) for k, v in attrs.items()
    }


def _context(trace_id: int, span_id: int) -> SpanContext:
    return SpanContext(trace_id, span_id, is_remote=False, trace_flags=_SAMPLED)


class Exporter:
    """The server's span exporter and meters (each only when its signal is on)."""

    def __init__(self, settings: Settings, version: str) -> None:
        self.resource = resource(version)
        self.scope = InstrumentationScope(SCOPE, version)
        self._spans = OTLPSpanExporter() if settings.traces else None
        self._provider: MeterProvider | None = None
        self._lock = threading.Lock()
        self._live = 0
        self._parked: dict[str, int] = {}
        if settings.metrics:
            reader = PeriodicExportingMetricReader(OTLPMetricExporter())
            self._provider = MeterProvider(resource=self.resource, metric_readers=[reader])
            meter = self._provider.get_meter(SCOPE, version)
            self._counters = {
                name: meter.create_counter(name, unit="1", description=text)
                for name, text in _DESCRIPTIONS.items()
                if name not in HISTOGRAMS
            }
            self._histograms = {
                name: meter.create_histogram(
                    name, unit="s", description=text,
                    explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
                )
                for name, text in _DESCRIPTIONS.items()
                if name in HISTOGRAMS
            }  # fmt: skip
            meter.create_observable_gauge(
                RUNNERS_LIVE, [self._observe_live], unit="1",
                description="Runner children starting or live",
            )  # fmt: skip
            meter.create_observable_gauge(
                RUNS_PARKED, [self._observe_parked], unit="1",
                description="Paused runs, by park reason",
            )  # fmt: skip

    @property
    def traces(self) -> bool:
        """Whether spans are exported."""
        return self._spans is not None

    def _readable(self, record: SpanRecord) -> ReadableSpan:
        status = {
            Status.OK: OtelStatus(StatusCode.OK),
            Status.ERROR: OtelStatus(StatusCode.ERROR, record.status_message),
        }.get(record.status, OtelStatus(StatusCode.UNSET))
        return ReadableSpan(
            name=record.name,
            context=_context(record.trace_id, record.span_id),
            parent=None
            if record.parent_span_id is None
            else _context(record.trace_id, record.parent_span_id),
            resource=self.resource,
            attributes=_attributes(record.attributes),
            events=[
                Event(event.name, _attributes(event.attributes), event.at_ms * _MS)
                for event in record.events
            ],
            links=[Link(_context(trace, span)) for trace, span in record.links],
            kind=SpanKind.CLIENT if record.kind is Kind.CLIENT else SpanKind.INTERNAL,
            status=status,
            start_time=record.start_ms * _MS,
            end_time=record.end_ms * _MS,
            instrumentation_scope=self.scope,
        )

    def export(self, records: Sequence[SpanRecord]) -> bool:
        """Send ``records`` in one OTLP request; True when the collector accepted them."""
        if self._spans is None or not records:
            return True
        result = self._spans.export([self._readable(record) for record in records])
        return result is SpanExportResult.SUCCESS

    def record(self, batch: Batch) -> None:
        """Count and measure a batch's points, and take its gauges."""
        if self._provider is None:
            return
        for point in batch.points:
            attrs = _attributes(point.attributes)
            if point.instrument in HISTOGRAMS:
                self._histograms[point.instrument].record(point.value, attrs)
            else:
                self._counters[point.instrument].add(point.value, attrs)
        with self._lock:
            self._live = batch.runners_live
            for reason in self._parked:
                self._parked[reason] = 0  # a reason seen before reports zero, not nothing
            self._parked.update(batch.parked)

    def _observe_live(self, _options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            return [Observation(self._live)]

    def _observe_parked(self, _options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            parked: Mapping[str, int] = dict(self._parked)
        return [Observation(n, {"pi_workflows.run.park_reason": r}) for r, n in parked.items()]

    def shutdown(self) -> None:
        """Flush the meters and close the exporters (bounded by the exporters' timeouts)."""
        if self._provider is not None:
            self._provider.shutdown()
        if self._spans is not None:
            self._spans.shutdown()  # type: ignore[no-untyped-call]
