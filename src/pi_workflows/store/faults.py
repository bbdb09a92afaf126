"""Named fault points for crash tests: the store can die exactly between two statements.

A fault point is armed by the environment variable ``PI_WORKFLOWS_FAULTS``, a comma list of
``NAME=ACTION`` where ACTION is ``exit`` (the process ends at once with status 137, like
SIGKILL: no cleanup, no commit), ``raise`` (``InjectedFault`` is raised; ``raise:N`` only
the first N times the point is reached) or ``flag`` (``hit`` does nothing; the caller asks
``flagged`` and performs the fault itself, e.g. the server killing a runner child at an
exact point; ``flag:N`` only the first N times). Tests may also arm points in-process with
``arm``. When nothing is armed a fault point costs one dict lookup. Production code never
arms a fault point.

It also keeps the registry of commit points: every outermost ``Database.atomic`` name, with
one sentence on what its commit makes durable, has the points ``NAME.before_commit`` and
``NAME.after_commit``. The store's fixed names are ``COMMIT_POINTS`` below, or a module's
own ``declare`` at import; the server declares its families with ``declare`` where they
are catalogued (``command.<operation>`` when a command operation is registered,
``runner.<kind>`` for each runner proposal kind).
``Database.atomic`` refuses a name that is not declared, so no transaction can be added
without a commit point the crash tests know about (``tests/support/commit_points.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

EXIT_STATUS = 137

COMMIT_POINTS: Final[Mapping[str, str]] = MappingProxyType(
    {
        # Lifecycle transitions (store/lifecycle.py, reservations.py, claiming.py,
        # node_steps.py, takeover.py; transaction names keep the lifecycle. prefix).
        "lifecycle.reserve": "a run is reserved: queued with its definition, input and source",
        "lifecycle.claim": "a queued run is claimed for a runner: new generation, run running",
        "lifecycle.control_claim": "the server takes control of a running run whose claim died",
        "lifecycle.fence": "the server reads whether a runner's claim is still live (no write)",
        "lifecycle.start_node": "a node attempt is opened and becomes the run's current node",
        "lifecycle.finish_node": "a node attempt is settled and the engine's next step applied",
        "lifecycle.wait": "a running run opens an interactive request and waits unclaimed",
        "lifecycle.park": "a running run is parked at its last durable boundary",
        "lifecycle.pause": "a queued or waiting run is paused (user, aborted turn, agent down)",
        "lifecycle.resume": "a paused run is queued again, or waits again on its open request",
        "lifecycle.complete": "a running run completes with its output",
        "lifecycle.fail": "a running run fails; its unfinished attempt closes as failed",
        "lifecycle.time_out": "a running run times out; its unfinished attempt closes timed out",
        "lifecycle.cancel": "a nonterminal run is cancelled, under its claim or a control claim",
        "lifecycle.expire": "a run past its run deadline ends timed_out, its tree cancelled",
        "cleanups.give_up": "a cleanup that keeps stopping its runner ends its run as ended",
        "lifecycle.restart": "an ended or paused run is queued to run again in a new round",
        "lifecycle.fork": "a fork of a run is reserved with what it carries from its source",
        "lifecycle.upgrade": "a parked run's source is replaced by the workflow's current code",
        "lifecycle.recover": "a running run whose runner is gone is made claimable again",
        "lifecycle.time_out_node": "a node past its deadline is settled timed out, run queued",
        "lifecycle.expire_request": "an open request past its deadline closes, its run queued",
        "lifecycle.release_dead_claims": "runner claims of earlier server epochs are expired",
        # Durable waits (store/wait_steps.py, takeover.py, signals.py).
        "lifecycle.sleep": "a sleep node's attempt waits for its wake time, the run unclaimed",
        "lifecycle.retry": "a retried attempt is settled: next try started, waiting or parked",
        "lifecycle.await_event": "a wait_event node's attempt waits for its event, unclaimed",
        "waits.fire": "due waits are fired: their waiting runs queued, paused ones recorded",
        "signals.send": "an event is stored for a run; a wait for it ends and the run queued",
        "signals.reject": "a wait_event node's validate refuses an event; it stays unconsumed",
        "lifecycle.spawn": "a parent's join and its first child runs are recorded; it waits",
        "lifecycle.refill": "children a paused run above held back start (its tree resumed)",
        # Managed effects (store/effect_writes.py).
        "effects.reserve": "an effect of the active attempt is reserved before its body runs",
        "effects.settle": "an effect body's outcome and receipt are stored",
        "effects.resolve": "an operator resolves an ambiguous effect",
        "effects.keep": "a refused runner's effect outcome and receipt are kept anyway",
        # Interactive requests (store/interaction_writes.py).
        "interactions.submit": "a submission is recorded as validating and its run queued",
        "interactions.reject": "the runner's validation rejects a submission; the run waits",
        "interactions.abandon": "a validating submission whose runner died is rejected",
        "interactions.decide": "a person's answer resolves a human decision; the run queued",
        "seat_feed.refusal": "a channel's refused answer is kept as the run's event",
        # Origin sessions and headless agents (store/sessions.py, store/agents.py).
        "sessions.attach": "a session becomes coordinator with a new epoch",
        "sessions.report_messages": "a session reports which workflow messages it shows",
        "sessions.report_turn": "a session reports a model turn starting or ending",
        "sessions.disconnect": "a session's coordinator connection closed (its seat detached)",
        "delivery.turn_lost": "a turn whose seat died or was replaced ends lost",
        "delivery.present_again": "a step no live turn works on is presented again",
        "delivery.retry_due": "a step whose turn failed is due to be presented again later",
        "delivery.drop_due": "a due presentation of a step that closed or paused is dropped",
        "delivery.nudge": "a headless agent's idle step is counted (and presented again)",
        "agents.started": "a spawned headless agent is recorded",
        "agents.ended": "a headless agent is recorded as ended",
        # Server and runner records (store/runners.py, store/claims.py).
        "server.epoch": "a starting server takes a new epoch",
        "runners.launch": "a runner launch is recorded with the claim it runs under",
        "runners.spawned": "a spawned runner's pid and start time are recorded",
        "runners.ready": "a runner's ready and the run revision then are recorded",
        "runners.exited": "a runner's exit is recorded; its groups close, its replies go",
        "runners.process": "a process group a runner is about to let run is recorded",
        "runners.process_ended": "a runner's process group is recorded as ended",
        "claims.renew": "a live claim is renewed without changing its run",
        # Maintenance (store/diagnose.py, store/receipts.py).
        "repair.project": "a stale viewer row is rebuilt from the run rows",
        "repair.run": "a run's queue, claim, attempts and effects are made consistent again",
        "receipts.prune": "receipts of ended runs past their retention are deleted",
        # OpenTelemetry export (store/telemetry.py).
        "telemetry.cursor": "an OpenTelemetry exporter's read position in the events is saved",
    }
)
"""The store's transaction names and what each commit makes durable."""

_declared: dict[str, str] = dict(COMMIT_POINTS)


class InjectedFault(Exception):  # noqa: N818 - it is a fault, not an error of the code
    """Raised at an armed fault point whose action is ``raise``."""

    def __init__(self, point: str) -> None:
        self.point = point
        super().__init__(f"injected fault at {point}")


def _parse(spec: str) -> dict[str, str]:
    armed: dict[str, str] = {}
    for item in spec.split(","):
        name, _, action = item.strip().partition("=")
        if name:
            armed[name] = action or "exit"
    return armed


_armed: dict[str, str] = _parse(os.environ.get("PI_WORKFLOWS_FAULTS", ""))


def arm(point: str, action: str = "raise") -> None:
    """Arm ``point`` in this process (tests only)."""
    if action.split(":", 1)[0] not in {"raise", "exit", "flag"}:
        raise ValueError(f"unknown fault action {action!r}; use 'raise', 'exit' or 'flag'")
    _armed[point] = action


def disarm_all() -> None:
    """Disarm every fault point in this process (tests only)."""
    _armed.clear()


def hit(point: str) -> None:
    """Reach the fault point ``point``: die or raise if it is armed, else do nothing."""
    if not _armed:
        return
    action = _armed.get(point)
    if action is None:
        return
    if action == "exit":
        os._exit(EXIT_STATUS)
    if action == "raise":
        raise InjectedFault(point)
    if action.startswith("raise:"):
        left = int(action.split(":", 1)[1])
        if left > 0:
            _armed[point] = f"raise:{left - 1}"
            raise InjectedFault(point)


def flagged(point: str) -> bool:
    """True when ``point`` is armed with ``flag`` (the caller performs the fault);
    ``flag:N`` is true only the first N times it is asked."""
    if not _armed:
        return False
    action = _armed.get(point)
    if action == "flag":
        return True
    if action is not None and action.startswith("flag:"):
        left = int(action.split(":", 1)[1])
        if left > 0:
            _armed[point] = f"flag:{left - 1}"
            return True
    return False


def declare(name: str, what: str) -> None:
    """Declare the transaction ``name`` (its two commit points) and what its commit makes
    durable; declaring it again with the same sentence does nothing."""
    known = _declared.setdefault(name, what)
    if known != what:
        raise ValueError(f"commit point {name!r} is already declared as {known!r}")


def declared() -> dict[str, str]:
    """Every declared transaction name, sorted, with what its commit makes durable."""
    return dict(sorted(_declared.items()))


def check_declared(name: str) -> None:
    """Refuse (``ValueError``) a transaction name whose commit points are not declared."""
    if name not in _declared:
        raise ValueError(
            f"transaction {name!r} has no declared commit point: add it to"
            " faults.COMMIT_POINTS (or faults.declare it where its family is catalogued)"
            " and give it a crash scenario in tests/support/commit_points.py"
        )
