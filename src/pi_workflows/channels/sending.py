"""Sending one message through a channel: the Telegram bot and Apprise, and what a failure
says.

Runs in the channel process and in `pi-workflows channel test`. Imports the optional
extra's libraries (python-telegram-bot, Apprise); nothing else of pi-workflows does. A
failure is one line that never holds a secret (`scrubbed` removes the token and the URL
from a library's message), and the loggers that would print a request URL with the bot
token in it (`httpx`, `telegram`) are kept at WARNING (`quiet_libraries`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

import apprise
from telegram import Bot
from telegram.request import HTTPXRequest

from pi_workflows.channels.config import ChannelConfig

__all__ = ["TEST_TEXT", "bot_for", "notify", "quiet_libraries", "scrubbed", "send_test"]

TEST_TEXT: Final = "pi-workflows: a test message from channel {name}"
TELEGRAM_API: Final = "https://api.telegram.org/bot"
POLL_SECONDS: Final = 25
"""The long poll of `getUpdates` (Telegram holds the request open until an update or this)."""


def quiet_libraries() -> None:
    """Keep the HTTP libraries' request lines (which hold the bot token) out of any log."""
    for name in ("httpx", "httpcore", "telegram", "apprise"):
        logging.getLogger(name).setLevel(logging.WARNING)


def scrubbed(text: str, channel: ChannelConfig) -> str:
    """`text` without the channel's secrets, on one line, bounded."""
    for secret in (channel.token, channel.url):
        if secret:
            text = text.replace(secret, "(hidden)")
    line = " ".join(text.split())
    return line if len(line) <= 300 else line[:299] + "…"


def bot_for(channel: ChannelConfig) -> Bot:
    """The channel's bot; its HTTP client waits longer than the long poll."""
    assert channel.token is not None
    request = HTTPXRequest(connect_timeout=10.0, read_timeout=POLL_SECONDS + 10.0)
    return Bot(
        channel.token,
        base_url=channel.api_base or TELEGRAM_API,
        request=request,
        get_updates_request=HTTPXRequest(connect_timeout=10.0, read_timeout=POLL_SECONDS + 10.0),
    )


async def notify(channel: ChannelConfig, title: str, body: str) -> str | None:
    """Send one notice through Apprise (blocking, in a worker thread); the problem or None."""
    assert channel.url is not None
    url = channel.url

    def send() -> str | None:
        sender: Any = apprise.Apprise()
        if not sender.add(url):
            return "Apprise does not understand the channel's URL; check it (channel show)"
        return None if sender.notify(title=title, body=body) else "Apprise could not deliver it"

    return await asyncio.to_thread(send)


async def send_test(channel: ChannelConfig) -> str | None:
    """Send the test message; the problem (one scrubbed line) or None."""
    quiet_libraries()
    text = TEST_TEXT.format(name=channel.name)
    try:
        if channel.kind == "notify":
            return await notify(channel, "pi-workflows", text)
        bot = bot_for(channel)
        async with bot:
            await bot.send_message(chat_id=channel.chat or "", text=text)
    except Exception as exc:
        return scrubbed(f"{type(exc).__name__}: {exc}", channel)
    return None
