"""Whether OpenTelemetry export is on, read from the standard environment variables.

Imports nothing from OpenTelemetry, so a process can ask cheaply and import the SDK only
when the answer is yes. Export is on when an OTLP endpoint is set
(``OTEL_EXPORTER_OTLP_ENDPOINT``, or the per-signal ``..._TRACES_ENDPOINT`` /
``..._METRICS_ENDPOINT``) and ``OTEL_SDK_DISABLED`` is not ``true``; a signal whose
``OTEL_<SIGNAL>_EXPORTER`` is ``none`` stays off. Only OTLP over HTTP with protobuf bodies is
exported (the extra's exporter): another ``OTEL_EXPORTER_OTLP_PROTOCOL`` turns export off
with a reason the server logs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

PROTOCOL = "http/protobuf"
"""The one OTLP protocol the extra exports with."""

DEFAULT_SERVICE_NAME = "pi-workflows"
PAYLOADS_ENV = "PI_WORKFLOWS_OTEL_PAYLOADS"
"""Set to ``true`` to export run inputs, node outputs and answers (bounded); off by default."""
PAYLOAD_LIMIT = 4096
"""Characters of one exported payload attribute (longer ones are cut, with a mark)."""
DEFAULT_DELAY_MS = 5000
DEFAULT_BATCH = 512


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def _int(environ: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = environ.get(name, "").strip()
    try:
        return max(minimum, int(raw)) if raw else default
    except ValueError:
        return default


@dataclass(frozen=True)
class Settings:
    """What a process exports; ``enabled`` is False when it exports nothing."""

    traces: bool = False
    metrics: bool = False
    payloads: bool = False
    # Why export is off although an endpoint is set (a protocol the extra cannot speak).
    refused: str | None = None
    # How often the server reads committed events (OTEL_BSP_SCHEDULE_DELAY, ms) and how
    # many events one batch reads at most (OTEL_BSP_MAX_EXPORT_BATCH_SIZE).
    delay_ms: int = DEFAULT_DELAY_MS
    batch: int = DEFAULT_BATCH

    @property
    def enabled(self) -> bool:
        """Whether anything is exported (and so whether OpenTelemetry is imported at all)."""
        return self.traces or self.metrics


OFF = Settings()


def _protocol(environ: Mapping[str, str], signal: str) -> str:
    specific = environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL", "").strip()
    return specific or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip() or PROTOCOL


def from_environment(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings of this process (``os.environ`` unless ``environ`` is given)."""
    env = os.environ if environ is None else environ
    if _true(env.get("OTEL_SDK_DISABLED")):
        return OFF
    common = bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip())
    wanted: dict[str, bool] = {}
    for signal in ("TRACES", "METRICS"):
        endpoint = common or bool(env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT", "").strip())
        chosen = env.get(f"OTEL_{signal}_EXPORTER", "").strip().lower()
        wanted[signal] = endpoint and chosen != "none"
    if not any(wanted.values()):
        return OFF
    for signal, on in wanted.items():
        protocol = _protocol(env, signal)
        if on and protocol != PROTOCOL:
            return Settings(
                refused=f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported: the"
                f" pi-workflows[otel] extra exports OTLP over HTTP ({PROTOCOL}); set it to"
                f" {PROTOCOL} and point the endpoint at the collector's HTTP port (4318)"
            )
    return Settings(
        traces=wanted["TRACES"],
        metrics=wanted["METRICS"],
        payloads=_true(env.get(PAYLOADS_ENV)),
        delay_ms=_int(env, "OTEL_BSP_SCHEDULE_DELAY", DEFAULT_DELAY_MS, 10),
        batch=_int(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DEFAULT_BATCH, 1),
    )
