"""Attribution: every abnormal thing that happened in a seed must have a cause the seed
injected (or planned), or it is a violation.

Runs in the campaign driver, at the end of a seed, on the facts of its database
(`ledger.py`) and the faults it fired (`SeedContext.faults_done`, each with its wall-clock
start and end, its target run and pids, and the epoch of the server it hit). The facts:

- every runner that did not end `exited` (`crashed`, `refused`, `claimLost`, `orphaned`,
  `cancelled`, `timedOut`, or never recorded as ended);
- every effect attempt whose outcome was lost (a manual effect made ambiguous, an
  idempotent one run again);
- every park or pause of a run, by its reason.

Each fact is matched against the causes that can produce it (`RULES` below, and the rule
table in docs/reliability.md) by target and time: the cause must have hit that runner (its
pid), that run or the root of its tree (a pause or cancel of a parent acts on every run
below it), or the server epoch it belonged to, and must have started within the fact's
span (a runner's life, a body's attempt) or shortly before it (a park). A fact with no such
cause is returned as unexplained. There is no catch-all: a `refused` runner, a
`proposalRefused`, `workflowSourceChanged` or `turnAborted` park have no cause in this
campaign, so they are always violations.

A graceful stop and a `run pause` drain (the server lets running nodes reach their next
boundary first), so they explain a lost effect only when forced (SIGINT, or a second stop
during the drain); every body of the campaign is shorter than the drain.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from campaign.ledger import Ledger, LostEffect, Park, RunnerExit
from campaign.workflows import NODE_DEADLINES, RUN_DEADLINES

SKEW_MS: Final = 1000
"""Clock slack between the campaign's wall clock and the server's (both read the wall
clock; the server's advances with its monotonic clock from its start)."""

LATENCY_MS: Final = 15_000
"""How long after a fault ended a park it caused may still be recorded (a recovery after
a restart, a claim expiring, a drain that ran out)."""

SERVER_KILLS: Final = frozenset({"killServer", "killServerAndChildren"})
# selfKill: a `lapse` cleanup body that killed its own runner, as its witness recorded.
RUNNER_KILLS: Final = frozenset({"killRunner", "killRunnerGroup", "selfKill"})
FREEZES: Final = frozenset({"stopRunner", "stopServer"})


@dataclass(frozen=True)
class Cause:
    """One fault that fired (or the seed's final stop), as attribution sees it."""

    kind: str
    start: int  # wall-clock ms
    end: int
    run_id: str | None = None  # the run it targeted (None: server-wide)
    pids: frozenset[int] = frozenset()  # the processes it hit
    epoch: int | None = None  # the server epoch it hit
    forced: bool = False  # a graceful stop that did not drain

    def label(self) -> str:
        """How the report names it."""
        return f"{self.kind}@{self.start}"


def causes_of(faults: list[dict[str, Any]]) -> list[Cause]:
    """The causes of the fault records a seed kept (skipped faults caused nothing)."""
    causes = []
    for fault in faults:
        if fault.get("skipped") or "startMs" not in fault:
            continue
        causes.append(
            Cause(
                kind=str(fault["kind"]),
                start=int(fault["startMs"]),
                end=int(fault.get("endMs") or fault["startMs"]),
                run_id=fault.get("runId"),
                pids=frozenset(int(p) for p in fault.get("pids") or ()),
                epoch=fault.get("epoch"),
                forced=bool(fault.get("forced")),
            )
        )
    return causes


@dataclass
class Attribution:
    """The outcome: what each fact was attributed to, and what nothing explains."""

    explained: Counter[str] = field(default_factory=Counter)  # "fact <- cause kind" -> count
    unexplained: list[tuple[str, str | None]] = field(default_factory=list)  # (why, run id)


class Attributor:
    """Matches the facts of one seed against its causes."""

    def __init__(
        self,
        ledger: Ledger,
        causes: list[Cause],
        workflows: dict[str, str],
        exhausting: frozenset[str] = frozenset(),
    ) -> None:
        self.ledger = ledger
        self.causes = causes
        self.workflows = workflows  # run id -> workflow name
        self.exhausting = exhausting  # runs planned to run out of a round of retries

    # --- runners --------------------------------------------------------------------------

    def runner(self, runner: RunnerExit) -> Cause | str | None:
        """The cause of a runner's end; "normal" for `exited`; None when nothing explains it."""
        outcome = runner.outcome
        ledger = self.ledger
        if outcome == "exited":
            return "normal"
        end = runner.exited_at if runner.exited_at is not None else runner.created_at
        alive = (runner.created_at - SKEW_MS, end + SKEW_MS)

        def during(cause: Cause) -> bool:
            return alive[0] <= cause.start <= alive[1]

        def overlapping(cause: Cause) -> bool:
            """A command that lasts (a pause or cancel drains, up to 10 s, then acts on
            whichever runner the run has then) explains a runner that lived in its span."""
            return cause.start <= alive[1] and cause.end >= alive[0]

        def this_run(cause: Cause) -> bool:
            return cause.run_id in (runner.run_id, ledger.root_of(runner.run_id)) or (
                runner.pid is not None and runner.pid in cause.pids
            )

        match outcome:
            case "crashed":
                return self._first(
                    lambda c: (
                        (c.kind in RUNNER_KILLS and this_run(c) and during(c))
                        or (c.kind == "killServerAndChildren" and runner.pid in c.pids)
                    )
                )
            case "orphaned":
                return self._first(
                    lambda c: (
                        c.kind in SERVER_KILLS
                        and (c.epoch == runner.server_epoch or (c.epoch is None and during(c)))
                    )
                )
            case "claimLost":
                return self._first(
                    lambda c: (
                        (c.kind == "stopRunner" and this_run(c) and during(c))
                        or (c.kind == "stopServer" and during(c))
                    )
                )
            case "cancelled":
                if self.workflows.get(runner.run_id) in RUN_DEADLINES:
                    return "runDeadline"  # the run deadline ends the run under its runner
                return self._first(
                    lambda c: (
                        (c.kind in ("cancelRun", "pauseRun") and this_run(c) and overlapping(c))
                        or (c.kind in ("gracefulStop", "finalStop") and overlapping(c))
                    )
                )
            case "timedOut":
                if any(w == self.workflows.get(runner.run_id) for w, _ in NODE_DEADLINES):
                    return "nodeDeadline"
                return self._first(lambda c: c.kind in FREEZES and during(c))
        return None  # refused, never recorded as ended, or an outcome nothing causes

    # --- effects --------------------------------------------------------------------------

    def lost(self, effect: LostEffect) -> Cause | str | None:
        """The cause of an effect attempt whose outcome was lost."""
        span = (effect.started_at - SKEW_MS, effect.finished_at + SKEW_MS)

        def during(cause: Cause) -> bool:
            return span[0] <= cause.start <= span[1]

        def this_run(cause: Cause) -> bool:
            return cause.run_id in (effect.run_id, self.ledger.root_of(effect.run_id))

        workflow = self.workflows.get(effect.run_id, "")
        deadline = NODE_DEADLINES.get((workflow, effect.node_id))
        if deadline is not None and effect.finished_at - effect.started_at >= deadline * 900:
            return "nodeDeadline"
        return self._first(
            lambda c: (
                during(c)
                and (
                    (
                        c.kind in (*RUNNER_KILLS, "killShell", "stopRunner", "cancelRun")
                        and this_run(c)
                    )
                    or c.kind in (*SERVER_KILLS, "stopServer")
                    or (c.kind == "gracefulStop" and c.forced)
                )
            )
        )

    # --- parks ----------------------------------------------------------------------------

    def park(self, park: Park) -> Cause | str | None:
        """The cause of a park or pause."""
        ledger = self.ledger

        def soon_after(cause: Cause) -> bool:
            return cause.start - SKEW_MS <= park.at <= cause.end + LATENCY_MS

        def this_run(cause: Cause) -> bool:
            return cause.run_id in (park.run_id, ledger.root_of(park.run_id))

        match park.reason:
            case "userPaused":
                return self._first(lambda c: c.kind == "pauseRun" and this_run(c) and soon_after(c))
            case "serverStopped":
                return self._first(
                    lambda c: c.kind in ("gracefulStop", "finalStop") and soon_after(c)
                )
            case "agentUnavailable":
                return self._first(
                    lambda c: c.kind == "killAgent" and this_run(c) and soon_after(c)
                )
            case "retriesExhausted":
                return "plannedFailures" if park.run_id in self.exhausting else None
            case "effectAmbiguous":
                for lost in ledger.lost:
                    near = abs(lost.finished_at - park.at) <= 2 * SKEW_MS
                    if lost.run_id == park.run_id and lost.kind == "manual" and near:
                        return "lostEffect"  # attributed on its own, as a lost effect
                return None
            case "runnerCrashed" | "runnerNoProgress":
                ended = [
                    r
                    for r in ledger.runners
                    if r.run_id == park.run_id
                    and r.created_at <= park.at  # not the runner started after the park
                    and r.exited_at is not None
                    and r.exited_at <= park.at + SKEW_MS
                ]
                if not ended:
                    return None
                last = max(ended, key=lambda r: r.exited_at or 0)
                found = self.runner(last)
                return None if found == "normal" else found
        return None  # proposalRefused, workflowSourceChanged, turnAborted, ...: no cause here

    def _first(self, matches: Any) -> Cause | None:
        for cause in self.causes:
            if matches(cause):
                return cause
        return None


def attribute(
    ledger: Ledger,
    causes: list[Cause],
    workflows: dict[str, str],
    exhausting: frozenset[str] = frozenset(),
) -> Attribution:
    """Attribute every fact of `ledger`; what nothing explains is returned as unexplained.
    A `retriesExhausted` park is explained only for a run in `exhausting` (planned to fail
    more often than a round of its retry policy allows)."""
    attributor = Attributor(ledger, causes, workflows, exhausting)
    result = Attribution()

    def record(fact: str, cause: Cause | str | None, why: str, run_id: str | None) -> None:
        if cause is None:
            result.unexplained.append((why, run_id))
        elif cause != "normal":
            result.explained[f"{fact} <- {cause if isinstance(cause, str) else cause.kind}"] += 1

    for runner in ledger.runners:
        record(
            f"runner {runner.outcome}",
            attributor.runner(runner),
            f"runner {runner.runner_epoch} (pid {runner.pid}, server epoch "
            f"{runner.server_epoch}) ended {runner.outcome or 'without an exit record'} "
            f"(exit code {runner.exit_code}, signal {runner.exit_signal}) and no injected "
            "fault explains it",
            runner.run_id,
        )
    for effect in ledger.lost:
        record(
            f"lost {effect.kind} effect",
            attributor.lost(effect),
            f"the outcome of {effect.kind} effect {effect.effect_key} (node {effect.node_id}, "
            f"attempt {effect.attempt_no}) was lost and no injected fault explains it",
            effect.run_id,
        )
    for park in ledger.parks:
        record(
            f"park {park.reason}",
            attributor.park(park),
            f"the run parked {park.reason} ({park.detail[:200]}) and no injected fault explains it",
            park.run_id,
        )
    return result
