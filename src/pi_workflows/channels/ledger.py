"""One channel's durable memory: what it sent (receipts), the Telegram update offset, and
the decision messages it posted. `<state dir>/channels/ledger/<name>.json`, 0600, written
whole and atomically after every change (`config.write_private`).

Runs in the channel process only; one writer per file (the channel process is one per
state directory, and one task per channel writes its ledger).

The rules it keeps:
- **At most once per message per channel.** A message's receipt is written (`sending`)
  before it is sent and marked `sent` after; a receipt found `sending` after a crash is
  never sent again (it may or may not have arrived; the log says so).
- **No update lost or handled twice.** `offset` is the next Telegram update to ask for. An
  update's effect on the server (an answer, a refusal) carries an idempotency key made from
  the update's id, so handling it again after a crash before the new offset was stored is a
  replay the server answers from its receipt; the offset is stored right after.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pi_workflows.channels.config import channels_dir, write_private

__all__ = ["KEEP_MS", "Ledger", "Post"]

log = logging.getLogger(__name__)

KEEP_MS: Final = 14 * 24 * 3600 * 1000
"""How long receipts and settled posts are kept (a message older than this is never in the
feed again: the feed's cursor is kept too)."""
MAX_RECEIPTS: Final = 20_000


@dataclass
class Post:
    """A decision message posted to a Telegram chat."""

    key: int  # the short number its buttons' callback data carry
    request_id: str
    run_id: str
    message_id: int | None  # the chat message (None: sending, or it failed)
    chat: str
    text: str  # what it said when posted (edited with the winner later)
    choices: list[dict[str, Any]]
    settled: bool = False  # edited to show the outcome
    prompts: list[int] = field(default_factory=list)  # reply prompts' message ids

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key, "requestId": self.request_id, "runId": self.run_id,
            "messageId": self.message_id, "chat": self.chat, "text": self.text,
            "choices": self.choices, "settled": self.settled, "prompts": self.prompts,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Post:
        return cls(
            key=int(data["key"]), request_id=str(data["requestId"]), run_id=str(data["runId"]),
            message_id=data.get("messageId"), chat=str(data.get("chat", "")),
            text=str(data.get("text", "")), choices=list(data.get("choices", [])),
            settled=bool(data.get("settled")), prompts=list(data.get("prompts", [])),
        )  # fmt: skip


class Ledger:
    """A channel's ledger, loaded once and saved after each change."""

    def __init__(self, home: Path, channel: str) -> None:
        self.path = channels_dir(home) / "ledger" / f"{channel}.json"
        self.receipts: dict[str, dict[str, Any]] = {}  # message id -> {state, at}
        self.offset = 0  # the next Telegram update id to ask for
        self.cursor = 0  # the server's feed cursor this channel has looked at
        self.next_key = 1
        self.posts: dict[int, Post] = {}
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            # A ledger that cannot be read would risk sending everything again: refuse.
            raise RuntimeError(f"cannot read the ledger {self.path}: {exc}") from None
        self.receipts = dict(data.get("receipts", {}))
        self.offset = int(data.get("offset", 0))
        self.cursor = int(data.get("cursor", 0))
        self.next_key = int(data.get("nextKey", 1))
        self.posts = {int(p["key"]): Post.from_json(p) for p in data.get("posts", [])}

    def save(self) -> None:
        """Write the ledger whole (dropping what is older than `KEEP_MS`)."""
        now = int(time.time() * 1000)
        self.receipts = {
            k: v for k, v in self.receipts.items() if now - int(v.get("at", now)) < KEEP_MS
        }
        if len(self.receipts) > MAX_RECEIPTS:
            oldest = sorted(self.receipts, key=lambda k: int(self.receipts[k].get("at", 0)))
            for receipt in oldest[: len(self.receipts) - MAX_RECEIPTS]:
                del self.receipts[receipt]
        open_keys = {k for k, p in self.posts.items() if not p.settled}
        settled = sorted(k for k in self.posts if k not in open_keys)
        for key in settled[:-200]:  # keep the newest settled posts for late button presses
            del self.posts[key]
        data = {
            "receipts": self.receipts,
            "offset": self.offset,
            "cursor": self.cursor,
            "nextKey": self.next_key,
            "posts": [p.to_json() for p in self.posts.values()],
        }
        write_private(self.path, json.dumps(data, sort_keys=True).encode())

    def claim(self, message_ids: list[str]) -> list[str]:
        """Record `sending` receipts for those of `message_ids` never sent, saved before
        anything is sent; the ones to send now (at most once each)."""
        fresh = [m for m in message_ids if m not in self.receipts]
        now = int(time.time() * 1000)
        for message_id in fresh:
            self.receipts[message_id] = {"state": "sending", "at": now}
        if fresh:
            self.save()
        return fresh

    def sent(self, message_ids: list[str], state: str = "sent") -> None:
        """Mark receipts `sent` (or `failed`: it was tried once and is not tried again)."""
        for message_id in message_ids:
            if message_id in self.receipts:
                self.receipts[message_id]["state"] = state
        self.save()

    def new_post(self, request_id: str, run_id: str, chat: str) -> Post:
        post = Post(self.next_key, request_id, run_id, None, chat, "", [])
        self.posts[post.key] = post
        self.next_key += 1
        return post

    def post_of_request(self, request_id: str) -> Post | None:
        return next((p for p in self.posts.values() if p.request_id == request_id), None)

    def post_of_message(self, message_id: int) -> Post | None:
        """The post whose message, or one of whose reply prompts, is `message_id`."""
        for post in self.posts.values():
            if post.message_id == message_id or message_id in post.prompts:
                return post
        return None
