"""The page's HTML: one Jinja environment over the package's templates, and its filters.

Runs in the page process. Autoescaping is on for every template, so a value from a run
(an input, an output, a log, a workflow's message) is always text, never markup; the
templates hold no script (the one script is `static/app.js`, allowed by the page's Content
Security Policy). Values are cut before they are shown (`MAX_SHOWN_CHARS`), with the
command that prints them whole.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any, Final

import jinja2

__all__ = ["MAX_SHOWN_CHARS", "environment", "section_key"]

MAX_SHOWN_CHARS: Final = 64 * 1024
"""The longest value (JSON, a log, a traceback) one page shows; the rest is cut."""


def when(ms: Any) -> str:
    """An epoch-milliseconds time as local `YYYY-MM-DD HH:MM:SS` ("-" for none)."""
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def iso(ms: Any) -> str:
    """An epoch-milliseconds time for a `<time datetime>` attribute ("" for none)."""
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return ""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


def took(start: Any, end: Any) -> str:
    """How long from `start` to `end` (epoch ms), as `1.2 s`, `3 min 4 s`, `2 h 5 min`."""
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (start, end)):
        return "-"
    seconds = max(0.0, (end - start) / 1000)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def cut(text: Any, limit: int = MAX_SHOWN_CHARS) -> str:
    """`text` as a string, cut to `limit` characters with a note of how much was left out."""
    value = "" if text is None else str(text)
    if len(value) <= limit:
        return value
    return value[:limit] + f"\n… ({len(value) - limit} more characters not shown)"


def pretty(value: Any, limit: int = MAX_SHOWN_CHARS) -> str:
    """A JSON value indented for reading, cut to `limit` characters."""
    return cut(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True), limit)


def compact(value: Any, limit: int = 200) -> str:
    """A JSON value on one line, cut to `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def section_key(html: str) -> str:
    """The key a section is replaced by (the browser swaps a section only when it moved)."""
    return hashlib.sha256(html.encode()).hexdigest()[:20]


def environment() -> jinja2.Environment:
    """The page's template environment (autoescaped, undefined names are errors)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pi_workflows.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        enable_async=False,
    )
    env.filters.update(when=when, iso=iso, took=took, cut=cut, pretty=pretty, compact=compact)
    return env
