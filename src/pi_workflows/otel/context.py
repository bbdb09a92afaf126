"""A runner's OpenTelemetry context: a node attempt's span is current while its callbacks run.

Runs in the runner child, imported only when trace export is on (``runner/tracing.py``
decides). The span itself is the server's (built later from committed rows, with the same
deterministic ids): here it is a non-recording span context, so instrumentation the
workflow code uses (an HTTP or model client's) makes its spans children of the node. Unless
the workflow code installed its own tracer provider, the first use installs one that
exports over OTLP/HTTP with the standard environment variables.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry import context, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

_installed: list[object] = []  # the tracer provider this module installed, if any
_resources: dict[str, object] = {}  # version -> the resource, made once per process tree


def _resource(version: str) -> object:
    if version not in _resources:
        from pi_workflows.otel.resource import resource  # noqa: PLC0415 - with the SDK

        _resources[version] = resource(version)
    return _resources[version]


def prepare(version: str) -> None:
    """Do now, before a fork, what installing a provider would do slowly in every child:
    import the exporter's transport (it imports lazily) and build the resource."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )

    _resource(version)
    OTLPSpanExporter().shutdown()  # type: ignore[no-untyped-call]


def install_provider(version: str) -> None:
    """Install an exporting tracer provider once, unless one is installed already."""
    if _installed or not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    found = _resource(version)
    assert isinstance(found, Resource)
    provider = TracerProvider(resource=found)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _installed.append(provider)


@contextlib.contextmanager
def node_span(trace_id: int, span_id: int) -> Iterator[None]:
    """Make the node attempt's span the current span of this thread for the block."""
    parent = NonRecordingSpan(
        SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    )
    token = context.attach(trace.set_span_in_context(parent))
    try:
        yield
    finally:
        context.detach(token)


def flush(timeout_ms: int) -> None:
    """Send what the installed provider still holds, waiting at most ``timeout_ms``."""
    for provider in _installed:
        force_flush = getattr(provider, "force_flush", None)
        if force_flush is not None:
            force_flush(timeout_ms)
