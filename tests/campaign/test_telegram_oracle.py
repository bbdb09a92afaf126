"""The Telegram seat's oracle (`campaign/telegram_oracle.py`, `check`) on crafted facts: a decision
won by the allowed user's press, with a stranger refused first and a second press told it
was too late, passes; each broken promise (two winners, an answer from a user not allowed,
an answer nobody pressed, a stranger's press missing from the history or in it twice, an
update lost or handled twice, a ledger offset short of the last update, a message never
edited with the winner, a decision posted twice) is caught with its own kind."""

from __future__ import annotations

import dataclasses

from campaign.leaks import LeakScanner
from campaign.telegram_oracle import Decision, Facts, Press, RunFacts, Seated, check, person

ALLOWED = 4242
STRANGER = 666666
RUN = "run_tg1"
REQUEST = "req_tg1"
TEXT = f"deploy {RUN}\nDeploy?"
CHAT_WON = f"Decided: ship, by client:channels ({person(ALLOWED)})"


def _facts() -> Facts:
    """A clean seed: the stranger pressed (update 1001, refused), the allowed user pressed
    `ship` (1002, the winner) and `hold` (1003, too late); the message shows the winner."""
    return Facts(
        allowed=ALLOWED,
        stranger=STRANGER,
        runs={RUN: RunFacts(None, "completed", {"choice": "ship", "decidedBy": "person"})},
        presses=[
            Press(1001, STRANGER, 7, RUN, "ship"),
            Press(1002, ALLOWED, 7, RUN, "ship"),
            Press(1003, ALLOWED, 7, RUN, "hold"),
        ],
        pushed=[1001, 1002, 1003],
        delivered=[1001, 1002, 1003],
        confirmed=[1001, 1002, 1003],
        messages={7: (TEXT, [f"{TEXT}\n\n{CHAT_WON}"])},
        posts={7: REQUEST},
        offset=1004,
        decisions={
            REQUEST: Decision(
                REQUEST, RUN, "answered", "ship", f"client:channels ({person(ALLOWED)})"
            )
        },
        seated=[
            Seated(
                "decision.refused",
                RUN,
                REQUEST,
                None,
                person(STRANGER),
                "channels",
                "telegram:phone:1001",
            ),
            Seated(
                "interaction.answered",
                RUN,
                REQUEST,
                "ship",
                person(ALLOWED),
                "channels",
                "telegram:phone:1002",
            ),
        ],
        receipts=["telegram:phone:1001", "telegram:phone:1002", "telegram:phone:1003"],
    )


def _kinds(facts: Facts) -> list[str]:
    return [kind for kind, _, _ in check(facts)]


def _answered(facts: Facts) -> Seated:
    return next(s for s in facts.seated if s.type == "interaction.answered")


def test_a_decision_won_in_the_chat_with_a_stranger_refused_passes() -> None:
    """The clean facts have no violation."""
    assert check(_facts()) == []


def test_the_operator_winning_a_race_passes_and_its_edit_names_the_cli() -> None:
    """The operator's CLI answer won the race: the chat's presses were too late."""
    facts = _facts()
    facts.runs[RUN] = RunFacts("hold", "completed", {"choice": "hold", "decidedBy": "person"})
    facts.decisions[REQUEST] = Decision(REQUEST, RUN, "answered", "hold", "client:cli")
    facts.seated[1] = Seated("interaction.answered", RUN, REQUEST, "hold", None, "cli", "k-1")
    facts.messages[7] = (TEXT, [f"{TEXT}\n\nDecided: hold, by client:cli"])
    assert check(facts) == []


def test_two_accepted_winners_are_a_violation() -> None:
    """The chat's answer won, yet the operator's answer was accepted too."""
    facts = _facts()
    facts.runs[RUN] = dataclasses.replace(facts.runs[RUN], operator="ship")
    assert _kinds(facts) == ["telegramWinner"]
    facts = _facts()
    facts.seated.append(dataclasses.replace(_answered(facts), key="telegram:phone:1003"))
    assert "telegramWinner" in _kinds(facts)


def test_an_outcome_that_is_not_the_winner_is_a_violation() -> None:
    """The run's output says `hold` although the chat's `ship` won."""
    facts = _facts()
    facts.runs[RUN] = RunFacts(None, "completed", {"choice": "hold", "decidedBy": "person"})
    assert _kinds(facts) == ["telegramWinner"]


def test_an_answer_from_a_user_not_allowed_is_a_violation() -> None:
    """The server accepted an answer from the chat that names the stranger."""
    facts = _facts()
    facts.seated[1] = dataclasses.replace(_answered(facts), person=person(STRANGER))
    assert "telegramAllowList" in _kinds(facts)


def test_an_answer_no_press_explains_is_a_violation() -> None:
    """The chat's answer carries an update in which the allowed user pressed another
    choice (1003 was `hold`)."""
    facts = _facts()
    facts.seated[1] = dataclasses.replace(_answered(facts), key="telegram:phone:1003")
    assert _kinds(facts) == ["telegramWinner"]


def test_a_stranger_press_missing_from_the_history_or_in_it_twice_is_a_violation() -> None:
    """Each stranger's press is exactly one `decision.refused` event."""
    facts = _facts()
    del facts.seated[0]
    assert _kinds(facts) == ["telegramRefusal"]
    facts = _facts()
    facts.seated.append(facts.seated[0])
    assert "telegramRefusal" in _kinds(facts)


def test_a_refusal_of_the_allowed_user_is_a_violation() -> None:
    """A refusal that names the allowed user (or no stranger's press) is caught."""
    facts = _facts()
    facts.seated[0] = dataclasses.replace(facts.seated[0], person=person(ALLOWED))
    assert _kinds(facts) == ["telegramRefusal"]


def test_an_update_never_confirmed_or_receipted_without_delivery_is_a_violation() -> None:
    """Every pushed update is confirmed; every receipt names a delivered update."""
    facts = _facts()
    facts.confirmed = [1001, 1002]
    assert _kinds(facts) == ["telegramUpdates"]
    facts = _facts()
    facts.receipts.append("telegram:phone:999")
    assert _kinds(facts) == ["telegramUpdates"]


def test_a_ledger_offset_short_of_the_last_update_is_a_violation() -> None:
    """The channel ledger's offset must be past the last update the stand-in pushed."""
    facts = _facts()
    facts.offset = 1003
    assert _kinds(facts) == ["telegramUpdates"]


def test_a_message_never_edited_with_the_winner_is_a_violation() -> None:
    """A settled decision's message shows its outcome: not left as posted, nor showing
    another winner."""
    facts = _facts()
    facts.messages[7] = (TEXT, [])
    assert _kinds(facts) == ["telegramEdit"]
    facts = _facts()
    facts.messages[7] = (TEXT, [f"{TEXT}\n\nDecided: hold, by client:cli"])
    assert _kinds(facts) == ["telegramEdit"]
    facts = _facts()
    facts.posts = {}
    assert _kinds(facts) == ["telegramEdit"]


def test_a_message_whose_id_a_kill_kept_from_the_ledger_is_left_unedited() -> None:
    """The documented window (docs/channels.md): the channel process killed between sending
    a decision and saving its message id leaves a post without one, never edited and never
    sent again. That is no violation; a message with no post at all still is."""
    facts = _facts()
    facts.posts = {}
    facts.messages[7] = (TEXT, [])
    facts.unsaved = {RUN}
    assert check(facts) == []
    facts.unsaved = {"r-other"}
    assert _kinds(facts) == ["telegramEdit"]


def test_a_timed_out_decision_shows_its_default() -> None:
    """A decision decided by its timeout is edited with the default taken."""
    facts = _facts()
    facts.presses, facts.seated = [], []
    facts.pushed = facts.delivered = facts.confirmed = facts.receipts = []
    facts.offset = None
    facts.runs[RUN] = RunFacts(None, "completed", {"choice": "hold", "decidedBy": "timeout"})
    facts.decisions[REQUEST] = Decision(REQUEST, RUN, "timedOut", "hold", None)
    facts.messages[7] = (TEXT, [f"{TEXT}\n\nTimed out: the default hold was taken"])
    assert check(facts) == []
    facts.messages[7] = (TEXT, [f"{TEXT}\n\n{CHAT_WON}"])
    assert _kinds(facts) == ["telegramEdit"]


def test_a_decision_posted_twice_is_a_violation() -> None:
    """One decision, one message."""
    facts = _facts()
    facts.messages[8] = facts.messages[7]
    assert "telegramPostedTwice" in _kinds(facts)


def test_the_bot_token_in_anything_fed_is_a_leak() -> None:
    """The scanner finds a named literal secret wherever it was fed, and only there."""
    scanner = LeakScanner()
    token = "123456789:AAsecret-token-of-the-campaign"
    scanner.secret("the bot token", token)
    scanner.feed("the log channels.log", "polling https://127.0.0.1/bot(hidden)/getUpdates")
    assert scanner.secret_findings() == []
    scanner.feed("CLI stdout of channel list", f'{{"token": "{token}"}}')
    assert scanner.secret_findings() == ["the bot token appears in CLI stdout of channel list"]
