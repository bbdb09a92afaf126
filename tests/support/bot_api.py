"""The Telegram Bot API stand-in the channel tests use: it lives in the campaign package
(`campaign/bot_api.py`), which drives it too, so both import one implementation."""

from __future__ import annotations

from campaign.bot_api import BOT_ID, BOT_USER, BotApi, Sent

__all__ = ["BOT_ID", "BOT_USER", "BotApi", "Sent"]
