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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

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


def _outside_runner(*args: object, **kwargs: object) -> Any:
    """The default of a context's server calls (``publish``): a context built outside a
    runner has no server to call."""
    del args, kwargs
    raise RuntimeError("this context was built outside a runner: it has no server to call")


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

    ``settings`` is the run's settings document as this attempt started with it (a JSON
    value; ``None`` when the workflow declares no ``settings``), and ``settings_change``
    the number of the change that made it (0: the defaults). A change made while the
    attempt runs is seen by later attempts only (``docs/authoring.md``, "Settings").

    ``cancel_reason`` is why the run was cancelled (the reason given to ``run cancel``, or
    the run deadline that passed) in its cleanup node (``Workflow(on_cancel=)``); ``None``
    in every other node.

    ``publish(key, value)`` keeps a JSON value under ``key`` for callers outside the run
    (``Client.get_value``, ``pi-workflows run get``): durable once it returns, the latest
    value of a key wins, and it stays when this attempt later fails. It blocks the
    callback until the server has stored it, raises ``ValueError`` with one line when the
    key, the value or the run's bounds refuse it, and works only from the callback itself
    (``docs/authoring.md``, "Values out of a running run").

    ``fire_at`` is the fire time of the schedule fire that started the run (an aware UTC
    ``datetime``: the cadence's time for a scheduled or backfilled fire, the moment of a
    ``schedule trigger``), the same in every callback and attempt; None for a run no
    schedule started (a child or a fork of a scheduled run too; a restart keeps it).

    ``signal(run_id, name, data=None, *, key=None)`` sends the event ``name`` to another
    run (its ``wait_event(name)`` takes it) as a managed effect of this node visit: sent
    exactly once across runner kills, crash retries and retry-policy tries; returns
    ``{runId, signalId, seq, adopted}``; ``ValueError`` with one line when the target
    takes no event (ended, unknown) or ``key`` was used for another event. ``key``
    (default ``"<run_id>:<name>"``) tells several events of one visit apart.
    ``children(node_id)`` lists the child runs of that ``subworkflow``/``fan_out`` node's
    latest visit in this round as ``ChildRun`` handles, in item order (empty before it
    ran). See ``docs/authoring.md``, "Runs that message runs".
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
    settings: JsonValue = None
    settings_change: int = 0
    cancel_reason: str | None = None
    publish: Callable[[str, JsonValue], None] = field(default=_outside_runner)
    fire_at: datetime | None = None
    signal: Callable[..., dict[str, JsonValue]] = field(default=_outside_runner)
    children: Callable[[str], list[ChildRun]] = field(default=_outside_runner)


@dataclass(frozen=True, kw_only=True)
class ChildRun:
    """A child run of a ``subworkflow`` or ``fan_out`` node (``ctx.children(node)``).

    ``run_id`` is None for an item whose run never started (skipped after a ``fail_fast``
    failure); ``status`` is its state in the join when the list was read (``started``
    while it runs, then ``completed``, ``failed``, ``timed_out``, ``cancelled`` or
    ``skipped``). ``signal`` sends it an event exactly as ``ctx.signal`` does."""

    run_id: str | None
    item: int
    status: str
    _send: Callable[..., dict[str, JsonValue]] = field(repr=False, compare=False)

    def signal(
        self, name: str, data: JsonValue = None, *, key: str | None = None
    ) -> dict[str, JsonValue]:
        """Send the event ``name`` to this child (``ctx.signal(child.run_id, ...)``)."""
        if self.run_id is None:
            raise ValueError(f"child {self.item} never started ({self.status}): no run to signal")
        return self._send(self.run_id, name, data, key=key)


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
