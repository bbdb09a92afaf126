"""The callback inbox: updates are coalesced and rate-limited, and the queue stays bounded;
callbacks run on a reused worker thread, each in a fresh context."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable

from pi_workflows.authoring import CancellationSignal, JsonValue
from pi_workflows.runner.callbacks import (
    UPDATE_INTERVAL_SECONDS,
    Deadline,
    Inbox,
    Returned,
    TimedOut,
    call,
)


def test_a_flood_of_updates_is_coalesced_to_a_few_deliveries_ending_with_the_latest() -> None:
    """200,000 updates in a tight loop become a handful of deliveries, the last one last."""
    inbox = Inbox()
    delivered: list[JsonValue] = []
    largest_queue = [0]

    def flood(_: object) -> str:
        for i in range(200_000):
            inbox.post_update({"i": i})
            if i % 1000 == 0:
                largest_queue[0] = max(largest_queue[0], inbox._queue.qsize())
        return "done"

    started = time.monotonic()
    outcome = call(
        flood,
        (None,),
        label="flood",
        deadline=Deadline(60),
        cancellation=CancellationSignal(),
        inbox=inbox,
        deliver=delivered.append,
    )
    elapsed = time.monotonic() - started
    assert outcome == Returned("done")
    assert delivered[-1] == {"i": 199_999}
    assert len(delivered) <= elapsed / UPDATE_INTERVAL_SECONDS + 2
    assert largest_queue[0] <= 2  # one update marker and, at the end, the outcome


def test_a_single_update_is_delivered_at_once() -> None:
    """The first update of a quiet callback is not held back by the rate limit."""
    inbox = Inbox()
    delivered: list[JsonValue] = []
    seen_before_return: list[list[JsonValue]] = []

    def one(_: object) -> int:
        inbox.post_update("hello")
        deadline = time.monotonic() + 10
        while not delivered and time.monotonic() < deadline:
            time.sleep(0.01)
        seen_before_return.append(list(delivered))
        return 1

    outcome = call(
        one,
        (None,),
        label="one",
        deadline=Deadline(30),
        cancellation=CancellationSignal(),
        inbox=inbox,
        deliver=delivered.append,
    )
    assert outcome == Returned(1)
    assert seen_before_return == [["hello"]]
    assert delivered == ["hello"]


MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")


def _call(callback: Callable[..., object], label: str, seconds: float = 30) -> object:
    return call(
        callback,
        (None,),
        label=label,
        deadline=Deadline(seconds),
        cancellation=CancellationSignal(),
    )


def test_callbacks_reuse_a_worker_thread_each_in_a_fresh_context_named_after_it() -> None:
    """The next callback runs on the thread the last one returned on (no thread start per
    callback), named after it, and sees no context variable the last one set."""
    seen: list[tuple[int, str, str]] = []

    def note(_: object) -> None:
        thread = threading.current_thread()
        seen.append((thread.ident or 0, thread.name, MARK.get()))
        MARK.set("set by an earlier callback")

    assert _call(note, "first") == Returned(None)
    assert _call(note, "second") == Returned(None)
    (ident_1, name_1, mark_1), (ident_2, name_2, mark_2) = seen
    assert ident_1 == ident_2 != threading.main_thread().ident
    assert (name_1, name_2) == ("pi-workflows first", "pi-workflows second")
    assert mark_1 == mark_2 == "unset"


def test_a_callback_past_its_deadline_keeps_its_worker_and_the_next_gets_another() -> None:
    """A callback that has not returned at its deadline is abandoned with its thread; the
    next callback runs at once on another worker."""
    release = threading.Event()
    threads: list[int] = []

    def stuck(_: object) -> None:
        threads.append(threading.get_ident())
        release.wait(30)

    def quick(_: object) -> str:
        threads.append(threading.get_ident())
        return "ran"

    try:
        assert isinstance(_call(stuck, "stuck", seconds=0.05), TimedOut)
        assert _call(quick, "quick") == Returned("ran")
    finally:
        release.set()
    assert len(threads) == 2
    assert threads[0] != threads[1]
