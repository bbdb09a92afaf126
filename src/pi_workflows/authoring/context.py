"""The typed context a node callback receives, and the cancellation signal inside it.

The runner builds one context per node attempt and passes it to every callback of that
node (``run``, ``prompt``, ``validate``, ...). Contexts are read-only snapshots of the run's
durable state; changing them changes nothing. This module never performs I/O.

Cancellation is a ``threading.Event`` underneath, so the runner may set it from any thread
(its event loop or a signal-handling thread) while a synchronous callback runs in a worker
thread. Async callbacks should check ``ctx.cancellation.is_set()`` between awaits; the
runner also cancels their task.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pi_workflows.authoring.errors import NodeCancelledError
from pi_workflows.authoring.values import JsonValue


class CancellationSignal:
    """A one-way flag the runner sets when the node (or the whole run) must stop.

    Thread-safe. Once set it stays set for the rest of the attempt.
    """

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        """Request cancellation. Only the runner calls this."""
        self._event.set()

    def is_set(self) -> bool:
        """Whether cancellation was requested."""
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block a synchronous callback until cancellation or ``timeout``; return ``is_set()``.

        Useful as an interruptible sleep. Never call it from async code.
        """
        return self._event.wait(timeout)

    def raise_if_set(self) -> None:
        """Raise ``NodeCancelledError`` if cancellation was requested."""
        if self._event.is_set():
            raise NodeCancelledError("the node was cancelled")

    def __repr__(self) -> str:
        return f"CancellationSignal(set={self.is_set()})"


@dataclass(frozen=True, kw_only=True)
class NodeContext:
    """What every node callback sees (``ctx``).

    ``outputs`` maps a node id to the accepted output of that node's latest visit (absent if
    it never ran or its latest visit failed or timed out); ``results`` maps a node id to the
    result record of its latest visit (``{"outcome": "ok" | "failed" | "timed_out", "error":
    str | None, ...}``). ``visit`` counts executions of this node in the run, starting at 1.
    ``attempt_id`` identifies this attempt; a crash retry of the same visit gets a new one.
    ``trace_id`` is the run's OpenTelemetry trace id (32 hex digits; a child run shares its
    root run's), for logs: with trace export on (docs/observability.md) the attempt's span
    is the current span while the callback runs.
    """

    workflow: str
    run_id: str
    node_id: str
    attempt_id: str
    visit: int
    input: JsonValue
    outputs: Mapping[str, JsonValue]
    results: Mapping[str, Mapping[str, JsonValue]]
    cancellation: CancellationSignal
    trace_id: str = ""


def _discard_update(update: JsonValue) -> None:
    """The default ``publish_update``: contexts built outside a runner drop updates."""
    del update


@dataclass(frozen=True, kw_only=True)
class ActionContext(NodeContext):
    """The context of ``action`` and ``shell`` callbacks: a ``NodeContext`` plus effect tools.

    ``effect_key`` is stable for every attempt of this node visit and different for every
    other visit and run: pass it to the outside system as its idempotency key.
    ``publish_update(value)`` queues a JSON progress update for the run's viewers; it never
    blocks and never changes the node's output.
    """

    effect_key: str
    publish_update: Callable[[JsonValue], None] = _discard_update


async def invoke(callback: Callable[..., object], *args: object) -> object:
    """Call ``callback(*args)`` and await the result if it is awaitable.

    Node callbacks may be sync or async; this is the one place that rule lives. The runner
    uses it for ``validate(output, ctx)`` and, through ``evaluate``, for every other field.
    """
    value = callback(*args)
    if inspect.isawaitable(value):
        return await value
    return value


async def evaluate(value_or_callback: object, ctx: NodeContext) -> object:
    """Return a node field's value for ``ctx``: call it if callable, await it if awaitable.

    The one rule by which the runner evaluates ``run``, ``prompt``, ``title``, ``message``,
    ``request`` and ``command``; a plain value is returned unchanged.
    """
    if callable(value_or_callback):
        return await invoke(value_or_callback, ctx)
    return value_or_callback
