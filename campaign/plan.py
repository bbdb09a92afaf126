"""The plan of one seed: which runs start when, which faults happen when, and the operator's
choices, all drawn from `random.Random(seed)` before anything runs.

Runs in the campaign driver. The plan is a pure function of the seed (and of this file), so
`make campaign SEEDS=1 SEED_START=<seed>` replays the same decisions: the same workflows and
inputs, the same fault kinds in the same order with the same delays and target choices, the
same answers and resolutions. What a real-process campaign cannot replay exactly is the
operating system's timing (which body a kill lands in); the report records what happened.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field
from typing import Any, Final


class Fault(enum.StrEnum):
    """The faults a seed injects (the report counts them by these names)."""

    KILL_SERVER = "killServer"  # SIGKILL the server; its runners become orphans
    KILL_SERVER_ALL = "killServerAndChildren"  # SIGKILL server, runner groups, shell bodies
    KILL_RUNNER = "killRunner"  # SIGKILL one runner process
    KILL_RUNNER_GROUP = "killRunnerGroup"  # SIGKILL a runner's whole process group
    KILL_SHELL = "killShell"  # SIGKILL a shell command (the runner's grandchild)
    KILL_CLI = "killCli"  # SIGKILL the operator's next CLI command mid-flight
    STOP_RUNNER = "stopRunner"  # SIGSTOP a runner past the lease, then SIGCONT
    STOP_SERVER = "stopServer"  # SIGSTOP the server past the lease, then SIGCONT
    GRACEFUL_STOP = "gracefulStop"  # `server stop` or SIGTERM, then a restart
    PAUSE_RUN = "pauseRun"  # `run pause` of a running run, resumed later
    CANCEL_RUN = "cancelRun"  # `run cancel` of an unfinished run
    KILL_SESSION = "killSession"  # SIGKILL a session client; it re-attaches after a while
    KILL_AGENT = "killAgent"  # SIGKILL a detached run's headless agent (the stand-in)


FAULT_WEIGHTS: Final[dict[Fault, int]] = {
    Fault.KILL_SERVER: 12,
    Fault.KILL_SERVER_ALL: 5,
    Fault.KILL_RUNNER: 10,
    Fault.KILL_RUNNER_GROUP: 8,
    Fault.KILL_SHELL: 8,
    Fault.KILL_CLI: 9,
    Fault.STOP_RUNNER: 6,
    Fault.STOP_SERVER: 8,
    Fault.GRACEFUL_STOP: 10,
    Fault.PAUSE_RUN: 6,
    Fault.CANCEL_RUN: 3,
    Fault.KILL_SESSION: 10,
    Fault.KILL_AGENT: 5,
}
"""Relative probabilities of each fault kind (they sum to 100, so each is a percentage)."""

SERVER_DOWN: Final = frozenset({Fault.KILL_SERVER, Fault.KILL_SERVER_ALL, Fault.GRACEFUL_STOP})
"""Faults after which the server must be started again."""

BODY_TARGETED: Final = frozenset(
    {
        Fault.KILL_SERVER,
        Fault.KILL_SERVER_ALL,
        Fault.KILL_RUNNER,
        Fault.KILL_RUNNER_GROUP,
        Fault.KILL_SHELL,
        Fault.STOP_RUNNER,
        Fault.STOP_SERVER,
        Fault.GRACEFUL_STOP,
        Fault.PAUSE_RUN,
    }
)
"""Faults that may wait for an effect body to be inside a chosen window before they fire."""


class Restart(enum.StrEnum):
    """How the server comes back after it went down."""

    SERVER_START = "serverStart"  # `pi-workflows server start`
    AUTO_CLI = "autoStartCli"  # the next CLI command starts it on demand
    AUTO_CLIENT = "autoStartClient"  # the next Python client call starts it on demand


class Mode(enum.StrEnum):
    """Who presents a run's steps and messages."""

    PLAIN = "plain"  # nobody: the operator answers through the CLI and the client
    SESSION = "session"  # a scripted session client (the extension's part) on its origin session
    DETACHED = "detached"  # the server's headless agent (the campaign's stand-in for Pi)


SCENARIOS: Final = ("crossing",)
"""Named plans that replace the random one (`--scenario`): `crossing` is the review's
crossing alone (a notify, then slow manual and idempotent effects, in a run with an origin
session whose client reports the notification while the effect runs), with no fault."""


@dataclass(frozen=True)
class PlannedFork:
    """How a planned run is made by forking another: the planned run it forks (by index),
    once that one has ended, at which node and visit (None: the latest)."""

    source: int
    node: str
    visit: int | None


@dataclass(frozen=True)
class PlannedRun:
    """One run the operator starts."""

    index: int
    workflow: str
    input: dict[str, Any]
    start_at: float  # seconds after the seed began
    key: str  # the idempotency key of its `run start` (or `run fork`)
    via_cli: bool
    mode: Mode = Mode.PLAIN
    session: str | None = None  # the origin session (a session client presents it)
    fork: PlannedFork | None = None  # made by `run fork` of another planned run, not started
    upgrade: bool = False  # the operator changes its workflow while it waits, then upgrades it
    signal_to: int | None = None  # a `relay` run: the planned run (index) its node signals
    retry_of: int | None = None  # made by `run retry` of that planned run once it failed


@dataclass(frozen=True)
class PlannedFault:
    """One fault: its kind, when it becomes due, and how it picks its target."""

    index: int
    kind: Fault
    at: float  # seconds after the previous fault finished
    window: str | None  # "beforeApply" | "afterApply": wait for a body there (up to 6 s)
    pick: float  # in [0, 1): which of the sorted candidates is the target
    hold: float  # SIGSTOP duration, down time (server, session client), or CLI kill delay
    restart: Restart
    sigterm: bool  # graceful stop by SIGTERM instead of `server stop`
    forced: bool = False  # a graceful stop that does not drain: SIGINT, or a second stop


@dataclass(frozen=True)
class PlannedSchedule:
    """A schedule the operator adds early in the seed and deletes before it ends: it
    starts `chain` runs every `every` seconds, through the faults."""

    name: str
    every: int  # seconds
    overlap: str  # skip | queue | allow
    catchup: str  # latest | all | none
    input: dict[str, Any]
    add_at: float  # seconds after the seed began
    delete_at: float
    via_cli: bool


@dataclass(frozen=True)
class PlannedTelegram:
    """The seed's Telegram seat: a channel against the campaign's Bot API stand-in, the
    audience its decisions go to, who may answer in the chat, and when the channel process
    is SIGKILLed (the server restarts it with backoff)."""

    token: str  # the bot token: a secret that must never appear in a log, output or report
    chat: str
    allowed: int  # the one `--allow-user`
    stranger: int  # a chat member not on the allow list
    seats: str  # the `ops` audience's `--channels`
    kills: tuple[float, ...]  # seconds after the seed began


@dataclass
class Plan:
    """Everything a seed will do, decided up front."""

    seed: int
    runs: list[PlannedRun] = field(default_factory=list)
    faults: list[PlannedFault] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)  # origin sessions, one client each
    scenario: str | None = None
    schedule: PlannedSchedule | None = None
    telegram: PlannedTelegram | None = None

    def describe(self) -> dict[str, Any]:
        """A JSON summary for the report."""
        return {
            "scenario": self.scenario,
            "sessions": self.sessions,
            "runs": [
                {
                    "workflow": r.workflow,
                    "startAt": round(r.start_at, 2),
                    "mode": str(r.mode),
                    **({"forkOf": r.fork.source, "fromNode": r.fork.node} if r.fork else {}),
                    **({"upgrade": True} if r.upgrade else {}),
                    **({"signalTo": r.signal_to} if r.signal_to is not None else {}),
                    **({"retryOf": r.retry_of} if r.retry_of is not None else {}),
                }
                for r in self.runs
            ],
            "faults": [
                {"kind": str(f.kind), "at": round(f.at, 2), "window": f.window} for f in self.faults
            ],
            # Never the token: the report is checked for it.
            **(
                {"telegram": {"seats": self.telegram.seats, "kills": len(self.telegram.kills)}}
                if self.telegram is not None
                else {}
            ),
            "schedule": None
            if self.schedule is None
            else {
                "every": self.schedule.every,
                "overlap": self.schedule.overlap,
                "catchup": self.schedule.catchup,
            },
        }


def rng_for(seed: int, *parts: object) -> random.Random:
    """An independent, reproducible stream for one decision of one seed.

    Choices made while the seed runs (an answer, a resolution) draw from a stream named after
    what they decide, so the order in which timing makes them happen changes nothing.
    """
    return random.Random(":".join(str(p) for p in (seed, *parts)))  # noqa: S311 - a reproducible campaign, not cryptography


WORKFLOW_WEIGHTS: Final = {
    "chain": 3,
    "payment": 2,
    "payment-t": 2,
    "deploy": 2,
    "deploy-t": 2,
    "sync": 3,
    "review": 3,
    "review-t": 2,
    "notice": 3,
    "timer": 3,
    "timer-t": 2,
}
"""Relative frequency of each workflow among a seed's runs."""

COMPOSITION_WEIGHTS: Final = {"tree": 3, "nest": 2}
"""Relative frequency of the workflows that start child runs, drawn after the rest of the
plan from a stream of their own (`_composition`), so that adding them left every other
decision of a seed as it was."""

FORK_NODES: Final = {"chain": "flaky", "sync": "store", "payment": "charge"}
"""The workflows a seed may fork a run of, and the node each fork starts at: `chain` from its
flaky node (visit counters go on from the fork point), `sync` from its idempotent shell
(`fetch`, an idempotent action before it, is carried as a receipt and never applies again),
`payment` from its manual charge (the checkpoint answer is carried; the charge applies once
more, as the fork's own effect)."""

LINEAGE_WEIGHTS: Final = {"chain": 2, "sync": 2, "payment": 1}
"""Relative frequency of each workflow as the source of a fork. Forks and upgrades are drawn
last, from a stream of their own (`_lineage`), so adding them left every other decision of a
seed as it was (the same way `_composition` was added)."""


def make_plan(seed: int, lease_seconds: float, scenario: str | None = None) -> Plan:
    """Draw the plan of `seed` (or build the named `scenario`)."""
    if scenario is not None:
        return _scenario(seed, scenario)
    rng = rng_for(seed, "plan")
    plan = Plan(seed)
    plan.sessions = [f"campaign-{seed}-{name}" for name in "ab"[: rng.randint(1, 2)]]
    names = list(WORKFLOW_WEIGHTS)
    for index in range(rng.randint(4, 7)):
        workflow = rng.choices(names, weights=[WORKFLOW_WEIGHTS[n] for n in names])[0]
        mode = _mode(workflow, rng_for(seed, "mode", index))
        plan.runs.append(
            PlannedRun(
                index=index,
                workflow=workflow,
                input=_input(workflow, rng),
                start_at=0.0 if index == 0 else rng.uniform(0.0, 10.0),
                key=f"campaign-{seed}-run-{index}",
                via_cli=rng.random() < 0.5,
                mode=mode,
                session=(
                    rng_for(seed, "session", index).choice(plan.sessions)
                    if mode is Mode.SESSION
                    else None
                ),
            )
        )
    # A fault whose target the plan never has (no origin session, no detached run) is
    # never drawn: it would only wait for a target and be skipped.
    modes = {run.mode for run in plan.runs}
    kinds = [
        k
        for k in FAULT_WEIGHTS
        if (k is not Fault.KILL_SESSION or Mode.SESSION in modes)
        and (k is not Fault.KILL_AGENT or Mode.DETACHED in modes)
    ]
    for index in range(rng.randint(3, 7)):
        kind = rng.choices(kinds, weights=[FAULT_WEIGHTS[k] for k in kinds])[0]
        window = None
        if kind in BODY_TARGETED and rng.random() < 0.6:
            window = rng.choice(("beforeApply", "afterApply"))
        if kind in (Fault.STOP_RUNNER, Fault.STOP_SERVER):
            hold = lease_seconds * rng.uniform(1.3, 2.5)
        elif kind is Fault.KILL_CLI:
            hold = rng.uniform(0.05, 0.4)
        else:
            hold = rng.uniform(0.0, 1.5)
        plan.faults.append(
            PlannedFault(
                index=index,
                kind=kind,
                at=rng.uniform(0.3, 3.0),
                window=window,
                pick=rng.random(),
                hold=hold,
                restart=rng.choice(list(Restart)),
                sigterm=rng.random() < 0.3,
                forced=kind is Fault.GRACEFUL_STOP
                and rng_for(seed, "forced", index).random() < 0.25,
            )
        )
    plan.schedule = _schedule(seed)
    plan.runs += _composition(seed, len(plan.runs), plan.sessions)
    plan.runs += _lineage(seed, len(plan.runs))
    plan.runs += _lapse(seed, len(plan.runs))
    plan.telegram, runs = _telegram(seed, len(plan.runs))
    plan.runs += runs
    plan.runs += _messaging(seed, len(plan.runs))
    plan.runs += _retrying(seed, len(plan.runs))
    return plan


TELEGRAM_CHANCE: Final = 0.35
"""How often a seed has a Telegram seat (seed 368 of the fixed set draws one)."""


def _telegram(seed: int, first: int) -> tuple[PlannedTelegram | None, list[PlannedRun]]:
    """Some seeds configure a Telegram channel (stream `telegram`, drawn last, so every other
    decision of a seed is what it was without it): the `ops` audience, which every `deploy`
    decision names, goes to it; one or two more `deploy` runs make sure decisions reach it;
    and the channel process is SIGKILLed one to three times."""
    rng = rng_for(seed, "telegram")
    if rng.random() >= TELEGRAM_CHANCE:
        return None, []
    bot = rng.randint(100_000_000, 999_999_999)
    secret = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
                     for _ in range(33))  # fmt: skip
    telegram = PlannedTelegram(
        token=f"{bot}:AA{secret}",
        chat=str(-rng.randint(1_000_000, 9_999_999)),
        allowed=rng.randint(1000, 499_999),
        stranger=rng.randint(500_000, 999_999),
        seats=rng.choice(["web,phone", "pi,web,phone"]),
        kills=tuple(sorted(round(rng.uniform(1.0, 16.0), 2) for _ in range(rng.randint(1, 3)))),
    )
    runs = []
    for index in range(first, first + rng.randint(1, 2)):
        workflow = rng.choice(["deploy", "deploy", "deploy-t"])
        runs.append(
            PlannedRun(
                index=index,
                workflow=workflow,
                input=_input(workflow, rng),
                start_at=rng.uniform(0.0, 8.0),
                key=f"campaign-{seed}-run-{index}",
                via_cli=rng.random() < 0.5,
            )
        )
    return telegram, runs


def _messaging(seed: int, first: int) -> list[PlannedRun]:
    """Half the seeds start a pair of runs that message each other: a `hark` run waiting for
    two `relay` events, then a `relay` run whose node sends them (`ctx.signal`, one key
    each) to it, and in two thirds of them kills its own runner once, after a send. Drawn
    last, from a stream of its own (`messaging`), so every other decision of a seed is what
    it was without them."""
    rng = rng_for(seed, "messaging")
    if rng.random() >= 0.5:
        return []
    x = rng.randint(1, 10_000)
    start_at = rng.uniform(0.0, 6.0)
    receiver = PlannedRun(
        index=first,
        workflow="hark",
        input={"x": x},
        start_at=start_at,
        key=f"campaign-{seed}-run-{first}",
        via_cli=rng.random() < 0.5,
    )
    sender = PlannedRun(
        index=first + 1,
        workflow="relay",
        input={"x": x, "hold": [round(rng.uniform(0.1, 1.0), 2), round(rng.uniform(0.1, 1.0), 2),
                                round(rng.uniform(0.05, 0.5), 2)],
               # Its node kills its own runner once: after the first send, after both, or not.
               "kill": rng.choice([None, 1, 2])},
        start_at=start_at + rng.uniform(0.0, 3.0),
        key=f"campaign-{seed}-run-{first + 1}",
        via_cli=rng.random() < 0.5,
        signal_to=first,
    )  # fmt: skip
    return [receiver, sender]


def _retrying(seed: int, first: int) -> list[PlannedRun]:
    """Half the seeds start a `botch` run, which fails by design (the world it reads is
    closed), and once it failed the operator opens the world and sends `run retry` of it
    (by the CLI or the client, one key): the retry is a new run. Drawn last, from a stream
    of its own (`retrying`)."""
    rng = rng_for(seed, "retrying")
    if rng.random() >= 0.5:
        return []
    source = PlannedRun(
        index=first,
        workflow="botch",
        input={
            "x": rng.randint(1, 10_000),
            "ticket": f"campaign-{seed}-ticket-{first}",
            "hold": [round(rng.uniform(0.1, 1.2), 2), round(rng.uniform(0.1, 0.6), 2)],
            "checkHold": round(rng.uniform(0.05, 0.6), 2),
        },
        start_at=rng.uniform(0.0, 6.0),
        key=f"campaign-{seed}-run-{first}",
        via_cli=rng.random() < 0.5,
    )
    retry = PlannedRun(
        index=first + 1,
        workflow="botch",
        input=dict(source.input),
        start_at=source.start_at,
        key=f"campaign-{seed}-retry-{first + 1}",
        via_cli=rng.random() < 0.5,
        retry_of=first,
    )
    return [source, retry]


def _lapse(seed: int, first: int) -> list[PlannedRun]:
    """Half the seeds start a `lapse` run: its 2 s run deadline crosses its working node,
    and its cleanup node kills its own runner on its first execution in two thirds of them
    (before or after its effect applied). Drawn last, from a stream of its own, so every
    other decision of a seed is what it was without it."""
    rng = rng_for(seed, "lapse")
    if rng.random() >= 0.5:
        return []
    return [
        PlannedRun(
            index=first,
            workflow="lapse",
            input={
                "x": rng.randint(1, 10_000),
                "work": round(rng.uniform(3.0, 5.0), 2),
                "hold": [round(rng.uniform(0.2, 1.0), 2), round(rng.uniform(0.1, 0.5), 2)],
                "kill": rng.choice([None, "before", "after"]),
            },
            start_at=rng.uniform(0.0, 8.0),
            key=f"campaign-{seed}-run-{first}",
            via_cli=rng.random() < 0.5,
        )
    ]


def _lineage(seed: int, first: int) -> list[PlannedRun]:
    """Most seeds also fork a run (a source run of its own, then `run fork` of it once it
    ended, by the CLI or the client with one key), and half change the code of a waiting
    `mend` run and upgrade it (`run upgrade`)."""
    rng = rng_for(seed, "lineage")
    runs: list[PlannedRun] = []
    index = first
    if rng.random() < 0.6:
        names = list(LINEAGE_WEIGHTS)
        workflow = rng.choices(names, weights=[LINEAGE_WEIGHTS[n] for n in names])[0]
        source = PlannedRun(
            index=index,
            workflow=workflow,
            input=_input(workflow, rng),
            start_at=rng.uniform(0.0, 6.0),
            key=f"campaign-{seed}-run-{index}",
            via_cli=rng.random() < 0.5,
        )
        fork = PlannedFork(index, FORK_NODES[workflow], rng.choice([None, 1]))
        runs.append(source)
        runs.append(
            PlannedRun(
                index=index + 1,
                workflow=workflow,
                input=dict(source.input),
                start_at=source.start_at,
                key=f"campaign-{seed}-fork-{index + 1}",
                via_cli=rng.random() < 0.5,
                fork=fork,
            )
        )
        index += 2
    if rng.random() < 0.5:
        runs.append(
            PlannedRun(
                index=index,
                workflow="mend",
                input={"x": rng.randint(1, 10_000)},
                start_at=rng.uniform(0.0, 6.0),
                key=f"campaign-{seed}-run-{index}",
                via_cli=rng.random() < 0.5,
                upgrade=True,
            )
        )
    return runs


def _composition(seed: int, first: int, sessions: list[str]) -> list[PlannedRun]:
    """Most seeds also start one or two runs that start child runs (`tree`: a fan_out,
    `nest`: a subworkflow), plain or with an origin session."""
    rng = rng_for(seed, "composition")
    if rng.random() >= 0.7:
        return []
    names = list(COMPOSITION_WEIGHTS)
    runs = []
    for index in range(first, first + rng.randint(1, 2)):
        workflow = rng.choices(names, weights=[COMPOSITION_WEIGHTS[n] for n in names])[0]
        session = rng.choice(sessions) if rng.random() < 0.35 else None
        runs.append(
            PlannedRun(
                index=index,
                workflow=workflow,
                input=_input(workflow, rng),
                start_at=rng.uniform(0.0, 8.0),
                key=f"campaign-{seed}-run-{index}",
                via_cli=rng.random() < 0.5,
                mode=Mode.PLAIN if session is None else Mode.SESSION,
                session=session,
            )
        )
    return runs


def _schedule(seed: int) -> PlannedSchedule | None:
    """Half the seeds add a schedule (drawn from a stream of its own, so the rest of a
    seed's plan is what it was without schedules)."""
    rng = rng_for(seed, "schedule")
    if rng.random() >= 0.5:
        return None
    add_at = round(rng.uniform(0.0, 2.0), 2)
    return PlannedSchedule(
        name=f"campaign-{seed}-every",
        every=rng.choice([1, 2, 3]),
        overlap=rng.choice(["skip", "queue", "allow"]),
        catchup=rng.choice(["latest", "all", "none"]),
        input={"x": rng.randint(1, 10_000), "n": rng.randint(1, 3),
               "hold": round(rng.uniform(0.05, 0.8), 2)},
        add_at=add_at,
        delete_at=round(add_at + rng.uniform(6.0, 12.0), 2),
        via_cli=rng.random() < 0.5,
    )  # fmt: skip


def _mode(workflow: str, rng: random.Random) -> Mode:
    """Who presents the run: `notice` always has a session; agent steps may be detached."""
    if workflow == "notice":
        return Mode.SESSION
    draw = rng.random()
    if workflow.startswith("review"):
        return Mode.DETACHED if draw < 0.3 else Mode.SESSION if draw < 0.75 else Mode.PLAIN
    return Mode.SESSION if draw < 0.35 else Mode.PLAIN


def _scenario(seed: int, name: str) -> Plan:
    if name != "crossing":
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    session = f"campaign-{seed}-a"
    plan = Plan(seed, sessions=[session], scenario=name)
    for index in range(2):
        plan.runs.append(
            PlannedRun(
                index=index,
                workflow="notice",
                # Bodies that hold long enough for the session's report to land mid-action.
                input={"x": 100 + seed + index, "hold": [2.0, 0.3], "storeHold": 1.5},
                start_at=0.0 if index == 0 else 4.0,
                key=f"campaign-{seed}-run-{index}",
                via_cli=index == 0,
                mode=Mode.SESSION,
                session=session,
            )
        )
    return plan


def _input(workflow: str, rng: random.Random) -> dict[str, Any]:
    x = rng.randint(1, 10_000)
    if workflow == "tree":
        return {"x": x, "n": rng.randint(2, 5), "hold": round(rng.uniform(0.05, 0.6), 2)}
    if workflow in ("chain", "nest"):
        return {"x": x, "n": rng.randint(1, 6), "hold": round(rng.uniform(0.05, 0.5), 2)}
    if workflow.startswith(("payment", "deploy")):
        before = round(rng.uniform(0.1, 2.6 if workflow.endswith("-t") else 1.2), 2)
        return {"x": x, "hold": [before, round(rng.uniform(0.1, 0.8), 2)]}
    if workflow.startswith("review"):
        return {"x": x, "validateHold": round(rng.uniform(0.05, 1.5), 2)}
    if workflow == "notice":
        hold = [round(rng.uniform(0.3, 2.5), 2), round(rng.uniform(0.1, 0.8), 2)]
        return {"x": x, "hold": hold, "storeHold": round(rng.uniform(0.2, 1.5), 2)}
    if workflow.startswith("timer"):
        return {
            "x": x,
            "nap": round(rng.uniform(0.3, 2.5), 2),
            # 0-2 failures retry within a round; 4 exhaust the first round (3 tries), park
            # the run retriesExhausted, and the operator's resume starts a fresh round.
            "fails": rng.choices([0, 1, 2, 4], weights=[3, 3, 2, 2])[0],
            "hold": [round(rng.uniform(0.1, 1.0), 2), round(rng.uniform(0.1, 0.5), 2)],
            "validateHold": round(rng.uniform(0.05, 1.0), 2),
        }
    return {
        "x": x,
        "fetchHold": round(rng.uniform(0.1, 0.8), 2),
        "storeHold": round(rng.uniform(0.1, 2.8), 2),
    }
