"""SIGTERM in the runner child: record it, unwind the main thread, stop what is running.

Runs in the runner child; never opens the database. The server commits a cancellation,
pause or stop before it signals, so a terminated child sends nothing more. The handler only
records the signal and raises ``RunnerTerminated`` in the main thread (like
``KeyboardInterrupt``), unless the main thread is in a ``deferred()`` section (between
spawning a shell command and registering its process group), in which case it is raised
when the section ends. The main thread then calls ``Termination.cancel_current`` (sets the
node's cancellation signal) and stops the registered process groups.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from pi_workflows.authoring import CancellationSignal
from pi_workflows.runner.errors import RunnerTerminated


class Termination:
    """The child's record of SIGTERM and of the cancellation signal to set on it.

    Invariants: ``requested`` only goes from False to True; once ``unwinding`` is True the
    handler never raises again (cleanup must not be interrupted).
    """

    def __init__(self) -> None:
        self.requested = False  # a SIGTERM arrived
        self.unwinding = False  # the main thread is already cleaning up; do not raise again
        self._deferred = 0  # depth of deferred() sections in the main thread
        self._current: CancellationSignal | None = None  # the running attempt's signal

    def install(self) -> None:
        """Install the SIGTERM handler (main thread only)."""
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        del signum, frame
        self.requested = True
        if not self.unwinding and self._deferred == 0:
            self.unwinding = True
            raise RunnerTerminated

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold a SIGTERM until the block ends (never around a blocking wait)."""
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1
            if self._deferred == 0 and self.requested and not self.unwinding:
                self.unwinding = True
                raise RunnerTerminated

    def watch(self, cancellation: CancellationSignal | None) -> None:
        """Make ``cancellation`` the signal a termination sets (``None`` between attempts).

        Ignored once unwinding, so the attempt that was running when SIGTERM arrived is the
        one ``cancel_current`` cancels even after its ``finally`` blocks ran.
        """
        if not self.unwinding:
            self._current = cancellation

    def cancel_current(self) -> None:
        """Set the running attempt's cancellation signal (called by the main thread)."""
        self.unwinding = True
        if self._current is not None:
            self._current.set()
