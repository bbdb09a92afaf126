"""The node attempt's trace context in a runner: its span is current while callbacks run.

Runs in the runner child; never opens the database. Trace export is on when the standard
``OTEL_*`` variables say so (``otel.settings``); only then, and only when a callback is
about to run, is OpenTelemetry imported (``otel.context``). Otherwise every function here is
a no-op that imports nothing. The trace id comes from the launch envelope (a child run
belongs to its root's trace); the span id is the attempt's (``otel.ids``), the same one the
server gives the attempt's span when it exports it from the committed rows.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from pi_workflows.otel import ids
from pi_workflows.otel.settings import Settings, from_environment

FLUSH_MS = 2000
"""How long a runner waits at exit for the spans workflow code made to be sent."""
_CONTEXT_MODULE = "pi_workflows.otel.context"
_state: dict[str, Any] = {}


def _settings() -> Settings:
    if "settings" not in _state:
        _state["settings"] = from_environment()
    found: Settings = _state["settings"]
    return found


def trace_id_for(envelope_trace_id: str | None, run_id: str) -> str:
    """The run's trace id (32 hex digits): the server's, else derived from the run id."""
    if envelope_trace_id and len(envelope_trace_id) == 32:
        return envelope_trace_id
    return ids.trace_hex(ids.trace_id(run_id))


def _warn_once(line: str) -> None:
    if not _state.get("warned"):
        _state["warned"] = True
        sys.stderr.write(f"pi-workflows runner: {line}\n")
        sys.stderr.flush()


def scope(ctx: object) -> contextlib.AbstractContextManager[None]:
    """The block in which ``ctx``'s node attempt span is the current span (a callback's
    thread enters it); a null context when trace export is off or ``ctx`` is no node's."""
    trace_hex = getattr(ctx, "trace_id", "")
    attempt_id = getattr(ctx, "attempt_id", "")
    if not trace_hex or not attempt_id or not _settings().traces or _state.get("broken"):
        return contextlib.nullcontext()
    try:
        from pi_workflows.otel import context as otel_context  # noqa: PLC0415 - only when export is on

        otel_context.install_provider(_version())
        return otel_context.node_span(int(trace_hex, 16), ids.attempt_span_id(attempt_id))
    except Exception as exc:  # a missing extra or a broken set-up never fails a node
        _state["broken"] = True
        _warn_once(f"trace context off: {type(exc).__name__}: {exc}")
        return contextlib.nullcontext()


def _version() -> str:
    if "version" not in _state:
        from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - only when export is on

        try:
            _state["version"] = version("pi-workflows")
        except PackageNotFoundError:
            _state["version"] = "0"
    return str(_state["version"])


def preload() -> None:
    """Prepare the trace modules now (the runner template, before it forks) when export is
    on, so each runner forked from it starts warm; nothing when it is off."""
    if not _settings().traces:
        return
    try:
        from pi_workflows.otel import context  # noqa: PLC0415 - only when export is on

        context.prepare(_version())
    except Exception as exc:  # the first callback's scope reports it, in the runner
        del exc
    _state.pop("settings", None)  # a forked runner reads its own environment again


def flush() -> None:
    """Send the spans workflow code made, briefly; nothing if tracing never started."""
    module = sys.modules.get(_CONTEXT_MODULE)
    if module is not None:
        with contextlib.suppress(Exception):
            module.flush(FLUSH_MS)
