"""`pi-workflows audience` and `pi-workflows channel`: the private configuration, kept
user-only, its secrets never printed, bad input refused with one line and nothing stored."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from pi_workflows.channels import config as cfg

pytestmark = pytest.mark.timeout(60)

Invoke = Callable[..., Result]
TOKEN = "123456789:AAH-secret_token_value_for_tests_only"  # the conftest's token file holds it
URL = "json://127.0.0.1:9/hook?secret=apprise-url-secret"


def _add_telegram(invoke: Invoke, token_file: Path, name: str = "phone") -> Result:
    return invoke(
        "channel", "add", name, "--kind", "telegram", "--token-file", str(token_file),
        "--chat", "-100200", "--allow-user", "42", "--allow-user", "43",
    )  # fmt: skip


def _one_error(result: Result) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pi-workflows: error: ")
    return lines[0]


def test_a_telegram_channel_is_stored_user_only_and_never_printed(
    invoke: Invoke, home: Path, token_file: Path
) -> None:
    """`channel add` copies the token into a 0600 file in a 0700 folder; add, list, show and
    their --json print it redacted."""
    added = _add_telegram(invoke, token_file)
    assert added.exit_code == 0, added.output
    folder = home / "channels"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    stored = folder / "config.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    data = json.loads(stored.read_text())
    assert data["channels"]["phone"]["token"] == TOKEN
    assert data["channels"]["phone"]["allowUsers"] == [42, 43]
    printed = [added.output]
    for args in (["channel", "list"], ["channel", "list", "--json"], ["channel", "show", "phone"],
                 ["channel", "show", "phone", "--json"]):  # fmt: skip
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        printed.append(result.output)
    assert all(TOKEN not in text and "secret_token" not in text for text in printed)
    shown = json.loads(invoke("channel", "show", "phone", "--json").output)
    assert shown["token"] == "(set, hidden)"
    assert shown["chat"] == "-100200"
    assert shown["state"] == "not started"


def test_a_notify_channel_url_is_redacted(invoke: Invoke, home: Path) -> None:
    """An Apprise URL may hold credentials: only its scheme is printed."""
    result = invoke("channel", "add", "desk", "--kind", "notify", "--url", URL, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["url"] == "json://(hidden)"
    listed = invoke("channel", "list")
    assert "apprise-url-secret" not in listed.output
    assert cfg.load(home).channels["desk"].url == URL


def test_audiences_name_seats_and_channels(invoke: Invoke, home: Path, token_file: Path) -> None:
    """`audience set` stores pi, web and channels (KIND:NAME or NAME); `audience list` shows
    them and the default audience (the origin session and the page)."""
    assert _add_telegram(invoke, token_file).exit_code == 0
    result = invoke("audience", "set", "operator", "--channels", "pi, telegram:phone,web,phone")
    assert result.exit_code == 0, result.output
    assert cfg.load(home).audience("operator").seats == ("pi", "phone", "web")
    listed = json.loads(invoke("audience", "list", "--json").output)
    assert listed == [
        {"audience": "default", "channels": ["pi", "web"]},
        {"audience": "operator", "channels": ["pi", "phone", "web"]},
    ]
    assert cfg.load(home).audience("gone").name == "default", "an unknown audience: the default"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["audience", "set", "ops", "--channels", "pi,nowhere"], "'nowhere' is no channel"),
        (["audience", "set", "ops", "--channels", "notify:phone"], "'notify:phone' is no channel"),
        (["audience", "set", "Bad Name", "--channels", "pi"], "audience name 'Bad Name'"),
        (["audience", "set", "ops", "--channels", ","], "--channels names no seat"),
        (["channel", "add", "x", "--kind", "telegram", "--chat", "1", "--allow-user", "1"],
         "needs --token-file"),
        (["channel", "add", "x", "--kind", "telegram", "--token-file", "/nonexistent/t",
          "--chat", "1", "--allow-user", "1"], "cannot read the token file"),
        (["channel", "add", "x", "--kind", "notify"], "needs --url"),
        (["channel", "add", "x", "--kind", "notify", "--url", "not a url"], "is not a URL"),
        (["channel", "add", "x", "--kind", "notify", "--url", "json://h", "--chat", "1"],
         "are for telegram"),
        (["channel", "add", "web", "--kind", "notify", "--url", "json://h"], "built-in seat"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_stores_nothing(
    invoke: Invoke, home: Path, token_file: Path, args: list[str], said: str
) -> None:
    """Each refusal names what is wrong, exits non-zero and leaves the configuration as it was."""
    assert _add_telegram(invoke, token_file).exit_code == 0
    before = (home / "channels" / "config.json").read_bytes()
    result = invoke(*args)
    assert result.exit_code != 0
    assert said in _one_error(result)
    assert (home / "channels" / "config.json").read_bytes() == before


def test_a_bad_token_file_and_chat_are_refused(invoke: Invoke, home: Path, tmp_path: Path) -> None:
    """A file that holds no bot token, or a chat that is no id, is refused before storing."""
    wrong = tmp_path / "wrong"
    wrong.write_text("not a token\n")
    result = invoke(
        "channel", "add", "x", "--kind", "telegram", "--token-file", str(wrong),
        "--chat", "1", "--allow-user", "1",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "does not hold a bot token" in _one_error(result)
    assert "not a token" not in result.stderr
    good = tmp_path / "good"
    good.write_text(TOKEN)
    result = invoke(
        "channel", "add", "x", "--kind", "telegram", "--token-file", str(good),
        "--chat", "nobody", "--allow-user", "1",
    )  # fmt: skip
    assert "is not a chat id" in _one_error(result)
    assert not (home / "channels" / "config.json").exists()


def test_a_channel_in_an_audience_is_not_removed(
    invoke: Invoke, home: Path, token_file: Path
) -> None:
    """`channel remove` is refused while an audience names the channel, allowed after."""
    assert _add_telegram(invoke, token_file).exit_code == 0
    assert invoke("audience", "set", "ops", "--channels", "phone").exit_code == 0
    refused = invoke("channel", "remove", "phone")
    assert refused.exit_code == 1
    assert "is in audience(s) ops" in _one_error(refused)
    assert "phone" in cfg.load(home).channels
    assert invoke("audience", "set", "ops", "--channels", "pi").exit_code == 0
    removed = invoke("channel", "remove", "phone")
    assert removed.exit_code == 0, removed.output
    assert cfg.load(home).channels == {}
    assert invoke("channel", "show", "phone").exit_code == 1
    assert _add_telegram(invoke, token_file).exit_code == 0, "the name is free again"
