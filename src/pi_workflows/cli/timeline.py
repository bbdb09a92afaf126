"""`run history` and `run logs` for people: event lines and attempt output, also streamed.

Owns the line formats. History: one line per event (`time  rev  event  node  actor
detail`), its columns sized once (from the first page and the terminal width, 80 when
output is not a terminal) so a followed history lines up with what came before; a long
node or actor is shortened with `…` (`--json` has them whole), a long detail wraps under
its column, a detail the server sent as JSON is said in words, and a day line
(`── 2026-01-31 ──`) comes before the first event of each day that is not today. Logs:
per attempt a header (`── node N · visit V · STATUS · B bytes ──`) followed by its output
exactly as captured. `LogFollower` prints only what is new in each attempt's output, from
the byte counts the server keeps, so following never repeats or loses a line that is still
kept. Never contacts a server; control characters other than newlines and tabs are dropped.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from pi_workflows.cli.output import plain

__all__ = ["HistoryFormat", "LogFollower", "event_detail", "event_line", "log_header", "log_text"]

NODE_CHARS: Final = 12
"""Widest the node column of `run history` gets; longer node ids are shortened with `…`."""

ACTOR_CHARS: Final = 10
"""Widest the actor column gets (`client:cli`, `client:py…`); `--json` has the whole id."""

DETAIL_MIN_CHARS: Final = 16
"""Narrowest the detail column gets, however narrow the terminal (with the widest node and
actor columns, a line is then exactly 80 characters)."""

_EVENT_CHARS: Final = 21  # the longest event type, `interaction.submitted`

_READABLE: Final = {
    "interaction.submitted": "answer submitted, validating",
    "interaction.rejected": "submission rejected by its validation",
    "interaction.abandoned": "validation did not finish; submission rejected",
    "interaction.timedOut": "request timed out",
    "node.timedOut": "attempt timed out",
    "message.resumed": "step presented again",
}
"""Details for events whose server detail is their JSON data."""


def _moment(value: Any) -> dt.datetime | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC).astimezone()


def _clean(text: str) -> str:
    return "".join(c for c in text if c in "\n\t" or c.isprintable())


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _words(key: str) -> str:
    """`submissionId` -> `submission`, `effectType` -> `effect type`."""
    return re.sub(r"(?<!^)(?=[A-Z])", " ", key.removesuffix("Id")).lower()


def event_detail(event: Mapping[str, Any]) -> str:
    """The event's detail in words: the server's line, unless that is the event's JSON
    data, which is then said in words (`key value, ...`)."""
    detail = plain(event.get("detail")) if event.get("detail") is not None else ""
    if not detail.startswith("{"):
        return detail
    known = _READABLE.get(plain(event.get("type")))
    if known is not None:
        return known
    data = event.get("data")
    if not isinstance(data, Mapping):
        return detail
    parts = []
    for key, value in data.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{_words(str(key))} {_cut(shown, 40)}")
    return ", ".join(parts)


class HistoryFormat:
    """The columns of one `run history` listing, fixed by its first page and the width.

    `lines(event)` gives the event's line (with a day line before it when its day differs
    from the previous event's, and today's date counting as the day before the first) and
    the continuation lines of a long detail. With `growing` (a followed history) the node
    and actor columns take their widest size, since later events may need it.
    """

    def __init__(
        self,
        events: Sequence[Mapping[str, Any]],
        width: int = 80,
        *,
        growing: bool = False,
        today: dt.date | None = None,
    ) -> None:
        last = max((int(e.get("revision") or 0) for e in events), default=0)
        self.rev = max(3, len(str(last)))
        nodes = [NODE_CHARS if growing else 4, *(len(plain(e.get("nodeId"))) for e in events)]
        actors = [ACTOR_CHARS if growing else 5, *(len(plain(e.get("actor"))) for e in events)]
        self.node = min(NODE_CHARS, max(nodes))
        self.actor = min(ACTOR_CHARS, max(actors))
        self.prefix = 8 + 2 + self.rev + 2 + _EVENT_CHARS + 2 + self.node + 2 + self.actor + 2
        self.detail = max(DETAIL_MIN_CHARS, width - self.prefix)
        self.day = today or dt.datetime.now().astimezone().date()

    def header(self) -> str:
        """The column names."""
        return self._row("time", "rev", "event", "node", "actor", "detail")

    def _row(self, time: str, rev: str, event: str, node: str, actor: str, detail: str) -> str:
        return (
            f"{time:<8}  {rev:>{self.rev}}  {event:<{_EVENT_CHARS}}  {node:<{self.node}}  "
            f"{actor:<{self.actor}}  {detail}"
        ).rstrip()

    def lines(self, event: Mapping[str, Any]) -> list[str]:
        """The lines of one `HistoryEvent`."""
        found: list[str] = []
        moment = _moment(event.get("at"))
        if moment is not None and moment.date() != self.day:
            self.day = moment.date()
            found.append(f"── {self.day.isoformat()} ──")
        node = "-" if event.get("nodeId") is None else plain(event.get("nodeId"))
        detail = textwrap.wrap(_clean(event_detail(event)), self.detail) or [""]
        found.append(
            _clean(
                self._row(
                    "-" if moment is None else moment.strftime("%H:%M:%S"),
                    plain(event.get("revision")),
                    plain(event.get("type")),
                    _cut(node, self.node),
                    _cut(plain(event.get("actor")), self.actor),
                    detail[0],
                )
            )
        )
        found.extend(" " * self.prefix + more for more in detail[1:])
        return found


def event_line(event: Mapping[str, Any], width: int = 80) -> str:
    """One `HistoryEvent` as text, its columns sized for it alone (see `HistoryFormat`)."""
    return "\n".join(HistoryFormat([event], width).lines(event))


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
