"""Calling workflow callbacks (sync or async) with the node's deadline.

Runs in the runner child; never opens the database. Every callback runs off the main thread,
on a daemon worker thread: a sync one is called there, an async one (a callback returning
an awaitable) is awaited in a fresh asyncio loop in that thread. A worker whose callback
returned takes the next callback (starting a thread per callback cost more than a fast
node); each callback starts with an empty ``contextvars`` context, as in a new thread, and
the thread is named after it; thread-local storage (``threading.local``) may outlive one
callback on the same runner. The main thread waits on an inbox queue for
the outcome, delivering ``publish_update`` values in the meantime (coalesced: at most one
per ``UPDATE_INTERVAL_SECONDS``, always the latest), the attempt's captured output
(``logs.capture``, at most once per ``logs.FLUSH_SECONDS``) and the server calls the
callback makes through its context (``Request``: ``ctx.publish``, ``ctx.signal``; the
callback's thread waits for each answer), until the deadline. On
expiry it sets the node's cancellation signal, cancels the async task, and returns
``TimedOut``; a stuck thread is abandoned and dies with the process. The main thread never
runs workflow code, so SIGTERM can always unwind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import os
import queue
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeAlias

from pi_workflows.authoring import CancellationSignal, JsonValue, NodeContext
from pi_workflows.runner import tracing
from pi_workflows.runner.errors import UnexpectedReplyError
from pi_workflows.runner.logs import capture


@dataclass(frozen=True)
class Returned:
    """The callback returned ``value`` (awaited, for an async callback)."""

    value: object


@dataclass(frozen=True)
class Raised:
    """The callback raised ``error`` (its traceback was written to stderr)."""

    error: BaseException


@dataclass(frozen=True)
class TimedOut:
    """The deadline passed first; the callback may still be running in its thread."""


CallOutcome: TypeAlias = Returned | Raised | TimedOut


@dataclass(frozen=True)
class _Update:
    value: JsonValue


class Request:
    """A callback's call to the server (``ctx.publish``, ``ctx.signal``), made for it by the
    main thread: ``send`` runs there (the one thread that uses the channel) and its result
    or error comes back to the waiting callback thread."""

    def __init__(
        self, send: Callable[[], dict[str, Any]], refusals: frozenset[str] = frozenset({"rejected"})
    ) -> None:
        self.send = send
        self.refusals = refusals  # reply outcomes told to the callback (the runner goes on)
        self.done = threading.Event()
        self.result: dict[str, Any] | None = None
        self.error: BaseException | None = None

    def serve(self) -> None:
        """Run ``send`` (main thread); a runner error (the claim lost, the channel closed)
        is told to the callback and raised here too, so the runner stops as after any
        refused proposal."""
        try:
            self.result = self.send()
        except UnexpectedReplyError as exc:
            self.error = exc  # a refusal: the callback is told why; the runner goes on
            if exc.outcome not in self.refusals:
                raise
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self.done.set()


_CURRENT_INBOX: contextvars.ContextVar[Inbox | None] = contextvars.ContextVar(
    "pi_workflows_inbox", default=None
)


def current_inbox() -> Inbox | None:
    """The inbox of the callback running in this thread (or its async tasks), else None:
    only a node callback itself may make server calls through its context."""
    return _CURRENT_INBOX.get()


_MARKER = _Update(None)
"""Queued to say "an update is waiting in the slot"; its own value is never delivered."""

UPDATE_INTERVAL_SECONDS = 0.25
"""At most one ``publish_update`` delivery per this many seconds per callback (the latest)."""


class Deadline:
    """A monotonic deadline: ``timeout`` seconds after it was created (``None``: never)."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self._at = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> float | None:
        """Seconds left (never negative), or ``None`` without a deadline."""
        return None if self._at is None else max(0.0, self._at - time.monotonic())

    @property
    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return self._at is not None and time.monotonic() >= self._at


class _AsyncHandle:
    """The loop and task of an async callback, so the main thread can cancel it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[Any] | None = None

    def cancel(self) -> None:
        with self.lock:
            loop, task = self.loop, self.task
            if loop is None or task is None or loop.is_closed():
                return
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                loop.call_soon_threadsafe(task.cancel)


async def _await(awaitable: Any) -> object:
    return await awaitable


def _run_async(awaitable: object, handle: _AsyncHandle) -> object:
    loop = asyncio.new_event_loop()
    try:
        coroutine: Coroutine[Any, Any, object] = _await(awaitable)
        with handle.lock:
            handle.loop = loop
            handle.task = loop.create_task(coroutine)
            task = handle.task
        return loop.run_until_complete(task)
    finally:
        with handle.lock:
            loop.close()


class Inbox:
    """Where a callback's thread posts its updates and its outcome, read by the main thread.

    Bounded by construction: updates are coalesced into one slot (a newer value replaces an
    undelivered older one), so the queue never holds more than one update marker and the
    outcome, however fast a callback publishes. The main thread delivers at most one update
    per ``UPDATE_INTERVAL_SECONDS`` (each is one fenced write on the server) and always the
    latest one before it returns the outcome.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[CallOutcome | _Update | Request] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._latest: _Update | None = None  # the newest undelivered update
        self._signalled = False  # a marker for ``_latest`` is in the queue
        self._last_delivery = -UPDATE_INTERVAL_SECONDS
        self.published = 0  # values offered so far (delivered or replaced by a newer one)

    def post_update(self, value: JsonValue) -> None:
        """Offer one ``publish_update`` value (any thread; never blocks, never grows)."""
        with self._lock:
            self.published += 1
            self._latest = _Update(value)
            if self._signalled:
                return
            self._signalled = True
        self._queue.put(_MARKER)

    def post_request(self, request: Request) -> None:
        """Ask the main thread to make ``request`` (the callback's thread then waits)."""
        self._queue.put(request)

    def post_outcome(self, outcome: CallOutcome) -> None:
        """Post the callback's outcome (its own thread, once)."""
        self._queue.put(outcome)

    def _take(self) -> _Update | None:
        with self._lock:
            latest, self._latest, self._signalled = self._latest, None, False
        return latest

    def wait(
        self,
        deadline: Deadline,
        deliver: Callable[[JsonValue], None] | None,
    ) -> CallOutcome | None:
        """The outcome, or ``None`` on expiry; updates go to ``deliver`` meanwhile."""
        held: _Update | None = None  # taken but not yet due
        while True:
            timeout = deadline.remaining()
            if held is not None:
                due = self._last_delivery + UPDATE_INTERVAL_SECONDS - time.monotonic()
                timeout = due if timeout is None else min(timeout, due)
            flush_in = capture.due_in()  # the attempt's output goes out while it runs too
            if flush_in is not None:
                timeout = flush_in if timeout is None else min(timeout, flush_in)
            try:
                item = self._queue.get(timeout=None if timeout is None else max(0.0, timeout))
            except queue.Empty:
                capture.flush_if_due()
                if deadline.expired:
                    return None
                if held is not None and (
                    time.monotonic() - self._last_delivery >= UPDATE_INTERVAL_SECONDS
                ):
                    self._deliver(held, deliver)
                    held = None
                continue
            if isinstance(item, Request):
                item.serve()
                continue
            if isinstance(item, _Update):
                held = self._take() or held
                if time.monotonic() - self._last_delivery >= UPDATE_INTERVAL_SECONDS:
                    self._deliver(held, deliver)
                    held = None
                continue
            latest = self._take() or held
            if latest is not None:
                self._deliver(latest, deliver)
            return item

    def _deliver(self, update: _Update | None, deliver: Callable[[JsonValue], None] | None) -> None:
        if update is not None and deliver is not None:
            deliver(update.value)
            self._last_delivery = time.monotonic()


class _Worker:
    """A daemon thread that runs callbacks one at a time. It goes back to the idle pool just
    before its callback's outcome is posted (so the next callback finds it); a callback that
    never returns keeps its worker, which is abandoned with it and dies with the process."""

    _idle: list[_Worker] = []  # noqa: RUF012 - the one pool of this process
    _lock = threading.Lock()

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[_Worker], None], str]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="pi-workflows worker", daemon=True)
        self._thread.start()

    @classmethod
    def run(cls, job: Callable[[_Worker], None], name: str) -> None:
        """Run ``job(worker)`` on an idle worker, or on a new one when none is idle."""
        with cls._lock:
            worker = cls._idle.pop() if cls._idle else None
        (worker or cls())._jobs.put((job, name))

    def release(self) -> None:
        """Back to the idle pool (the job calls it once its callback has returned)."""
        with self._lock:
            self._idle.append(self)

    @classmethod
    def forget_all(cls) -> None:
        """In a forked child: the parent's workers do not exist there."""
        cls._idle = []
        cls._lock = threading.Lock()

    def _loop(self) -> None:
        while True:
            job, name = self._jobs.get()
            self._thread.name = name
            contextvars.Context().run(job, self)  # a fresh context, as in a new thread


os.register_at_fork(after_in_child=_Worker.forget_all)


@dataclass
class Call:
    """One callback running on its worker thread."""

    inbox: Inbox
    handle: _AsyncHandle
    label: str


def spawn(
    callback: Callable[..., object], args: tuple[object, ...], label: str, inbox: Inbox
) -> Call:
    """Start ``callback(*args)`` on a worker thread posting its outcome to ``inbox``.

    ``label`` names the thread. The outcome is posted, never raised or printed: the caller
    decides whether an exception is a failure worth a traceback (``log_exception``).
    """
    handle = _AsyncHandle()
    # The node attempt's span is current in the callback's thread (when export is on).
    traced = tracing.scope(next((a for a in args if isinstance(a, NodeContext)), None))

    def target(worker: _Worker) -> None:
        outcome: CallOutcome
        _CURRENT_INBOX.set(inbox)  # this callback's server calls go to this inbox
        try:
            with traced:
                value = callback(*args)
                if inspect.isawaitable(value):
                    value = _run_async(value, handle)
        except BaseException as exc:  # every failure is reported; none escapes the thread
            outcome = Raised(exc)
        else:
            outcome = Returned(value)
        worker.release()
        inbox.post_outcome(outcome)

    _Worker.run(target, f"pi-workflows {label}")
    return Call(inbox, handle, label)


def call(
    callback: Callable[..., object],
    args: tuple[object, ...],
    *,
    label: str,
    deadline: Deadline,
    cancellation: CancellationSignal,
    inbox: Inbox | None = None,
    deliver: Callable[[JsonValue], None] | None = None,
) -> CallOutcome:
    """Run ``callback(*args)`` until it finishes or ``deadline`` passes.

    ``label`` names its thread (``"node 'x' run"``). Pass the ``inbox`` whose
    ``post_update`` the callback's context uses, and ``deliver`` to send its updates. On
    expiry the cancellation signal is set and the async task (if any) cancelled.
    """
    box = inbox if inbox is not None else Inbox()
    running = spawn(callback, args, label, box)
    outcome = box.wait(deadline, deliver)
    if outcome is None:
        cancellation.set()
        running.handle.cancel()
        return TimedOut()
    return outcome


def log_exception(label: str, exc: BaseException) -> None:
    """Write ``exc`` with its traceback to stderr (the server keeps a tail for diagnosis)
    and keep the traceback as the running attempt's (``run show``, ``run logs``)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and _is_runner_frame(tb):
        tb = tb.tb_next  # the runner's own frames (the thread target) tell the author nothing
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    sys.stderr.write(f"pi-workflows runner: {label} raised:\n{text}")
    sys.stderr.flush()
    capture.record_traceback(text)


_RUNNER_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _is_runner_frame(tb: types.TracebackType) -> bool:
    return os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_RUNNER_DIR)


def evaluate(
    value: object,
    *,
    ctx: object,
    label: str,
    deadline: Deadline,
    cancellation: CancellationSignal,
) -> CallOutcome:
    """A node field's value: ``value(ctx)`` if callable (with the deadline), else ``value``."""
    if callable(value):
        return call(value, (ctx,), label=label, deadline=deadline, cancellation=cancellation)
    return Returned(value)
