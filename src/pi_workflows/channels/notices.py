"""Notices: what a message of the server's feed says to a person, the digest rule for a
burst, and the Apprise channel that sends them.

Runs in the channel process. The rule for bursts: when one pass finds more than
`digest_at()` new notices for a channel (default 5, `PI_WORKFLOWS_CHANNEL_DIGEST_AT`),
they go as one digest message listing each (its first line, at most `DIGEST_LINES`), not
one message each. Every notice is receipted before it is sent (`ledger.Ledger.claim`), so
it reaches a channel at most once, alone or in a digest.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pi_workflows.channels.config import ChannelConfig
from pi_workflows.channels.ledger import Ledger
from pi_workflows.channels.sending import notify, scrubbed
from pi_workflows.channels.status import StatusBoard

__all__ = ["DIGEST_LINES", "NoticeChannel", "digest", "digest_at", "notice_text", "wanted"]

log = logging.getLogger(__name__)

DIGEST_LINES: Final = 20
MAX_TEXT: Final = 3500
"""Longest notice text sent (Telegram's limit is 4096 characters)."""


def digest_at() -> int:
    """More new notices than this in one pass become one digest."""
    try:
        return max(1, int(os.environ.get("PI_WORKFLOWS_CHANNEL_DIGEST_AT", "5")))
    except ValueError:
        return 5


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def wanted(message: Mapping[str, Any]) -> bool:
    """Whether a feed message is a notice for a person: a `notify` message, or the end of a
    run that is no child run (a child's end is its parent's progress)."""
    if message.get("kind") == "notification":
        return True
    return message.get("kind") == "terminal" and message.get("originSession") is not None


def notice_text(message: Mapping[str, Any]) -> tuple[str, str]:
    """A feed message as (title, body)."""
    body = message.get("body") if isinstance(message.get("body"), dict) else {}
    assert isinstance(body, dict)
    workflow = str(message.get("workflow") or body.get("workflow") or "")
    run = str(message.get("runId") or "")
    if message.get("kind") == "terminal":
        status = str(body.get("status") or "")
        error = body.get("error")
        title = f"{workflow}: run {status}"
        text = f"Run {run} of {workflow} {status}" + (f": {error}" if error else ".")
    else:
        title = f"{workflow}: {body.get('level', 'progress')}"
        text = str(body.get("text") or "")
    return _cut(title, 200), _cut(text, MAX_TEXT)


def needs_person_text(item: Mapping[str, Any], link: str | None) -> tuple[str, str]:
    """An open decision or question as a one-way notice (title, body)."""
    request = item.get("request") if isinstance(item.get("request"), dict) else {}
    assert isinstance(request, dict)
    workflow = str(item.get("workflow") or "")
    what = str(request.get("title") or request.get("prompt") or "a question")
    title = _cut(f"{workflow}: needs a person", 200)
    text = f"Run {item.get('runId')} of {workflow} asks: {what}"
    choices = request.get("choices")
    if isinstance(choices, list) and choices:
        labels = [str(c.get("label") or c.get("id")) for c in choices if isinstance(c, dict)]
        text += "\nChoices: " + ", ".join(labels)
    text += f"\nAnswer: pi-workflows decision answer {item.get('runId')} --choice ID"
    if link:
        text += f"\nOpen: {link}"
    return title, _cut(text, MAX_TEXT)


def digest(items: list[tuple[str, str]]) -> tuple[str, str]:
    """Many notices (title, body) as one digest."""
    lines = [f"- {t}: {b.splitlines()[0] if b else ''}" for t, b in items[:DIGEST_LINES]]
    if len(items) > DIGEST_LINES:
        lines.append(f"- and {len(items) - DIGEST_LINES} more (pi-workflows run list)")
    return f"pi-workflows: {len(items)} notices", _cut("\n".join(lines), MAX_TEXT)


def batches(
    todo: list[tuple[str, tuple[str, str]]],
) -> list[tuple[list[str], tuple[str, str]]]:
    """The sends for `(receipt key, (title, body))` notices not sent before: one each, or
    one digest holding every key when there are more than `digest_at()` at once."""
    if len(todo) > digest_at():
        return [([k for k, _ in todo], digest([t for _, t in todo]))]
    return [([k], t) for k, t in todo]


class NoticeChannel:
    """A one-way channel through Apprise (`--kind notify`)."""

    def __init__(self, channel: ChannelConfig, home: Path, status: StatusBoard) -> None:
        self.channel = channel
        self.name = channel.name
        self.ledger = Ledger(home, channel.name)
        self.status = status

    async def send_notices(self, items: list[tuple[str, tuple[str, str]]]) -> None:
        """Send `(receipt key, (title, body))` items not sent before, digested in a burst."""
        fresh = set(self.ledger.claim([key for key, _ in items]))
        todo = [(key, text) for key, text in items if key in fresh]
        if not todo:
            return
        for keys, (title, body) in batches(todo):
            try:
                problem = await notify(self.channel, title, body)
            except Exception as exc:
                problem = scrubbed(f"{type(exc).__name__}: {exc}", self.channel)
            self.ledger.sent(keys, "failed" if problem else "sent")
            if problem:
                log.warning("channel %s: a notice was not delivered: %s", self.name, problem)
                self.status.set(self.name, "failing", problem)
            else:
                self.status.set(self.name, "ok")
