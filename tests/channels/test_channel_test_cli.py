"""`pi-workflows channel test`: one message now, through the real libraries, to the Bot API
stand-in and to a `json://` receiver on loopback; a failure is one line without the token."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from support.bot_api import BotApi
from support.receiver import Receiver
from support.server import wait_for

pytestmark = pytest.mark.timeout(60)

Invoke = Callable[..., Result]
TOKEN = "123456789:AAH-secret_token_value_for_tests_only"  # the conftest's token file holds it


@pytest.fixture
def bot() -> Iterator[BotApi]:
    api = BotApi(TOKEN).start()
    yield api
    api.close()


def test_a_telegram_test_message_is_sent(invoke: Invoke, token_file: Path, bot: BotApi) -> None:
    """The test message reaches the configured chat."""
    added = invoke(
        "channel", "add", "phone", "--kind", "telegram", "--token-file", str(token_file),
        "--chat", "42", "--allow-user", "42", "--api-base", bot.url,
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    result = invoke("channel", "test", "phone")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "channel phone: test message sent"
    [sent] = bot.calls_of("sendMessage")
    assert sent["chat_id"] == 42
    assert sent["text"] == "pi-workflows: a test message from channel phone"


def test_a_refused_token_is_one_line_without_the_token(
    invoke: Invoke, tmp_path: Path, bot: BotApi
) -> None:
    """A token the Bot API refuses fails the test with one line; the token is hidden."""
    wrong = tmp_path / "wrong"
    wrong.write_text("987654321:AAH-another_token_nobody_accepts")
    added = invoke(
        "channel", "add", "phone", "--kind", "telegram", "--token-file", str(wrong),
        "--chat", "42", "--allow-user", "42", "--api-base", bot.url,
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    result = invoke("channel", "test", "phone")
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("pi-workflows: error: channel phone: InvalidToken")
    assert "nobody_accepts" not in result.stderr


# Apprise imports the standard library's deprecated `imghdr` as it sends (this process makes
# warnings errors; the channel process does not).
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_notify_test_message_is_sent(invoke: Invoke) -> None:
    """Apprise posts the test message to a `json://` target on loopback."""
    receiver = Receiver()
    try:
        url = f"json://127.0.0.1:{receiver.port}/hook"
        assert invoke("channel", "add", "desk", "--kind", "notify", "--url", url).exit_code == 0
        result = invoke("channel", "test", "desk")
        assert result.exit_code == 0, result.output
        body = wait_for(lambda: receiver.bodies and receiver.bodies[0], 10, "the test notice")
        assert body["message"] == "pi-workflows: a test message from channel desk"
    finally:
        receiver.close()
