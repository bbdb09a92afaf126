"""`run history` and `run logs` for people: event lines and attempt output, also streamed.

Owns the line formats: one line per event (`time  rev  event  node  actor  detail`, fixed
columns so a followed history lines up with what came before), and per attempt a header
(`── node N · visit V · STATUS · B bytes ──`) followed by its output exactly as captured.
`LogFollower` prints only what is new in each attempt's output, from the byte counts the
server keeps, so following never repeats or loses a line that is still kept. Never
contacts a server; control characters other than newlines and tabs are dropped.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from pi_workflows.cli.output import plain

__all__ = ["HISTORY_HEADER", "LogFollower", "event_line", "log_header", "log_text"]

_ACTOR_CHARS: Final = 16
HISTORY_HEADER: Final = (
    f"{'time':<8}  {'rev':>4}  {'event':<21}  {'node':<12}  {'actor':<10}  detail"
)


def _clock(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    return dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC).astimezone().strftime("%H:%M:%S")


def _clean(text: str) -> str:
    return "".join(c for c in text if c in "\n\t" or c.isprintable())


def event_line(event: Mapping[str, Any]) -> str:
    """One `HistoryEvent` as a line; a long client id is shortened (`--json` has it whole)."""
    actor = plain(event.get("actor"))
    if len(actor) > _ACTOR_CHARS:
        actor = actor[: _ACTOR_CHARS - 1] + "…"
    node = "-" if event.get("nodeId") is None else plain(event.get("nodeId"))
    return _clean(
        f"{_clock(event.get('at')):<8}  {plain(event.get('revision')):>4}  "
        f"{plain(event.get('type')):<21}  {node:<12}  {actor:<10}  {plain(event.get('detail'))}"
    ).rstrip()


def log_header(log: Mapping[str, Any], *, final: bool = True) -> str:
    """The line above one attempt's output (`final`: with its status and size)."""
    parts = [f"node {plain(log.get('nodeId'))}", f"visit {plain(log.get('visit'))}"]
    if log.get("attemptNo", 1) != 1:
        parts.append(f"try {plain(log.get('attemptNo'))}")
    if final:
        parts.append(plain(log.get("status")))
        parts.append(f"{log.get('totalBytes', 0):,} bytes")
    return "── " + " · ".join(parts) + " ──"


def log_text(log: Mapping[str, Any]) -> str:
    """One attempt's kept output, with a note when older output was not kept and its
    traceback when the output does not already end with it."""
    text = _clean(str(log.get("text") or ""))
    lines: list[str] = []
    if log.get("truncated"):
        dropped = int(log.get("totalBytes", 0)) - int(log.get("keptBytes", 0))
        lines.append(f"… {dropped:,} earlier bytes not kept (the newest 64 KiB are)")
    if text:
        lines.append(text.rstrip("\n"))
    trace = log.get("traceback")
    if isinstance(trace, str) and trace.strip() and trace.strip() not in text:
        lines.append(_clean(trace).rstrip("\n"))
    return "\n".join(lines)


class LogFollower:
    """Prints the new part of each attempt's output as fresh `run.logs` answers come in.

    `write` receives raw text (no newline is added), so a line that arrives in two parts is
    printed as one line.
    """

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write = write
        self._seen: dict[str, int] = {}  # attempt id -> bytes of it already printed
        self._line_open = False  # the last text printed did not end with a newline

    def _put(self, text: str) -> None:
        if text:
            self._write(text)
            self._line_open = not text.endswith("\n")

    def update(self, logs: Sequence[Mapping[str, Any]]) -> None:
        """Print what is new in `logs` (every attempt of the run, oldest first)."""
        for log in logs:
            attempt = str(log.get("attemptId"))
            total = int(log.get("totalBytes") or 0)
            seen = self._seen.get(attempt)
            if total == 0:
                continue
            if seen is None:
                if self._line_open:
                    self._put("\n")
                self._put(log_header(log, final=False) + "\n")
                seen = 0
            if total > seen:
                data = str(log.get("text") or "").encode("utf-8")
                fresh = total - seen
                if fresh > len(data):
                    self._put(f"… {fresh - len(data):,} bytes not kept\n")
                    fresh = len(data)
                self._put(_clean(data[len(data) - fresh :].decode("utf-8", errors="ignore")))
            self._seen[attempt] = max(total, seen)

    def close(self) -> None:
        """End an open line."""
        if self._line_open:
            self._put("\n")
