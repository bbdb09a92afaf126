"""The callback inbox: updates are coalesced and rate-limited, and the queue stays bounded."""

from __future__ import annotations

import time

from pi_workflows.authoring import CancellationSignal, JsonValue
from pi_workflows.runner.callbacks import (
    UPDATE_INTERVAL_SECONDS,
    Deadline,
    Inbox,
    Returned,
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
