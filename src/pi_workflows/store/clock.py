"""Time for the store and the server: one injected clock, integer milliseconds.

Store and server code never call ``time.time()`` directly; they ask a ``Clock`` so tests
can freeze time and jump it across lease intervals.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """A source of wall-clock time in integer milliseconds since the Unix epoch."""

    def now_ms(self) -> int:
        """Return the current time."""
        ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        """Return the wall-clock time."""
        return time.time_ns() // 1_000_000


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
