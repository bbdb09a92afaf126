"""Time for the store and the server: one injected clock, integer milliseconds.

Store and server code never call ``time.time()`` directly; they ask a ``Clock`` so tests
can freeze time and jump it across lease intervals. The real clock is anchored to the wall
clock once and then follows the monotonic clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    """A source of wall-clock time in integer milliseconds since the Unix epoch."""

    def now_ms(self) -> int:
        """Return the current time."""
        ...


class SystemClock:
    """The real clock: wall-clock time at creation, then advancing with the monotonic clock.

    Leases, node deadlines and request deadlines are measured with it, so within one server
    process a wall-clock jump (an NTP step, a changed date) neither expires every claim nor
    fires deadlines early or late; a new server reads the wall clock again when it starts.
    (Like the monotonic clock it does not advance while the machine is suspended.)
    ``wall`` and ``monotonic`` return nanoseconds and exist for tests.
    """

    def __init__(
        self,
        wall: Callable[[], int] = time.time_ns,
        monotonic: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._monotonic = monotonic
        self._origin_ns = wall() - monotonic()

    def now_ms(self) -> int:
        """Return the time in milliseconds since the Unix epoch."""
        return (self._origin_ns + self._monotonic()) // 1_000_000


class FakeClock:
    """A clock that only moves when a test moves it."""

    def __init__(self, start_ms: int = 1_800_000_000_000) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        """Return the frozen time."""
        with self._lock:
            return self._now

    def advance(self, ms: int) -> int:
        """Move time forward by ``ms`` milliseconds and return the new time."""
        if ms < 0:
            raise ValueError("a FakeClock never moves backwards")
        with self._lock:
            self._now += ms
            return self._now
