"""Capturing what the running node attempt prints, logs and runs, and forwarding it.

Runs in the runner child; never opens the database. One process-wide ``Capture`` (the
runner executes one attempt at a time) is attached to the channel by the execution loop.
While an attempt runs, it receives:

- everything written to ``sys.stdout`` and ``sys.stderr`` (from any thread), through a tee
  that still writes to the real streams, so the server's output tail is unchanged;
- ``logging`` records that reach the root logger (INFO and up unless the workflow set its
  own level), formatted ``LEVEL logger: message``, also written to the real stderr;
- the stdout and stderr of the attempt's shell commands (``shell.py`` feeds them);
- the traceback of a callback that raised (``record_traceback``), kept separately.

Bounds: at most ``LOG_CHUNK_BYTES`` of unsent text is held (the newest; the bytes dropped
are still counted), and a traceback is cut to ``TRACEBACK_CHARS`` (its end kept). The text
goes to the server as ``node.logs {attemptId, text, bytes, traceback?}``: before the
attempt's result or wait is proposed (``node.finish``, ``node.wait``, ``run.park``,
``interaction.reject``), and at most every ``FLUSH_SECONDS`` while it runs and has new
output. The server keeps the last 64 KiB per attempt. Output written straight to file
descriptors 1 and 2 (a C extension, a subprocess the callback starts itself) bypasses the
tee and stays in the runner's output tail only.
"""

from __future__ import annotations

import codecs
import io
import logging
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Final, TextIO, cast

if TYPE_CHECKING:
    from pi_workflows.runner.channel import Channel

LOG_CHUNK_BYTES: Final = 64 * 1024
"""Most unsent text held for an attempt (the newest), and so most one ``node.logs`` carries."""

TRACEBACK_CHARS: Final = 8 * 1024
"""Longest traceback sent for an attempt (its end: the exception and innermost frames)."""

FLUSH_SECONDS: Final = 1.0
"""At most one ``node.logs`` per this many seconds while an attempt runs."""

CLOSING_KINDS: Final = frozenset(
    {
        "node.finish",
        "node.wait",
        "run.park",
        "interaction.reject",
        "node.retry",  # a retried try's output and traceback stay with that try
        "node.sleep",
        "node.await",
        "signal.reject",
    }
)
"""Proposals that end an attempt's work in this runner: its logs are sent just before."""

_FORMAT: Final = "%(levelname)s %(name)s: %(message)s"


class AttemptLog:
    """The unsent output of one attempt; every method is safe from any thread."""

    def __init__(self, attempt_id: str) -> None:
        self.attempt_id = attempt_id
        self._lock = threading.Lock()
        self._parts: list[str] = []
        self._held = 0  # UTF-8 bytes in _parts
        self._produced = 0  # bytes produced since the last take, kept or not
        self._traceback: str | None = None

    def write(self, text: str) -> None:
        """Add ``text``; beyond ``LOG_CHUNK_BYTES`` unsent, the oldest is dropped."""
        if not text:
            return
        size = len(text.encode("utf-8", errors="replace"))
        with self._lock:
            self._parts.append(text)
            self._held += size
            self._produced += size
            if self._held > LOG_CHUNK_BYTES:
                data = "".join(self._parts).encode("utf-8", errors="replace")[-LOG_CHUNK_BYTES:]
                kept = data.decode("utf-8", errors="ignore")
                self._parts = [kept]
                self._held = len(kept.encode("utf-8"))

    def set_traceback(self, text: str) -> None:
        """Keep ``text`` as the attempt's traceback (its end, at most ``TRACEBACK_CHARS``)."""
        if len(text) > TRACEBACK_CHARS:
            text = text[-TRACEBACK_CHARS:]
        with self._lock:
            self._traceback = text

    @property
    def pending(self) -> bool:
        """Whether anything is waiting to be sent."""
        with self._lock:
            return bool(self._produced or self._traceback)

    def take(self) -> dict[str, Any] | None:
        """The ``node.logs`` payload of everything unsent (and forget it), or None."""
        with self._lock:
            if not self._produced and self._traceback is None:
                return None
            payload: dict[str, Any] = {
                "attemptId": self.attempt_id,
                "text": "".join(self._parts),
                "bytes": self._produced,
            }
            if self._traceback is not None:
                payload["traceback"] = self._traceback
            self._parts, self._held, self._produced, self._traceback = [], 0, 0, None
        return payload


class _Tee(io.TextIOBase):
    """A text stream that writes to the real one and to the current attempt's log."""

    def __init__(self, real: TextIO, capture: Capture) -> None:
        super().__init__()
        self._real = real
        self._capture = capture

    def write(self, text: str) -> int:
        written = self._real.write(text)
        log = self._capture.current
        if log is not None:
            log.write(text)
        return written

    def flush(self) -> None:
        self._real.flush()

    def fileno(self) -> int:
        return self._real.fileno()

    def isatty(self) -> bool:
        return self._real.isatty()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._real.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self._real.errors

    @property
    def real(self) -> TextIO:
        """The stream this tee writes through to."""
        return self._real


class _Handler(logging.Handler):
    """Root-logger handler: the record to the real stderr and to the attempt's log."""

    def __init__(self, capture: Capture, real_stderr: TextIO) -> None:
        super().__init__(logging.NOTSET)
        self._capture = capture
        self._real = real_stderr
        self.setFormatter(logging.Formatter(_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
            self._real.write(line)
            log = self._capture.current
            if log is not None:
                log.write(line)
        except Exception:  # logging must never break a callback
            self.handleError(record)


class Capture:
    """The runner's one capture: the current attempt's log and the channel it goes on.

    Only the main thread calls ``attach``, ``begin`` and the flushes (the channel is the
    main thread's); writes come from any thread.
    """

    def __init__(self) -> None:
        self.current: AttemptLog | None = None
        self._channel: Channel | None = None
        self._installed = False
        self._last_flush = 0.0
        self._decoders: dict[str, codecs.IncrementalDecoder] = {}

    def attach(self, channel: Channel) -> None:
        """Install the stream tee and the logging handler (once) and send logs on ``channel``."""
        self._channel = channel
        channel.before_proposal = self._before_proposal
        if self._installed:
            return
        self._installed = True
        real_stderr = sys.stderr
        sys.stdout = cast(TextIO, _Tee(sys.stdout, self))
        sys.stderr = cast(TextIO, _Tee(sys.stderr, self))
        root = logging.getLogger()
        if root.level == logging.WARNING and not root.handlers:
            root.setLevel(logging.INFO)  # the workflow configured nothing: keep INFO too
        root.addHandler(_Handler(self, real_stderr))

    def begin(self, attempt_id: str) -> None:
        """From now on, output belongs to ``attempt_id``."""
        if self.current is None or self.current.attempt_id != attempt_id:
            self.current = AttemptLog(attempt_id)
            self._decoders.clear()
            self._last_flush = time.monotonic()

    def shell_output(self, stream: str, chunk: bytes) -> None:
        """Bytes a shell command of the attempt wrote on ``stream`` (``stdout``/``stderr``)."""
        log = self.current
        if log is None:
            return
        decoder = self._decoders.get(stream)
        if decoder is None:
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            self._decoders[stream] = decoder
        log.write(decoder.decode(chunk))

    def record_traceback(self, text: str) -> None:
        """The traceback of the attempt's callback that raised."""
        if self.current is not None:
            self.current.set_traceback(text)

    def flush(self) -> None:
        """Send everything unsent as one ``node.logs`` (main thread; errors propagate)."""
        log, channel = self.current, self._channel
        if log is None or channel is None:
            return
        payload = log.take()
        self._last_flush = time.monotonic()
        if payload is not None:
            channel.request("node.logs", payload)

    def due_in(self) -> float | None:
        """Seconds until a periodic flush is due (0: now), or None with nothing to send."""
        log = self.current
        if log is None or self._channel is None or not log.pending:
            return None
        return max(0.0, self._last_flush + FLUSH_SECONDS - time.monotonic())

    def flush_if_due(self) -> None:
        """Send the unsent output when a periodic flush is due (main thread)."""
        due = self.due_in()
        if due is not None and due <= 0:
            self.flush()

    def _before_proposal(self, kind: str) -> None:
        if kind in CLOSING_KINDS:
            self.flush()


capture: Final = Capture()
"""The runner's capture (one attempt runs at a time in a runner)."""
