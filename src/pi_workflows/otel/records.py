"""Plain span and metric records: what the server builds from committed events.

The server's builder (``server/trace_builder.py``) fills these from store rows without
importing OpenTelemetry; ``sdk`` turns them into the SDK's spans and instrument calls.
Times are store milliseconds since the epoch.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

AttributeValue: TypeAlias = str | bool | int | float | Sequence[str]
Attributes: TypeAlias = Mapping[str, AttributeValue]


class Status(enum.StrEnum):
    """A span's status (OpenTelemetry's three)."""

    UNSET = "unset"
    OK = "ok"
    ERROR = "error"


class Kind(enum.StrEnum):
    """A span's kind: our own work, or a wait for a remote party (the model's agent)."""

    INTERNAL = "internal"
    CLIENT = "client"


@dataclass(frozen=True)
class SpanEvent:
    """A point in time on a span (a park, a resume, a recovery)."""

    name: str
    at_ms: int
    attributes: Attributes = field(default_factory=dict)


@dataclass(frozen=True)
class SpanRecord:
    """One finished span, with deterministic ids (``ids``)."""

    name: str
    trace_id: int
    span_id: int
    parent_span_id: int | None
    start_ms: int
    end_ms: int
    attributes: Attributes
    status: Status = Status.UNSET
    status_message: str | None = None
    kind: Kind = Kind.INTERNAL
    events: tuple[SpanEvent, ...] = ()
    links: tuple[tuple[int, int], ...] = ()  # (trace id, span id) of related spans


class Instrument(enum.StrEnum):
    """The counters and histograms the server reports (docs/observability.md)."""

    RUNS_STARTED = "pi_workflows.runs.started"
    RUNS_FINISHED = "pi_workflows.runs.finished"
    NODE_DURATION = "pi_workflows.node.duration"
    QUEUE_WAIT = "pi_workflows.queue.wait"
    EFFECT_OUTCOMES = "pi_workflows.effects.outcomes"
    VALIDATION_REJECTIONS = "pi_workflows.validation.rejections"


HISTOGRAMS = frozenset({Instrument.NODE_DURATION, Instrument.QUEUE_WAIT})
"""The instruments recorded as histograms (seconds); the others are counters."""


@dataclass(frozen=True)
class MetricPoint:
    """One increment of a counter, or one histogram measurement (seconds)."""

    instrument: Instrument
    value: float
    attributes: Attributes = field(default_factory=dict)


RUNNERS_LIVE = "pi_workflows.runners.live"
RUNS_PARKED = "pi_workflows.runs.parked"
"""The two gauges, read from the database at each batch."""


@dataclass(frozen=True)
class Batch:
    """What one pass over committed events produced."""

    last_event_id: int
    spans: tuple[SpanRecord, ...] = ()
    points: tuple[MetricPoint, ...] = ()
    runners_live: int = 0
    parked: Mapping[str, int] = field(default_factory=dict)
