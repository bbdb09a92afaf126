"""A real OTLP/HTTP receiver on 127.0.0.1, for tests of OpenTelemetry export.

It accepts ``POST /v1/traces`` and ``POST /v1/metrics`` as a collector does, decodes each
body with the official ``opentelemetry-proto`` messages, and keeps every span and metric
data point it received (duplicates included, so tests can prove there are none). It can
also refuse (HTTP 503) for a while, like a collector that is down.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from support.server import wait_for


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return _attrs(value.kvlist_value.values)
    return None if kind is None else getattr(value, kind)


def _attrs(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


@dataclass(frozen=True)
class Span:
    """One received span, ids as lowercase hex."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    events: list[tuple[str, int, dict[str, Any]]]
    links: list[tuple[str, str]]
    resource: dict[str, Any]
    scope: str


@dataclass(frozen=True)
class Point:
    """One received metric data point (a sum's value, a histogram's count and sum)."""

    name: str
    attributes: dict[str, Any]
    value: float
    count: int = 0
    resource: dict[str, Any] = field(default_factory=dict)


class Receiver:
    """The receiver; ``endpoint`` is what ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[Span] = []
        self._points: list[Point] = []
        self.refusing = False
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                del args

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                answer = receiver._take(self.path, body)
                if answer is None:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment a server needs to export here, quickly."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_METRIC_EXPORT_INTERVAL": "300",
            "OTEL_SERVICE_NAME": "otel-test",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "5",
            **extra,
        }

    def _take(self, path: str, body: bytes) -> bytes | None:
        with self._lock:
            self.requests += 1
            if self.refusing:
                return None
        if path == "/v1/traces":
            request = ExportTraceServiceRequest.FromString(body)
            self._add_spans(request)
            return ExportTraceServiceResponse().SerializeToString()
        if path == "/v1/metrics":
            metrics = ExportMetricsServiceRequest.FromString(body)
            self._add_points(metrics)
            return ExportMetricsServiceResponse().SerializeToString()
        return None

    def _add_spans(self, request: ExportTraceServiceRequest) -> None:
        found: list[Span] = []
        for resource_spans in request.resource_spans:
            resource = _attrs(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        Span(
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            name=span.name,
                            kind=span.kind,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes=_attrs(span.attributes),
                            status_code=span.status.code,
                            status_message=span.status.message,
                            events=[
                                (e.name, e.time_unix_nano, _attrs(e.attributes))
                                for e in span.events
                            ],
                            links=[
                                (link.trace_id.hex(), link.span_id.hex()) for link in span.links
                            ],
                            resource=resource,
                            scope=scope_spans.scope.name,
                        )
                    )
        with self._lock:
            self._spans.extend(found)

    def _add_points(self, request: ExportMetricsServiceRequest) -> None:
        found: list[Point] = []
        for resource_metrics in request.resource_metrics:
            resource = _attrs(resource_metrics.resource.attributes)
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    found.extend(_points(metric, resource))
        with self._lock:
            self._points.extend(found)

    def spans(self) -> list[Span]:
        """Every span received so far, in arrival order."""
        with self._lock:
            return list(self._spans)

    def points(self, name: str) -> list[Point]:
        """Every data point of metric ``name`` received so far."""
        with self._lock:
            return [p for p in self._points if p.name == name]

    def wait_spans(
        self, predicate: Callable[[list[Span]], bool], timeout: float = 30, what: str = "spans"
    ) -> list[Span]:
        """Poll until ``predicate(spans)`` holds; the spans then."""

        def ready() -> list[Span] | None:
            spans = self.spans()
            return spans if predicate(spans) else None

        return list(wait_for(ready, timeout, what))

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


def _points(metric: Any, resource: dict[str, Any]) -> Iterator[Point]:
    kind = metric.WhichOneof("data")
    if kind in ("sum", "gauge"):
        for point in getattr(metric, kind).data_points:
            value = point.as_int if point.WhichOneof("value") == "as_int" else point.as_double
            yield Point(metric.name, _attrs(point.attributes), float(value), resource=resource)
    elif kind == "histogram":
        for point in metric.histogram.data_points:
            yield Point(
                metric.name, _attrs(point.attributes), float(point.sum), int(point.count),
                resource,
            )  # fmt: skip
