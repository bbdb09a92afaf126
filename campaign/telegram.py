"""The campaign's Telegram seat: a channel against the Bot API stand-in on loopback, a
scripted chat, SIGKILLs of the channel process, and the oracle's checks of what it did.

Runs in the campaign driver; the stand-in (`bot_api.py`) serves from a thread of it. A seed
whose plan has a Telegram seat (`plan.PlannedTelegram`, stream `telegram`) configures the
channel `phone` with the real CLI (`channel add --kind telegram --token-file ...
--api-base <stand-in>`) and the audience `ops` that every `deploy` decision names. For each
decision message the stand-in receives, the chat follows a script drawn from the stream
`telegram:press:<run index>`:

- `race` (40%): the allowed user presses and the operator answers by the CLI or the client
  in the same tick: the first valid answer wins, the other is refused naming the winner;
- `chat` (40%): the allowed user presses a button after a delay; the operator leaves the
  decision to the chat (and answers at the desk only if it is still open 20 s later);
- `desk` (20%): the operator answers as it does every decision; sometimes the allowed user
  presses late, once the message shows the winner (told it was already answered).

Sometimes (40%) a stranger (not on the allow list) presses first, and sometimes (30%) the
allowed user presses twice (the second press the other choice). The channel process is
SIGKILLed at the planned moments (`killChannel`, recorded like every fault); the server
restarts it.

After the seed's last stop, `facts` gathers what the oracle checks (`telegram_oracle.py`)
from the stand-in, the channel's ledger file and the state database (read-only).
"""

from __future__ import annotations

import enum
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from campaign.bot_api import BotApi
from campaign.plan import PlannedTelegram, rng_for
from campaign.telegram_oracle import CHANNEL, Facts, Press, RunFacts, read_database

if TYPE_CHECKING:
    from campaign.context import RunTrack, SeedContext

AUDIENCE: Final = "ops"
WORKFLOWS: Final = frozenset({"deploy", "deploy-t"})
"""The workflows whose decision names the `ops` audience (`campaign/workflows.py`)."""
FALLBACK_SECONDS: Final = 20.0
"""A decision left to the chat that is still open this long is answered at the desk."""
SETTLE_SECONDS: Final = 60.0
"""How long the seed waits, after quiesce, for every update to be confirmed and every
settled decision's message to show its outcome."""
KILL_WAIT_SECONDS: Final = 10.0
"""How long a due `killChannel` waits for a running channel process before it is skipped."""


class Script(enum.StrEnum):
    """Who answers a decision posted to the chat."""

    CHAT = "chat"  # the allowed user presses; the operator leaves it to the chat
    RACE = "race"  # the allowed user presses and the operator answers in the same tick
    DESK = "desk"  # the operator answers; the allowed user may press late


@dataclass(frozen=True)
class Plan:
    """How the chat and the operator treat one run's decision (stream
    `telegram:press:<index>`)."""

    script: Script
    choice: str  # what the allowed user presses: "ship" or "hold"
    stranger_first: bool
    twice: bool  # the allowed user presses again, the other choice
    delay: float  # seconds after the message arrived
    late: bool  # `desk`: the allowed user presses once the message shows the winner


def plan_of(seed: int, index: int) -> Plan:
    """The chat's plan for the decision of planned run `index`."""
    rng = rng_for(seed, "telegram", "press", index)
    draw = rng.random()
    script = Script.RACE if draw < 0.4 else Script.CHAT if draw < 0.8 else Script.DESK
    stranger_first = rng.random() < 0.4
    twice = rng.random() < 0.3
    return Plan(
        script=script,
        choice="ship" if rng.random() < 0.6 else "hold",
        stranger_first=stranger_first,
        twice=twice,
        delay=round(rng.uniform(0.0, 3.0), 2),
        late=rng.random() < 0.5,
    )


@dataclass
class _Posted:
    """A decision message the chat saw, and how far its plan went."""

    message_id: int
    run_id: str
    plan: Plan
    seen_at: float
    buttons: dict[str, str]  # choice id -> callback data
    done: bool = False
    raced: bool = False  # the allowed user pressed in a race: the operator answers now


class TelegramSeat:
    """The seed's Telegram seat: the stand-in, the channel's set-up, the chat and the kills."""

    def __init__(self, plan: PlannedTelegram, seed: int, root: Path) -> None:
        self.plan = plan
        self.seed = seed
        self.root = root
        self.bot = BotApi(plan.token)
        self.posted: dict[int, _Posted] = {}
        self.presses: list[Press] = []
        self.kills = 0  # planned kills done (fired or skipped)
        self.configured = False

    def start(self) -> None:
        """Serve the stand-in on 127.0.0.1."""
        self.bot.start()

    def close(self) -> None:
        """Stop the stand-in."""
        self.bot.close()

    def configure(self, ctx: SeedContext) -> None:
        """`channel add` and `audience set` with the real CLI, before any run starts."""
        token_file = self.root / "bot-token"
        token_file.write_text(self.plan.token + "\n")
        os.chmod(token_file, 0o600)
        added = ctx.surfaces.cli(
            "channel",
            "add",
            CHANNEL,
            "--kind",
            "telegram",
            "--token-file",
            str(token_file),
            "--chat",
            self.plan.chat,
            "--allow-user",
            str(self.plan.allowed),
            "--api-base",
            self.bot.url,
            "--json",
        )
        audience = ctx.surfaces.cli(
            "audience", "set", AUDIENCE, "--channels", self.plan.seats, "--json"
        )
        for what, (code, _, err) in (("channel add", added), ("audience set", audience)):
            if code != 0:
                ctx.violation("telegramSetup", f"{what} exited {code}: {err}")
                return
        self.configured = True
        ctx.note(f"telegram seat: channel {CHANNEL}, audience {AUDIENCE} -> {self.plan.seats}")

    @staticmethod
    def addresses(track: RunTrack) -> bool:
        """The run's decision is addressed to the seat's audience."""
        return TelegramSeat.addresses_workflow(track.planned.workflow)

    @staticmethod
    def addresses_workflow(workflow: str) -> bool:
        """The workflow's decision names the seat's audience."""
        return workflow in WORKFLOWS

    # --- every tick -----------------------------------------------------------------------

    def tick(self, ctx: SeedContext) -> None:
        """Kill the channel process when due; let the chat act on the messages it has."""
        if not self.configured:
            return
        record = _read_json(ctx.home / "channels" / "process.json")
        if record.get("state") == "running" and record.get("pid"):
            # Known by its start identity: it must be gone after the last `server stop`.
            ctx.processes.note(int(record["pid"]), "channel")
        self._kill(ctx)
        for sent in self.bot.decision_messages():
            posted = self.posted.get(sent.message_id)
            if posted is None:
                track = next((t for t in ctx.tracks if t.run_id and t.run_id in sent.text), None)
                if track is None:
                    continue
                assert track.run_id is not None
                buttons = {}
                for row in (sent.reply_markup or {}).get("inline_keyboard", []):
                    buttons[str(row[0]["text"])] = str(row[0]["callback_data"])
                posted = _Posted(
                    sent.message_id,
                    track.run_id,
                    plan_of(ctx.seed, track.planned.index),
                    time.monotonic(),
                    buttons,
                )
                self.posted[sent.message_id] = posted
                ctx.note(f"telegram: decision of {track.run_id} posted ({posted.plan})")
            if not posted.done:
                self._chat(ctx, posted)

    def _chat(self, ctx: SeedContext, posted: _Posted) -> None:
        plan = posted.plan
        if plan.script is Script.DESK:
            if not plan.late:
                posted.done = True
            elif self.bot.edits_of(posted.message_id):
                self._press(ctx, posted, self.plan.allowed, plan.choice)
                posted.done = True
            return
        if time.monotonic() - posted.seen_at < plan.delay:
            return
        if plan.stranger_first:
            self._press(ctx, posted, self.plan.stranger, plan.choice)
        self._press(ctx, posted, self.plan.allowed, plan.choice)
        if plan.twice:
            self._press(ctx, posted, self.plan.allowed, "hold" if plan.choice == "ship" else "ship")
        posted.raced = plan.script is Script.RACE
        posted.done = True

    def _press(self, ctx: SeedContext, posted: _Posted, user_id: int, choice: str) -> None:
        data = posted.buttons.get(choice)
        if data is None:
            ctx.violation(
                "telegramMessage", f"the decision message has no {choice!r} button", posted.run_id
            )
            return
        update_id = self.bot.press(user_id, posted.message_id, data)
        self.presses.append(Press(update_id, user_id, posted.message_id, posted.run_id, choice))
        ctx.note(f"telegram: user {user_id} pressed {choice} for {posted.run_id} ({update_id})")

    def _kill(self, ctx: SeedContext) -> None:
        if self.kills >= len(self.plan.kills) or ctx.elapsed() < self.plan.kills[self.kills]:
            return
        record = _read_json(ctx.home / "channels" / "process.json")
        pid = int(record.get("pid") or 0) if record.get("state") == "running" else 0
        began = round(time.time() * 1000)
        hit = bool(pid) and ctx.processes.note(pid, "channel") is not None
        hit = hit and ctx.processes.send(pid, signal.SIGKILL)
        late = ctx.elapsed() > self.plan.kills[self.kills] + KILL_WAIT_SECONDS
        if not hit and not late:
            return  # not running now (restarting, or the server is down): wait for it
        entry: dict[str, Any] = {
            "index": 1000 + self.kills,
            "kind": "killChannel",
            "at": round(ctx.elapsed(), 2),
            "window": None,
            "detail": f"SIGKILL channel process {pid}" if hit else "skipped: no channel process",
            "skipped": not hit,
        }
        if hit:
            entry |= {"startMs": began, "endMs": round(time.time() * 1000), "pids": [pid]}
        ctx.faults_done.append(entry)
        ctx.note(f"fault killChannel: {entry['detail']}")
        self.kills += 1

    def finish_kills(self, ctx: SeedContext) -> None:
        """Record the kills the seed ended before (skipped)."""
        while self.kills < len(self.plan.kills):
            ctx.faults_done.append(
                {
                    "index": 1000 + self.kills,
                    "kind": "killChannel",
                    "at": round(ctx.elapsed(), 2),
                    "window": None,
                    "detail": "skipped: the seed ended first",
                    "skipped": True,
                }
            )
            self.kills += 1

    # --- the operator's part --------------------------------------------------------------

    def operator_choice(self, ctx: SeedContext, track: RunTrack, first_seen: float) -> str | None:
        """What the operator answers now for a decision the seat's audience holds (None:
        not yet). `desk` decisions are answered as every other decision (the caller's rule);
        this says only when a `chat` or `race` decision is answered at the desk."""
        posted = next((p for p in self.posted.values() if p.run_id == track.run_id), None)
        rng = rng_for(ctx.seed, "telegram", "desk", track.planned.index)
        choice = "ship" if rng.random() < 0.5 else "hold"
        if posted is not None and posted.raced:
            return choice
        if time.monotonic() - first_seen >= FALLBACK_SECONDS:
            return choice  # the message never came, or the chat's answer did not count
        return None

    @staticmethod
    def leaves_to_chat(ctx: SeedContext, track: RunTrack) -> bool:
        """The operator leaves the track's decision to the chat (`chat`) or races it
        (`race`); a `desk` decision is answered as every other one."""
        return plan_of(ctx.seed, track.planned.index).script is not Script.DESK

    # --- the end --------------------------------------------------------------------------

    def settle(self, ctx: SeedContext) -> None:
        """Before the last stop: wait until the channel confirmed every update and edited
        every posted decision that was resolved (it is eventually consistent)."""
        if not self.configured:
            return
        deadline = time.monotonic() + SETTLE_SECONDS
        while time.monotonic() < deadline:
            if self._settled(ctx):
                return
            time.sleep(0.25)  # polling the stand-in and the server; nothing orders on it
        ctx.note("telegram: not settled within the deadline; the oracle says what is missing")

    def _settled(self, ctx: SeedContext) -> bool:
        pushed, _, confirmed = self.bot.updates_seen()
        if not set(pushed) <= set(confirmed):
            return False
        ledger = _read_json(ctx.home / "channels" / "ledger" / f"{CHANNEL}.json")
        for post in ledger.get("posts") or []:
            if post.get("messageId") is None:
                continue
            receipt = ctx.surfaces.read("call", "decision.get", {"requestId": post["requestId"]})
            found = getattr(receipt, "body", None)
            if not isinstance(found, dict):
                return False
            if found.get("decision", {}).get("status") == "resolved" and not self.bot.edits_of(
                int(post["messageId"])
            ):
                return False
        return True

    def facts(self, ctx: SeedContext) -> Facts:
        """What the oracle checks, after the seed's last stop."""
        runs = {}
        for track in ctx.tracks:
            if track.run_id is None or not self.addresses(track):
                continue
            output = (track.view or {}).get("output")
            runs[track.run_id] = RunFacts(
                operator=track.decision,
                status=track.status,
                output=dict(output) if isinstance(output, dict) else None,
            )
        facts = Facts(
            allowed=self.plan.allowed,
            stranger=self.plan.stranger,
            runs=runs,
            presses=list(self.presses),
        )
        facts.pushed, facts.delivered, facts.confirmed = self.bot.updates_seen()
        for sent in self.bot.decision_messages():
            facts.messages[sent.message_id] = (sent.text, self.bot.edits_of(sent.message_id))
        ledger = _read_json(ctx.home / "channels" / "ledger" / f"{CHANNEL}.json")
        facts.offset = int(ledger["offset"]) if "offset" in ledger else None
        for post in ledger.get("posts") or []:
            if post.get("messageId") is not None:
                facts.posts[int(post["messageId"])] = str(post["requestId"])
            elif not post.get("settled"):
                facts.unsaved.add(str(post.get("runId")))
        read_database(ctx.home / "state.sqlite", facts)
        return facts


def _read_json(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}
