"""The oracle of the campaign's Telegram seat (`telegram.py`): the facts it checks and the
checks.

Runs in the campaign driver, after the seed's last `server stop`. `check` is a pure
function of `Facts` (the scripted chat's presses, what the Bot API stand-in pushed,
delivered, confirmed and shows, the channel's ledger file, and the state database read
read-only by `read_database`), so `tests/campaign/test_telegram_oracle.py` feeds it
crafted facts and asserts it catches each violation.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

CHANNEL: Final = "phone"
"""The seat's channel name: its answers and refusals carry `telegram:phone:<update id>`."""


def person(user_id: int) -> str:
    """How the channel names a chat user (the stand-in gives every user a username)."""
    return f"telegram user {user_id} @user{user_id}"


@dataclass(frozen=True)
class Press:
    """One button press of the scripted chat."""

    update_id: int
    user_id: int
    message_id: int
    run_id: str
    choice: str


@dataclass(frozen=True)
class RunFacts:
    """What the campaign saw of one run whose decision the seat's audience held."""

    operator: str | None  # the choice the server accepted from the operator (CLI/client)
    status: str | None
    output: dict[str, Any] | None


@dataclass(frozen=True)
class Decision:
    """One decision of such a run, as the database recorded it."""

    request_id: str
    run_id: str
    resolution: str | None  # answered | timedOut | cancelled | None (still pending)
    choice: str | None
    resolved_by: str | None


@dataclass(frozen=True)
class Seated:
    """An `interaction.answered` or `decision.refused` event, with the command behind it."""

    type: str
    run_id: str
    request_id: str
    choice: str | None
    person: str | None
    client: str | None  # the command's client id ("channels", "cli", "campaign-N")
    key: str | None  # the command's idempotency key ("telegram:phone:UPDATE" from the chat)


@dataclass
class Facts:
    """Everything `check` needs (gathered by `TelegramSeat.facts`, or crafted by a test)."""

    allowed: int
    stranger: int
    runs: dict[str, RunFacts] = field(default_factory=dict)
    presses: list[Press] = field(default_factory=list)
    pushed: list[int] = field(default_factory=list)
    delivered: list[int] = field(default_factory=list)
    confirmed: list[int] = field(default_factory=list)
    messages: dict[int, tuple[str, list[str]]] = field(default_factory=dict)  # id -> text, edits
    posts: dict[int, str] = field(default_factory=dict)  # message id -> request id (ledger)
    unsaved: set[str] = field(default_factory=set)
    """Runs whose ledger post has no message id: a kill between the send and saving its id
    (posted at most once, docs/channels.md), so that message is never edited."""
    offset: int | None = None  # the channel ledger's update offset
    decisions: dict[str, Decision] = field(default_factory=dict)
    seated: list[Seated] = field(default_factory=list)
    receipts: list[str] = field(default_factory=list)  # keys of the channel's commands


def read_database(database: Path, facts: Facts) -> None:
    """Fill `facts` from the stopped server's database (read-only)."""
    runs = sorted(facts.runs)
    if not runs:
        return
    marks = ",".join("?" * len(runs))
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        for request_id, run_id, resolution, choice, by in conn.execute(
            "SELECT d.decision_id, d.run_id, r.resolution, r.choice_id, r.resolved_by"
            " FROM human_decisions d LEFT JOIN human_decision_resolutions r USING (decision_id)"
            f" WHERE d.run_id IN ({marks})",
            runs,
        ):
            facts.decisions[request_id] = Decision(request_id, run_id, resolution, choice, by)
        for run_id, kind, data_json, client, key in conn.execute(
            "SELECT e.run_id, e.type, e.data_json, c.client_id, c.idempotency_key FROM events e"
            " LEFT JOIN server_commands c ON c.run_id = e.run_id AND c.created_at = e.at"
            " AND c.operation = CASE e.type WHEN 'interaction.answered' THEN 'decision.answer'"
            " ELSE 'decision.refuse' END"
            " WHERE e.type IN ('interaction.answered', 'decision.refused')"
            f" AND e.run_id IN ({marks})"
            " ORDER BY e.event_id",
            runs,
        ):
            data = json.loads(data_json) or {}
            facts.seated.append(
                Seated(
                    kind,
                    run_id,
                    str(data.get("requestId")),
                    data.get("choice"),
                    data.get("person"),
                    client,
                    key,
                )
            )
        facts.receipts = [
            str(row[0])
            for row in conn.execute(
                "SELECT idempotency_key FROM server_commands WHERE client_id = 'channels'"
                " AND idempotency_key LIKE 'telegram:%'"
            )
        ]
    finally:
        conn.close()


def _update_of(key: str | None) -> int | None:
    prefix = f"telegram:{CHANNEL}:"
    if key is None or not key.startswith(prefix) or not key[len(prefix) :].isdigit():
        return None
    return int(key[len(prefix) :])


def expected_outcome(decision: Decision) -> str | None:
    """The line the channel edits a settled decision's message with (None: still open)."""
    if decision.resolution == "answered":
        return f"Decided: {decision.choice}, by {decision.resolved_by}"
    if decision.resolution == "timedOut":
        return f"Timed out: the default {decision.choice} was taken"
    if decision.resolution == "cancelled":
        return "Cancelled with its run"
    return None


def check(facts: Facts) -> list[tuple[str, str, str | None]]:
    """Every violation in `facts`, as (kind, message, run id)."""
    found: list[tuple[str, str, str | None]] = []
    found += _winners(facts)
    found += _refusals(facts)
    found += _updates(facts)
    found += _edits(facts)
    return found


def _winners(facts: Facts) -> list[tuple[str, str, str | None]]:
    """Each decision answered exactly once, by one seat, matching the run's outcome; an
    answer from Telegram only from the allowed user, and only one the chat really sent."""
    found: list[tuple[str, str, str | None]] = []
    allowed = person(facts.allowed)
    for decision in facts.decisions.values():
        run = facts.runs.get(decision.run_id)
        answers = [
            s
            for s in facts.seated
            if s.type == "interaction.answered" and s.request_id == decision.request_id
        ]
        where = decision.run_id
        if len(answers) > 1 or (decision.resolution == "answered") != (len(answers) == 1):
            found.append(
                (
                    "telegramWinner",
                    f"decision {decision.request_id} resolved "
                    f"{decision.resolution} with {len(answers)} answers",
                    where,
                )
            )
            continue
        output = (run.output if run else None) or {}
        if run is not None and run.status == "completed":
            by = "person" if decision.resolution == "answered" else "timeout"
            if (output.get("choice"), output.get("decidedBy")) != (decision.choice, by):
                found.append(
                    (
                        "telegramWinner",
                        f"the run's output {output.get('choice')!r} by "
                        f"{output.get('decidedBy')!r} is not the decision's "
                        f"{decision.choice!r} ({decision.resolution})",
                        where,
                    )
                )
        if not answers:
            if run is not None and run.operator is not None:
                found.append(
                    (
                        "telegramWinner",
                        f"the operator's {run.operator!r} was accepted "
                        f"but the decision was {decision.resolution}",
                        where,
                    )
                )
            continue
        (answer,) = answers
        if answer.client == "channels":
            update = _update_of(answer.key)
            if answer.person != allowed:
                found.append(
                    (
                        "telegramAllowList",
                        f"an answer from Telegram by "
                        f"{answer.person!r}, not the allowed {allowed!r}",
                        where,
                    )
                )
            pressed = [
                p
                for p in facts.presses
                if p.update_id == update
                and p.user_id == facts.allowed
                and p.choice == answer.choice
            ]
            if not pressed:
                found.append(
                    (
                        "telegramWinner",
                        f"Telegram answered {answer.choice!r} (key "
                        f"{answer.key}) but the allowed user pressed no such button",
                        where,
                    )
                )
            if run is not None and run.operator is not None:
                found.append(
                    (
                        "telegramWinner",
                        f"both the chat's {answer.choice!r} and the "
                        f"operator's {run.operator!r} were accepted",
                        where,
                    )
                )
        elif run is not None and run.operator != answer.choice:
            found.append(
                (
                    "telegramWinner",
                    f"answered {answer.choice!r} by {answer.client}, but "
                    f"the operator's accepted answer was {run.operator!r}",
                    where,
                )
            )
    return found


def _refusals(facts: Facts) -> list[tuple[str, str, str | None]]:
    """Every press of the stranger is in its run's history as one refusal (and nothing
    else is)."""
    found: list[tuple[str, str, str | None]] = []
    refused = [s for s in facts.seated if s.type == "decision.refused"]
    by_update = Counter(_update_of(s.key) for s in refused)
    stranger = person(facts.stranger)
    for press in facts.presses:
        if press.user_id != facts.stranger:
            continue
        if by_update[press.update_id] != 1:
            found.append(
                (
                    "telegramRefusal",
                    f"the stranger's press (update {press.update_id}) "
                    f"is in the history {by_update[press.update_id]} times as a refusal",
                    press.run_id,
                )
            )
    strangers = {p.update_id for p in facts.presses if p.user_id == facts.stranger}
    for seen in refused:
        if seen.person != stranger or _update_of(seen.key) not in strangers:
            found.append(
                (
                    "telegramRefusal",
                    f"a refusal of {seen.person!r} (key {seen.key}) "
                    "that no stranger's press explains",
                    seen.run_id,
                )
            )
    return found


def _updates(facts: Facts) -> list[tuple[str, str, str | None]]:
    """No update lost or handled twice: the server's receipts name updates the stand-in
    delivered, each event at most once per update, the ledger's offset is past the last
    update, and the stand-in saw every update confirmed."""
    found: list[tuple[str, str, str | None]] = []
    delivered = set(facts.delivered)
    for key in facts.receipts:
        update = _update_of(key)
        if update is None or update not in delivered:
            found.append(
                ("telegramUpdates", f"a receipt {key} for no update the stand-in delivered", None)
            )
    per_key = Counter(s.key for s in facts.seated if s.client == "channels")
    for handled, count in per_key.items():
        if count > 1:
            found.append(("telegramUpdates", f"update {handled} was handled {count} times", None))
    if facts.pushed:
        lost = sorted(set(facts.pushed) - set(facts.confirmed))
        if lost:
            found.append(("telegramUpdates", f"updates {lost} were never confirmed", None))
        if facts.offset != max(facts.pushed) + 1:
            found.append(
                (
                    "telegramUpdates",
                    f"the channel ledger's offset {facts.offset} is "
                    f"not past the last update {max(facts.pushed)}",
                    None,
                )
            )
    return found


def _edits(facts: Facts) -> list[tuple[str, str, str | None]]:
    """Each decision posted at most once, and its message shows its outcome once settled."""
    found: list[tuple[str, str, str | None]] = []
    per_run = Counter(
        next((r for r in facts.runs if r in text), None) for text, _ in facts.messages.values()
    )
    for run_id, count in per_run.items():
        if run_id is not None and count > 1:
            found.append(("telegramPostedTwice", f"the decision was posted {count} times", run_id))
    for message_id, (text, edits) in facts.messages.items():
        request_id = facts.posts.get(message_id)
        decision = facts.decisions.get(request_id) if request_id else None
        if decision is None:
            if any(r in text for r in facts.unsaved):
                continue  # the documented window: sent, its id never saved
            if any(r in text for r in facts.runs):
                found.append(
                    (
                        "telegramEdit",
                        f"message {message_id} has no post in the channel "
                        "ledger: it can never show its outcome",
                        None,
                    )
                )
            continue
        wanted = expected_outcome(decision)
        if wanted is None:
            continue
        if not edits or wanted not in edits[-1]:
            found.append(
                (
                    "telegramEdit",
                    f"message {message_id} shows "
                    f"{(edits[-1].splitlines()[-1] if edits else 'no outcome')!r}, not "
                    f"{wanted!r}",
                    decision.run_id,
                )
            )
    return found
