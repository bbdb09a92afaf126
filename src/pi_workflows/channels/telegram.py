"""The Telegram channel: decisions as messages with one button per choice, answers from
allow-listed people, the message edited with the winner, notices, all over long polling.

Runs in the channel process (one `TelegramChannel` per configured telegram channel). It is
a seat like the page: an answer goes to the server as `decision.answer` with the person's
Telegram id, so the first valid answer of any seat wins there, and a later one is told the
winner. What it keeps (the update offset, what it sent, the posts it will edit) is its
ledger (`ledger.py`): no update is lost or handled twice across restarts, and no message
is sent twice.

- A decision's message: the workflow, the run, the title and details, the default and when
  it is taken, a link to the page (when one is known), one button per choice and a
  "Type the answer" button that asks for a reply (a reply prompt); a text reply to the
  prompt or to the message itself that names a choice (its id or label) is an answer too.
- Only the `--allow-user` ids may answer: anyone else gets a refusal reply, and the attempt
  is kept in the run's history (`decision.refuse`).
- Once the decision is resolved (by any seat, its default or a cancellation) the message is
  edited to say how and who, and its buttons go.
- Rate limits: a 429 answer's `retry_after` is waited out before the call is made again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeVar

from telegram import (
    CallbackQuery,
    ForceReply,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    Update,
)
from telegram.error import NetworkError, RetryAfter, TelegramError

from pi_workflows.channels.config import ChannelConfig
from pi_workflows.channels.ledger import Ledger, Post
from pi_workflows.channels.sending import POLL_SECONDS, bot_for, scrubbed
from pi_workflows.channels.status import StatusBoard
from pi_workflows.client import (
    AsyncClient,
    ClientError,
    ConnectionLostError,
    ServerUnavailableError,
    UnavailableError,
)

__all__ = ["TelegramChannel"]

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_CALL_TRIES: Final = 5
TYPE_BUTTON: Final = "t"
ERROR_PAUSE_SECONDS: Final = (1.0, 60.0)
"""The pause after a failed poll: doubling from the first to the second."""
SERVER_GONE: Final = (ConnectionLostError, ServerUnavailableError, UnavailableError)
"""Client errors that say the server is gone or stopping, not that it refused: an update
whose handling meets one is not passed (its offset is not stored), so the poll loop fails,
and this process or the next server's handles the update again under the same key."""


def _retry_seconds(exc: RetryAfter) -> float:
    value: Any = exc.retry_after
    return float(value.total_seconds() if hasattr(value, "total_seconds") else value)


def _when(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _label(choices: list[dict[str, Any]], choice: str | None) -> str:
    for item in choices:
        if item.get("id") == choice:
            label = str(item.get("label") or choice)
            return label if label == choice else f"{label} ({choice})"
    return str(choice)


def decision_text(item: dict[str, Any], link: str | None) -> str:
    """The message of an open decision (`interaction.list` item)."""
    request = item.get("request") if isinstance(item.get("request"), dict) else {}
    assert isinstance(request, dict)
    lines = [
        f"Decision needed: {item.get('workflow')} (run {item.get('runId')})",
        "",
        str(request.get("title") or ""),
    ]
    if request.get("details"):
        lines += ["", str(request["details"])]
    timeout_choice = item.get("timeoutChoice")
    if item.get("deadlineAt"):
        default = (
            f"'{_label(request.get('choices') or [], timeout_choice)}'"
            if timeout_choice
            else "none"
        )
        lines += ["", f"Default {default} at {_when(item.get('deadlineAt'))}"]
    if link:
        lines += ["", f"Open: {link}"]
    return "\n".join(lines)[:3900]


def outcome_text(post: Post, decision: dict[str, Any]) -> str:
    """The message after the decision was resolved: how, and who."""
    resolution = decision.get("resolution")
    choice = _label(post.choices, decision.get("choice"))
    if resolution == "answered":
        said = f"Decided: {choice}, by {decision.get('resolvedBy') or 'a person'}"
    elif resolution == "timedOut":
        said = f"Timed out: the default {choice} was taken"
    else:
        said = "Cancelled with its run"
    return f"{post.text}\n\n{said}"[:4000]


class TelegramChannel:
    """One Telegram channel's poll loop and deliveries."""

    def __init__(
        self,
        channel: ChannelConfig,
        home: Path,
        client: AsyncClient,
        status: StatusBoard,
        link: Callable[[str], str | None],
    ) -> None:
        self.channel = channel
        self.name = channel.name
        self.chat = channel.chat or ""
        self.allowed = frozenset(channel.allow_users)
        self.ledger = Ledger(home, channel.name)
        self.client = client
        self.status = status
        self.link = link
        self.bot = bot_for(channel)
        self.lock = asyncio.Lock()  # one change of the ledger at a time (poll and dispatch)

    # --- calls ---------------------------------------------------------------------------

    async def call(self, what: str, make: Callable[[], Awaitable[T]]) -> T:
        """Make a Bot API call, waiting out 429's `retry_after` (a few times at most)."""
        for _ in range(MAX_CALL_TRIES - 1):
            try:
                return await make()
            except RetryAfter as exc:
                wait = _retry_seconds(exc)
                self.status.set(self.name, "failing", f"rate limited on {what}; waiting {wait:g}s")
                await asyncio.sleep(wait)
        return await make()

    def _problem(self, exc: BaseException) -> str:
        return scrubbed(f"{type(exc).__name__}: {exc}", self.channel)

    # --- polling -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Long-poll for updates until `stop`; a failure is shown and retried with backoff."""
        pause = ERROR_PAUSE_SECONDS[0]
        await self.bot.initialize()  # getMe: a wrong token fails here, said in the status
        self.status.set(self.name, "ok")
        while not stop.is_set():
            try:
                updates = await self.call(
                    "getUpdates",
                    lambda: self.bot.get_updates(
                        offset=self.ledger.offset,
                        timeout=POLL_SECONDS,
                        allowed_updates=["message", "callback_query"],
                    ),
                )
            except (TelegramError, OSError) as exc:
                self.status.set(self.name, "failing", self._problem(exc))
                await _sleep_or_stop(stop, pause)
                pause = min(ERROR_PAUSE_SECONDS[1], pause * 2)
                continue
            pause = ERROR_PAUSE_SECONDS[0]
            self.status.set(self.name, "ok")
            for update in updates:
                async with self.lock:
                    await self.handle(update)
                    self.ledger.offset = update.update_id + 1
                    self.ledger.save()

    async def handle(self, update: Update) -> None:
        """One update: a button press or a text reply (anything else is only skipped)."""
        key = f"telegram:{self.name}:{update.update_id}"
        try:
            if update.callback_query is not None:
                await self._pressed(update.callback_query, key)
            elif update.message is not None and update.message.reply_to_message is not None:
                await self._replied(update.message, key)
        except SERVER_GONE:
            raise  # not handled: never pass an update the server has not seen
        except Exception as exc:
            # Handled as far as it could be (never again: one bad update must not stop the
            # channel): the server's part is idempotent by `key`; the next update goes on.
            log.warning("channel %s: update %d: %s", self.name, update.update_id,
                        self._problem(exc))  # fmt: skip

    async def _pressed(self, query: CallbackQuery, key: str) -> None:
        data = (query.data or "").split(":")
        post = self.ledger.posts.get(int(data[0])) if data[0].isdigit() else None
        user = query.from_user
        if post is None or len(data) != 2:
            await self.call(
                "answerCallbackQuery", lambda: query.answer("This is no open decision.")
            )
            return
        if user.id not in self.allowed:
            await self._refuse(post, user.id, user.username, key)
            await self.call(
                "answerCallbackQuery",
                lambda: query.answer("You may not answer here: you are not on this channel's"
                                     " allow list.", show_alert=True),
            )  # fmt: skip
            return
        if data[1] == TYPE_BUTTON:
            labels = ", ".join(str(c.get("label") or c.get("id")) for c in post.choices)
            prompt = await self.call(
                "sendMessage",
                lambda: self.bot.send_message(
                    chat_id=self.chat,
                    text=f"Reply with your answer ({labels}) to: {post.text.splitlines()[2]}",
                    reply_markup=ForceReply(selective=True),
                ),
            )
            post.prompts.append(prompt.message_id)
            self.ledger.save()
            await self.call("answerCallbackQuery", query.answer)
            return
        index = int(data[1]) if data[1].isdigit() else -1
        if not 0 <= index < len(post.choices):
            await self.call("answerCallbackQuery", lambda: query.answer("No such choice."))
            return
        said = await self._answer(post, str(post.choices[index]["id"]), user.id, user.username, key)
        await self.call("answerCallbackQuery", lambda: query.answer(said))

    async def _replied(self, message: Message, key: str) -> None:
        assert message.reply_to_message is not None
        post = self.ledger.post_of_message(message.reply_to_message.message_id)
        user = message.from_user
        if post is None or user is None:
            return
        if user.id not in self.allowed:
            await self._refuse(post, user.id, user.username, key)
            await self.call(
                "sendMessage",
                lambda: message.reply_text(
                    "You may not answer here: you are not on this channel's allow list."
                ),
            )
            return
        text = (message.text or "").strip().casefold()
        chosen = next(
            (
                str(c["id"])
                for c in post.choices
                if text in (str(c.get("id")).casefold(), str(c.get("label") or "").casefold())
            ),
            None,
        )
        if chosen is None:
            labels = ", ".join(str(c.get("label") or c.get("id")) for c in post.choices)
            await self.call(
                "sendMessage",
                lambda: message.reply_text(f"That is not one of the choices: {labels}"),
            )
            return
        said = await self._answer(post, chosen, user.id, user.username, key)
        await self.call("sendMessage", lambda: message.reply_text(said))

    async def _answer(
        self, post: Post, choice: str, user_id: int, username: str | None, key: str
    ) -> str:
        """Answer the decision on the server (the first valid answer wins); what to tell
        the person. The message is edited with the outcome either way."""
        person = f"telegram user {user_id}" + (f" @{username}" if username else "")
        try:
            await self.client.answer_decision(
                post.run_id, choice, post.request_id, idempotency_key=key, person=person
            )
            said = f"Recorded: {_label(post.choices, choice)}"
        except ClientError as exc:
            if exc.code not in ("decisionResolved", "requestClosed", "invalidTransition"):
                raise
            said = f"Not recorded: {exc.message}"
        await self.settle(post)
        return said[:190]

    async def _refuse(self, post: Post, user_id: int, username: str | None, key: str) -> None:
        person = f"telegram user {user_id}" + (f" @{username}" if username else "")
        try:
            await self.client.call(
                "decision.refuse",
                {
                    "requestId": post.request_id,
                    "seat": f"channel:{self.name}",
                    "person": person,
                    "reason": "not on the channel's allow list",
                },
                run_id=post.run_id,
                idempotency_key=key,
            )
        except ClientError as exc:
            if isinstance(exc, SERVER_GONE):
                raise
            log.warning("channel %s: a refusal was not recorded: %s", self.name, exc.message)

    # --- deliveries ----------------------------------------------------------------------

    async def post_decisions(self, items: list[dict[str, Any]]) -> None:
        """Post each open decision not posted before (at most once: the post is recorded
        before it is sent)."""
        for item in items:
            request_id = str(item["requestId"])
            if self.ledger.post_of_request(request_id) is not None:
                continue
            try:
                found = await self.client.call("decision.get", {"requestId": request_id})
            except ClientError:
                continue  # gone since it was listed
            shown = {**item, "timeoutChoice": found["decision"].get("timeoutChoice")}
            async with self.lock:
                if self.ledger.post_of_request(request_id) is not None:
                    continue
                post = self.ledger.new_post(request_id, str(item["runId"]), self.chat)
                request = item.get("request") if isinstance(item.get("request"), dict) else {}
                assert isinstance(request, dict)
                post.choices = [c for c in request.get("choices") or [] if isinstance(c, dict)]
                post.text = decision_text(shown, self.link(str(item["runId"])))
                self.ledger.save()
                buttons = [
                    [InlineKeyboardButton(str(c.get("label") or c.get("id")),
                                          callback_data=f"{post.key}:{i}")]
                    for i, c in enumerate(post.choices)
                ]  # fmt: skip
                buttons.append(
                    [InlineKeyboardButton("Type the answer", callback_data=f"{post.key}:t")]
                )
                markup = InlineKeyboardMarkup(buttons)
                text = post.text

                async def send(text: str = text, markup: InlineKeyboardMarkup = markup) -> Message:
                    return await self.bot.send_message(
                        chat_id=self.chat, text=text, reply_markup=markup
                    )

                try:
                    sent = await self.call("sendMessage", send)
                except (TelegramError, OSError) as exc:
                    post.settled = True  # tried once; never sent twice
                    self.ledger.save()
                    self.status.set(self.name, "failing", self._problem(exc))
                    continue
                post.message_id = sent.message_id
                self.ledger.save()

    async def settle_all(self) -> None:
        """Edit every posted decision that was resolved since (by any seat)."""
        for post in [p for p in self.ledger.posts.values() if not p.settled]:
            async with self.lock:
                await self.settle(post)

    async def settle(self, post: Post) -> None:
        """Edit `post` with its decision's outcome once it is resolved."""
        if post.settled or post.message_id is None:
            return
        try:
            found = (await self.client.call("decision.get", {"requestId": post.request_id}))[
                "decision"
            ]
        except ClientError as exc:
            if exc.code != "notFound":
                raise
            found = {"status": "resolved", "resolution": "cancelled"}
        if found.get("status") != "resolved":
            return
        message_id = post.message_id
        try:
            await self.call(
                "editMessageText",
                lambda: self.bot.edit_message_text(
                    outcome_text(post, found), chat_id=post.chat, message_id=message_id
                ),
            )
        except TelegramError as exc:
            self.status.set(self.name, "failing", self._problem(exc))
        post.settled = True
        self.ledger.save()

    async def send_notices(self, items: list[tuple[str, tuple[str, str]]]) -> None:
        """Send notices as messages, at most once each, digested in a burst."""
        from pi_workflows.channels.notices import batches  # noqa: PLC0415 - a cycle

        async with self.lock:
            fresh = set(self.ledger.claim([k for k, _ in items]))
        todo = [(k, t) for k, t in items if k in fresh]
        if not todo:
            return
        for keys, (title, body) in batches(todo):
            text = f"{title}\n{body}"[:4000]

            async def send(text: str = text) -> Message:
                return await self.bot.send_message(chat_id=self.chat, text=text)

            try:
                await self.call("sendMessage", send)
                state = "sent"
            except (TelegramError, OSError) as exc:
                self.status.set(self.name, "failing", self._problem(exc))
                state = "failed"
            async with self.lock:
                self.ledger.sent(keys, state)

    async def close(self) -> None:
        with contextlib.suppress(TelegramError, NetworkError, OSError, RuntimeError):
            await self.bot.shutdown()


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
