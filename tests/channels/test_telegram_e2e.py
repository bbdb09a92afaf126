"""The Telegram channel end to end: a real server, its real channel process, and the
Bot API stand-in on loopback (`support/bot_api.py`) as Telegram.

Each test configures the channel with the real CLI (`--api-base` pointing at the stand-in),
starts a run whose decision is addressed to an audience with that channel, and acts as a
person in the chat would: presses buttons, replies with text, is refused. Synchronised by
polling state with deadlines (the stand-in's recorded calls, the run's view and history).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.channels.state import read_process

from support.bot_api import BotApi
from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

TOKEN = "123456789:AAH-secret_token_value_for_tests_only"
CHAT = "-100200"
ALLOWED = 42
STRANGER = 666

DECIDE = """
from pi_workflows import Workflow, choice, compute, human_decision, notify, switch, edge

workflow = Workflow(
    "deploy",
    start="ask",
    nodes={
        "ask": human_decision(
            "Deploy to production?",
            [choice("yes", "Deploy"), choice("no", "Hold")],
            details="Version 1.2.3",
            on_timeout=(3600, "no"),
            audience="operator",
        ),
        "ship": compute(lambda ctx: {"shipped": True}),
        "hold": compute(lambda ctx: {"shipped": False}),
        "told": notify("deployment decided", audience="operator"),
    },
    edges=[
        switch("ask", on="$.choice", cases={"yes": "ship", "no": "hold"}),
        edge("ship", "told"),
        edge("hold", "told"),
    ],
)
"""


@pytest.fixture
def bot() -> Iterator[BotApi]:
    api = BotApi(TOKEN).start()
    yield api
    api.close()


def _configure(server: ServerProcess, bot: BotApi, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    added = server.cli(
        "channel", "add", "phone", "--kind", "telegram", "--token-file", str(token_file),
        "--chat", CHAT, "--allow-user", str(ALLOWED), "--api-base", bot.url,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    audience = server.cli("audience", "set", "operator", "--channels", "web,phone")
    assert audience.returncode == 0, audience.stderr


@pytest.fixture
def server(tmp_path: Path, bot: BotApi) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path,
        {"PI_WORKFLOWS_CHANNEL_BACKOFF_SECONDS": "0.2", "PI_WORKFLOWS_CHANNEL_WEB_URL":
         "https://pages.example/ui"},
    )  # fmt: skip
    process.write_workflow("deploy", DECIDE)
    _configure(process, bot, tmp_path)
    process.start()
    yield process
    process.cleanup()


def _posted(bot: BotApi, count: int = 1) -> Any:
    return wait_for(
        lambda: (
            bot.decision_messages()[count - 1] if len(bot.decision_messages()) >= count else None
        ),
        60,
        "the decision's message",
    )


def _history(server: ServerProcess, run_id: str) -> list[dict[str, Any]]:
    with server.client() as client:
        return list(client.call("run.history", {"limit": 1000}, run_id=run_id)["events"])


def _events(server: ServerProcess, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in _history(server, run_id) if e["type"] == kind]


def _edited(bot: BotApi, message_id: int) -> str:
    return str(wait_for(lambda: (bot.sent[message_id].edits or [None])[-1], 60, "the edit"))


def test_a_decision_is_posted_answered_by_a_button_and_edited_with_the_winner(
    server: ServerProcess, bot: BotApi
) -> None:
    """The whole flow: the message shows the workflow, run, title, details, default and a
    link, with one button per choice; an allowed person's press wins, the run follows it,
    the history names the seat and the person, the message shows the winner, and the
    notify addressed to the audience arrives once."""
    run_id = server.start_run("deploy")
    message = _posted(bot)
    assert message.chat_id == CHAT
    for part in ("deploy", run_id, "Deploy to production?", "Version 1.2.3", "Default 'Hold (no)'",
                 f"https://pages.example/ui/runs/{run_id}"):  # fmt: skip
        assert part in message.text
    rows = message.reply_markup["inline_keyboard"]
    assert [row[0]["text"] for row in rows] == ["Deploy", "Hold", "Type the answer"]
    bot.press(ALLOWED, message.message_id, rows[0][0]["callback_data"])
    view = server.wait_status(run_id, "completed")
    assert view["status"] == "completed"
    [answered] = _events(server, run_id, "interaction.answered")
    assert answered["data"]["choice"] == "yes"
    assert answered["data"]["person"] == f"telegram user {ALLOWED} @user{ALLOWED}"
    assert answered["actor"] == "client:channels"
    edit = _edited(bot, message.message_id)
    assert "Decided: Deploy (yes), by client:channels (telegram user 42 @user42)" in edit
    wait_for(lambda: bot.callback_answers, 30, "the button's answer")
    assert bot.callback_answers[0]["text"] == "Recorded: Deploy (yes)"
    wait_for(lambda: any("deployment decided" in t for t in bot.texts()), 30, "the notice")
    assert sum("deployment decided" in t for t in bot.texts()) == 1
    assert TOKEN not in (server.home / "logs" / "channels.log").read_text()


def test_a_person_not_allowed_is_refused_and_the_attempt_is_in_the_history(
    server: ServerProcess, bot: BotApi
) -> None:
    """A press and a reply from a user id not on the allow list change nothing: each gets a
    refusal, and each attempt is a `decision.refused` event naming the person."""
    run_id = server.start_run("deploy")
    message = _posted(bot)
    bot.press(STRANGER, message.message_id, message.reply_markup["inline_keyboard"][0][0][
        "callback_data"])  # fmt: skip
    bot.reply(STRANGER, message.message_id, "yes")
    refused = wait_for(
        lambda: (found := _events(server, run_id, "decision.refused")) and len(found) == 2
        and found, 60, "two refusals in the history",
    )  # fmt: skip
    assert {e["data"]["person"] for e in refused} == {f"telegram user {STRANGER} @user{STRANGER}"}
    assert {e["data"]["seat"] for e in refused} == {"channel:phone"}
    wait_for(lambda: any("may not answer" in t for t in bot.texts()), 30, "the refusal reply")
    assert any("may not answer" in str(a.get("text")) for a in bot.callback_answers)
    assert server.run(run_id)["status"] == "waiting"
    assert not _events(server, run_id, "interaction.answered")
    assert server.diagnose() == [], "refusals are presentation bookkeeping only"


def test_a_typed_answer_through_the_reply_prompt(server: ServerProcess, bot: BotApi) -> None:
    """ "Type the answer" sends a reply prompt; a reply naming a choice by its label answers
    (a reply that names none is told the choices and changes nothing)."""
    run_id = server.start_run("deploy")
    message = _posted(bot)
    bot.press(ALLOWED, message.message_id, message.reply_markup["inline_keyboard"][2][0][
        "callback_data"])  # fmt: skip
    prompt = wait_for(
        lambda: next((s for s in list(bot.sent.values()) if s.text.startswith("Reply with")),
                     None), 30, "the reply prompt",
    )  # fmt: skip
    assert prompt.reply_markup == {"force_reply": True, "selective": True}
    bot.reply(ALLOWED, prompt.message_id, "maybe")
    wait_for(lambda: any("not one of the choices" in t for t in bot.texts()), 30, "the hint")
    assert server.run(run_id)["status"] == "waiting"
    bot.reply(ALLOWED, prompt.message_id, "hold")
    server.wait_status(run_id, "completed")
    [answered] = _events(server, run_id, "interaction.answered")
    assert answered["data"]["choice"] == "no"
    assert "Decided: Hold (no)" in _edited(bot, message.message_id)


def test_the_message_is_edited_when_another_seat_won_and_a_late_press_is_told(
    server: ServerProcess, bot: BotApi
) -> None:
    """The CLI answers first: the message is edited to show that winner, and a later press
    in the chat is told the decision was already answered (first valid answer wins)."""
    run_id = server.start_run("deploy")
    message = _posted(bot)
    done = server.cli("decision", "answer", run_id, "--choice", "no")
    assert done.returncode == 0, done.stderr
    edit = _edited(bot, message.message_id)
    assert "Decided: Hold (no), by client:cli" in edit
    bot.press(ALLOWED, message.message_id, message.reply_markup["inline_keyboard"][0][0][
        "callback_data"])  # fmt: skip
    wait_for(lambda: bot.callback_answers, 30, "the late press's answer")
    assert "Not recorded" in bot.callback_answers[0]["text"]
    assert "already answered 'no' by client:cli" in bot.callback_answers[0]["text"]
    answered = _events(server, run_id, "interaction.answered")
    assert [e["data"]["choice"] for e in answered] == ["no"]


def test_a_429_retry_after_is_waited_out(server: ServerProcess, bot: BotApi) -> None:
    """sendMessage answered 429 with retry_after 1 is made again after that second, and the
    decision's message arrives once."""
    bot.limit_next("sendMessage", 1)
    server.start_run("deploy")
    message = _posted(bot)
    [(method, limited_at)] = bot.limited_answered
    assert method == "sendMessage"
    sends = bot.calls_of("sendMessage")
    assert len(sends) == 2
    assert len(bot.decision_messages()) == 1
    assert message.message_id in bot.sent
    del limited_at


def _channel_pid(server: ServerProcess) -> int:
    record = wait_for(
        lambda: (r := read_process(server.home)).get("state") == "running" and r, 30,
        "the channel process to run",
    )  # fmt: skip
    return int(record["pid"])


def test_the_channel_process_sigkilled_mid_poll_loses_no_update_and_handles_none_twice(
    server: ServerProcess, bot: BotApi
) -> None:
    """Updates pushed while the channel process is SIGKILLed in its long poll are handled
    once by the next one: each refusal is in the history exactly once, the decision is
    answered once, and every update is confirmed by the offset."""
    run_id = server.start_run("deploy")
    message = _posted(bot)
    data = message.reply_markup["inline_keyboard"][0][0]["callback_data"]
    first = _channel_pid(server)
    polls = bot.polls
    wait_for(lambda: bot.polls > polls, 30, "a long poll under way")
    os.kill(first, signal.SIGKILL)
    ids = [bot.press(STRANGER, message.message_id, data) for _ in range(3)]
    ids.append(bot.press(ALLOWED, message.message_id, data))
    wait_for(lambda: _channel_pid(server) != first, 30, "a new channel process")
    server.wait_status(run_id, "completed")
    refused = wait_for(
        lambda: len(found := _events(server, run_id, "decision.refused")) >= 3 and found, 30,
        "the refusals",
    )  # fmt: skip
    assert len(refused) == 3
    assert len(_events(server, run_id, "interaction.answered")) == 1
    wait_for(lambda: set(ids) <= set(bot.confirmed), 60, "every update confirmed")
    assert read_process(server.home)["restarts"] >= 1
    ledger = json.loads((server.home / "channels" / "ledger" / "phone.json").read_text())
    assert ledger["offset"] == ids[-1] + 1


def test_an_update_held_when_the_server_dies_is_handled_by_the_next_process(
    server: ServerProcess, bot: BotApi
) -> None:
    """Crash window: the channel process has received a stranger's press (frozen after its
    long poll answered) when its server is SIGKILLed; handling it cannot reach the server,
    so the update must not be passed: the next server's channel process handles it, and the
    refusal is in the history exactly once (none lost, none twice)."""
    run_id = server.start_run("deploy")
    message = _posted(bot)
    data = message.reply_markup["inline_keyboard"][0][0]["callback_data"]
    first = _channel_pid(server)
    polls = bot.polls
    wait_for(lambda: bot.polls > polls, 30, "a long poll under way")
    os.kill(first, signal.SIGSTOP)
    try:
        update = bot.press(STRANGER, message.message_id, data)
        wait_for(lambda: update in bot.updates_seen()[1], 30, "the update delivered")
        server.kill()
    finally:
        os.kill(first, signal.SIGCONT)
    wait_for(lambda: not _alive(first), 60, "the first channel process to end")
    server.start()
    wait_for(lambda: update in bot.updates_seen()[2], 60, "the update confirmed")
    refused = wait_for(
        lambda: _events(server, run_id, "decision.refused"), 60, "the refusal in the history"
    )
    assert [e["data"]["person"] for e in refused] == [f"telegram user {STRANGER} @user{STRANGER}"]
    assert server.run(run_id)["status"] == "waiting"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ")[-1][:1] != "Z"


def test_the_server_restarted_with_a_decision_outstanding(
    server: ServerProcess, bot: BotApi
) -> None:
    """A server stopped with the decision posted and unanswered: the next server's channel
    process posts nothing again and a press answers the same decision."""
    run_id = server.start_run("deploy")
    message = _posted(bot)
    server.stop()
    server.start()
    _channel_pid(server)
    bot.press(ALLOWED, message.message_id, message.reply_markup["inline_keyboard"][1][0][
        "callback_data"])  # fmt: skip
    server.wait_status(run_id, "completed")
    assert "Decided: Hold (no)" in _edited(bot, message.message_id)
    assert len(bot.decision_messages()) == 1, "the decision is never posted twice"


def test_channel_list_says_why_a_channel_fails(
    server: ServerProcess, bot: BotApi, tmp_path: Path
) -> None:
    """A channel whose Bot API refuses the token is `failing` with the reason in `channel
    list` (never the token), while runs go on."""
    bad = tmp_path / "bad-token"
    bad.write_text("987654321:AAH-another_token_nobody_accepts")
    added = server.cli(
        "channel", "add", "wrong", "--kind", "telegram", "--token-file", str(bad),
        "--chat", CHAT, "--allow-user", "1", "--api-base", bot.url,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr

    def failing() -> dict[str, Any] | None:
        listed = server.cli("channel", "list", "--json")
        rows = {r["name"]: r for r in json.loads(listed.stdout)}
        return rows["wrong"] if rows["wrong"]["state"] == "failing" else None

    row = wait_for(failing, 60, "the wrong channel to fail")
    assert "nobody_accepts" not in json.dumps(row)
    assert row["detail"]
    moved = server.cli("audience", "set", "operator", "--channels", "web,phone,wrong")
    assert moved.returncode == 0, moved.stderr
    run_id = server.start_run("deploy")
    message = _posted(bot)
    shown = wait_for(
        lambda: "wrong: failing" in (out := server.cli("run", "show", run_id).stdout)
        and "phone: ok" in out and out,
        60, "run show to name the failing channel",
    )  # fmt: skip
    assert "InvalidToken" in shown
    assert "nobody_accepts" not in shown
    bot.press(ALLOWED, message.message_id, message.reply_markup["inline_keyboard"][0][0][
        "callback_data"])  # fmt: skip
    server.wait_status(run_id, "completed")
