"""When a schedule fires: the ``--every`` duration grammar, cron expressions, time zones, and
the fire times of a cadence around a moment.

Pure functions of their arguments: no clock, no database. The schedule transitions
(``store/schedules.py``) and the server's schedule handlers use them; every refusal is an
``InvalidScheduleError`` whose one line names the bad value and the accepted form.

Times are integer milliseconds since the Unix epoch. An ``every`` cadence is a fixed number
of milliseconds from an anchor (time zones do not change it); a cron cadence is read in its
IANA time zone with ``cronsim`` on aware datetimes, so a daily ``0 9 * * *`` stays at 09:00
local time across daylight-saving changes: a time that does not exist on the day clocks go
forward fires at the first minute that does (02:30 becomes 03:00), and a time that occurs
twice on the day clocks go back fires once, at its first occurrence.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from pi_workflows.store.errors import InvalidScheduleError

MIN_EVERY_MS: Final = 1_000
"""The shortest ``--every``: one second."""
MAX_EVERY_MS: Final = 366 * 86_400_000
"""The longest ``--every``: 366 days."""
MAX_CRON_CHARS: Final = 200
MAX_ZONE_CHARS: Final = 64
COUNT_LIMIT: Final = 1_000
"""Most due cron times counted one by one after downtime; beyond it a count says "at least"."""

EVERY_FORM: Final = (
    "whole numbers with the units d, h, m and s in that order, e.g. 30s, 5m, 1h30m or 2d"
    " (at least 1s, at most 366d)"
)
CRON_FORM: Final = (
    "five fields, minute hour day-of-month month day-of-week, e.g. '0 9 * * 1-5'"
    " (numbers, ranges a-b, lists a,b, steps */n; JAN-DEC and SUN-SAT names)"
)
ZONE_FORM: Final = "an IANA time zone name such as UTC, Europe/Berlin or America/New_York"

_EVERY = re.compile(r"^(?:(\d{1,6})d)?(?:(\d{1,8})h)?(?:(\d{1,10})m)?(?:(\d{1,12})s)?$")
_UNIT_MS: Final = (86_400_000, 3_600_000, 60_000, 1_000)
_ZONE = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*$")
_NOT_ZONES: Final = frozenset({"localtime", "posixrules", "Factory"})


def parse_every(text: str) -> int:
    """``30s``, ``5m``, ``1h30m``, ``2d`` ... as milliseconds; ``InvalidScheduleError``
    naming the value and the accepted form otherwise."""
    match = _EVERY.fullmatch(text.strip().lower()) if len(text) <= 40 else None
    if match is None or not any(match.groups()):
        raise InvalidScheduleError(
            "every", f"--every {text[:40]!r} is not a duration: use {EVERY_FORM}"
        )
    ms = sum(int(part) * unit for part, unit in zip(match.groups(), _UNIT_MS, strict=True) if part)
    if not MIN_EVERY_MS <= ms <= MAX_EVERY_MS:
        raise InvalidScheduleError("every", f"--every {text!r} is out of range: use {EVERY_FORM}")
    return ms


def format_every(ms: int) -> str:
    """A duration in the ``--every`` grammar (``90000`` is ``1m30s``)."""
    parts = []
    for unit, name in zip(_UNIT_MS, "dhms", strict=True):
        count, ms = divmod(ms, unit)
        if count:
            parts.append(f"{count}{name}")
    return "".join(parts) or "0s"


def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name`` (from the system's zone files, else the ``tzdata`` package);
    ``InvalidScheduleError`` for anything else."""
    if len(name) <= MAX_ZONE_CHARS and _ZONE.fullmatch(name) and name not in _NOT_ZONES:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    raise InvalidScheduleError(
        "timezone", f"--timezone {name[:MAX_ZONE_CHARS]!r} is not a time zone: use {ZONE_FORM}"
    )


def local_zone_name(environ: dict[str, str] | None = None, root: Path = Path("/")) -> str:
    """This machine's IANA zone name: ``$TZ`` when it is one, else ``/etc/timezone``, else
    the zone ``/etc/localtime`` links to; ``UTC`` when none of them names a zone."""
    env = os.environ if environ is None else environ
    candidates = [env.get("TZ", "").lstrip(":")]
    with contextlib.suppress(OSError, UnicodeDecodeError):
        candidates.append((root / "etc/timezone").read_text(encoding="utf-8").strip())
    try:
        target = os.readlink(root / "etc/localtime")
    except OSError:
        target = ""
    if "zoneinfo/" in target:
        candidates.append(target.split("zoneinfo/", 1)[1])
    for candidate in candidates:
        try:
            zone(candidate)
        except InvalidScheduleError:
            continue
        return candidate
    return "UTC"


def _moment(ms: int, tz: ZoneInfo) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).astimezone(tz)


def _ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def check_cron(expr: str, timezone: str, now_ms: int) -> str:
    """The cron expression, normalised to single spaces, if it is valid and fires at all;
    ``InvalidScheduleError`` naming it and the accepted form otherwise."""
    shown = expr if len(expr) <= 60 else expr[:59] + "…"
    fields = expr.split()
    if len(expr) > MAX_CRON_CHARS or not expr.isprintable() or len(fields) != 5:
        why = "it does not have five fields" if len(fields) != 5 else "it is too long"
        raise InvalidScheduleError(
            "cron", f"--cron {shown!r} is not a cron expression ({why}): use {CRON_FORM}"
        )
    normal = " ".join(fields)
    try:
        CronSim(normal, _moment(now_ms, zone(timezone)))
    except (CronSimError, ValueError, IndexError) as exc:
        raise InvalidScheduleError(
            "cron", f"--cron {shown!r} is not a cron expression ({exc}): use {CRON_FORM}"
        ) from None
    if Cadence(None, normal, timezone, now_ms).next_after(now_ms) is None:
        raise InvalidScheduleError("cron", f"--cron {shown!r} never fires: use {CRON_FORM}")
    return normal


@dataclass(frozen=True)
class Cadence:
    """When a schedule fires: every ``every_ms`` from ``anchor_at``, or at the times of
    ``cron`` read in ``timezone`` (exactly one of the two is set)."""

    every_ms: int | None
    cron: str | None
    timezone: str
    anchor_at: int

    def next_after(self, t: int) -> int | None:
        """The first fire time strictly after ``t`` (None: a cron that never fires again)."""
        if self.every_ms is not None:
            if t < self.anchor_at + self.every_ms:
                return self.anchor_at + self.every_ms
            return self.anchor_at + ((t - self.anchor_at) // self.every_ms + 1) * self.every_ms
        assert self.cron is not None
        times = CronSim(self.cron, _moment(t, zone(self.timezone)))
        try:
            found = _ms(next(times))
            while found <= t:  # a wall time repeated when clocks go back: the next one
                found = _ms(next(times))
        except StopIteration:
            return None
        return found

    def latest_until(self, t: int, count: int) -> list[int]:
        """The newest ``count`` fire times at or before ``t``, oldest first (fewer when the
        cadence has no more)."""
        if self.every_ms is not None:
            first = self.anchor_at + self.every_ms
            if t < first:
                return []
            newest = self.anchor_at + ((t - self.anchor_at) // self.every_ms) * self.every_ms
            found = [newest - k * self.every_ms for k in range(count)]
            return sorted(f for f in found if f >= first)
        assert self.cron is not None
        times = CronSim(self.cron, _moment(t + 1000, zone(self.timezone)), reverse=True)
        found = []
        try:
            while len(found) < count:
                moment = _ms(next(times))
                if moment <= t and moment not in found:
                    found.append(moment)
        except StopIteration:
            pass
        return sorted(found)

    def count_due(self, first: int, t: int) -> tuple[int, bool]:
        """How many fire times lie in ``[first, t]`` when ``first`` is one, and whether that
        count is exact (a cron cadence counts at most ``COUNT_LIMIT``)."""
        if first > t:
            return 0, True
        if self.every_ms is not None:
            return (t - first) // self.every_ms + 1, True
        count, moment = 1, first
        while count < COUNT_LIMIT:
            following = self.next_after(moment)
            if following is None or following > t:
                return count, True
            count, moment = count + 1, following
        return count, False

    def describe(self) -> str:
        """``every 1h30m`` or ``cron '0 9 * * 1-5' (Europe/Berlin)``."""
        if self.every_ms is not None:
            return f"every {format_every(self.every_ms)}"
        return f"cron '{self.cron}' ({self.timezone})"
