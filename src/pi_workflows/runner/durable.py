"""Durable waits in the runner: sleep nodes, wait_event nodes and retry policies.

Runs in the runner child; never opens the database. Nothing here waits in the process: a
``sleep`` evaluates its wake time and sends ``node.sleep``, a ``wait_event`` asks for its
event with ``node.await``, a retry sends ``node.retry``; when the server answers that the
run now waits, the child exits and a later runner continues from what the server recorded.

- ``sleep_node``: the wake time is ``duration`` seconds from the commit, or what
  ``until(ctx)`` returns (seconds from now, or an aware ``datetime``); the output is
  ``{"until": ISO-8601, "lateMs": int}``.
- ``await_event``: the oldest pending event of the node's name is validated (the node's
  ``validate``, in this supervised runner, exactly as for a checkpoint) and consumed in the
  ``node.finish`` commit; a refused one is rejected with the message (``signal.reject``) and
  the next one is tried; with none left the run waits (or the wait's timeout answers
  ``timed_out``).
- ``retry_step``: after an attempt ended with an outcome its node's policy retries, the next
  try starts at once (delay 0), after a durable delay, or the run parks
  ``retriesExhausted`` (``on_exhausted="pause"``); otherwise the result is routed as usual.
  ``classify`` decides whether the policy selects the attempt: ``never`` first (the raised
  exception's class names against the policy's), then ``on``'s outcomes, classes and
  predicate (called here, on a worker thread, for at most ``PREDICATE_SECONDS``).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from pi_workflows.authoring import (
    MAX_DELAY_SECONDS,
    ActionNode,
    AttemptFailed,
    CancellationSignal,
    ComputeNode,
    Node,
    NodeContext,
    Outcome,
    Rejected,
    RetryPolicy,
    ShellNode,
    SleepNode,
    WaitEventNode,
    class_names,
)
from pi_workflows.engine import NodeResult, result_from_output
from pi_workflows.protocol import iso_ms
from pi_workflows.runner.blobs import fetch
from pi_workflows.runner.callbacks import Deadline, Raised, Returned, TimedOut, call, evaluate
from pi_workflows.runner.envelope import (
    ActiveAttempt,
    AttemptReply,
    AwaitReply,
    RetryReply,
    SleepReply,
    convert,
)
from pi_workflows.runner.errors import ProtocolViolationError, describe_exception, one_line
from pi_workflows.runner.limits import millis
from pi_workflows.runner.runtime import (
    Attempt,
    Execution,
    Finished,
    Runtime,
    Waited,
    value_or_failure,
)
from pi_workflows.runner.values import bounded

_WIRE_OUTCOME = {Outcome.FAILED: "failed", Outcome.TIMED_OUT: "timed_out"}

PREDICATE_SECONDS: Final = 10.0
"""How long a retry predicate may run; one that runs longer means "do not retry"."""


def execution_timeout(node: Node) -> float | None:
    """The deadline the server enforces on a running attempt of ``node``: none for a sleep
    or an event wait (their waits hold no runner; an event wait's ``timeout`` is its wait's
    due time, kept by the server)."""
    if isinstance(node, SleepNode | WaitEventNode):
        return None
    return node.timeout


def _slept(until: int, late_ms: int) -> Finished:
    return Finished(NodeResult.ok({"until": iso_ms(until), "lateMs": max(0, late_ms)}))


def sleep_node(
    rt: Runtime, node: SleepNode, attempt: Attempt, ctx: NodeContext, deadline: Deadline
) -> Execution:
    """Commit the sleep (``node.sleep``): the child exits, or a time already past finishes
    the node now."""
    node_id = attempt.node_id
    payload: dict[str, object] = {"attemptId": attempt.attempt_id}
    if node.duration is not None:
        payload["delayMs"] = millis(node.duration)
    else:
        label = f"node {node_id!r} until"
        outcome = evaluate(
            node.until, ctx=ctx, label=label, deadline=deadline, cancellation=ctx.cancellation
        )
        found, failed = value_or_failure(outcome, node_id, node, label)
        if failed is not None:
            return Finished(failed)
        when = _wake_time(node_id, found)
        if isinstance(when, NodeResult):
            return Finished(when)
        payload.update(when)
    reply = convert(rt.channel.request("node.sleep", payload), SleepReply, "node.sleep")
    if reply.waited:
        return Waited()
    return _slept(reply.until, reply.late_ms)


def _too_far(node_id: str, what: str) -> NodeResult:
    return NodeResult.failed(
        f"node {node_id!r} until returned {what}, more than {MAX_DELAY_SECONDS:.0f} seconds"
        " (366 days) ahead: a sleep waits at most that long"
    )


def _wake_time(node_id: str, found: object) -> dict[str, object] | NodeResult:
    """``{"delayMs"}`` or ``{"untilMs"}`` from what ``until(ctx)`` returned, or a failure
    (a naive datetime, a negative or endless number, more than 366 days ahead)."""
    if isinstance(found, datetime):
        if found.tzinfo is None or found.utcoffset() is None:
            return NodeResult.failed(
                f"node {node_id!r} until returned a naive datetime; return an aware one"
                " (with tzinfo, e.g. datetime.now(UTC) + timedelta(minutes=5)) or seconds"
            )
        ahead = found.timestamp() - time.time()
        if ahead > MAX_DELAY_SECONDS:
            return _too_far(node_id, found.isoformat())
        return {"untilMs": max(0, math.floor(found.timestamp() * 1000))}
    if (
        isinstance(found, bool)
        or not isinstance(found, int | float)
        or not math.isfinite(found)
        or found < 0
    ):
        return NodeResult.failed(
            f"node {node_id!r} until must return a non-negative number of seconds or an aware"
            f" datetime, got {found!r}"
        )
    if found > MAX_DELAY_SECONDS:
        return _too_far(node_id, f"{found!r} seconds")
    return {"delayMs": millis(float(found))}


def resumed_sleep(active: ActiveAttempt) -> Finished:
    """A waiting sleep attempt whose wait fired: the node finishes with its lateness."""
    wait = active.wait
    if wait is None or wait.kind != "sleep" or wait.status != "fired" or wait.due_at is None:
        raise ProtocolViolationError(
            "state.get", f"sleep attempt {active.attempt_id} has no fired wait to route"
        )
    return _slept(wait.due_at, (wait.fired_at or wait.due_at) - wait.due_at)


def _reject(rt: Runtime, signal_id: str, error: str) -> None:
    rt.channel.request("signal.reject", {"signalId": signal_id, "error": error})


def await_event(rt: Runtime, node: WaitEventNode, attempt: Attempt, ctx: NodeContext) -> Execution:
    """Ask for the node's event until one is accepted, the wait times out, or the run waits."""
    node_id = attempt.node_id
    payload = {
        "attemptId": attempt.attempt_id,
        "event": node.name,
        "timeoutMs": millis(node.timeout),
        "validates": node.validate is not None,
    }
    while True:
        reply = convert(rt.channel.request("node.await", payload), AwaitReply, "node.await")
        if reply.waited:
            return Waited()
        if reply.timed_out:
            within = f" within {node.timeout:g} s" if node.timeout is not None else ""
            return Finished(NodeResult.timed_out(f"no event {node.name!r} arrived{within}"))
        signal = reply.signal
        if signal is None:
            raise ProtocolViolationError("node.await", "the reply has neither a wait nor an event")
        data = fetch(rt.channel, signal.data_ref) if signal.data_ref is not None else signal.data
        problem = _validate(node_id, node, data, ctx, rt.validate_seconds)
        if problem is not None:
            _reject(rt, signal.signal_id, problem)
            continue
        result = bounded(node_id, result_from_output(node_id, data))
        if result.error is not None:
            _reject(rt, signal.signal_id, result.error)
            continue
        return Finished(result, signal_id=signal.signal_id)


def _validate(
    node_id: str, node: WaitEventNode, data: object, ctx: NodeContext, bound: float | None
) -> str | None:
    """Why the node's validate refuses ``data`` (one line), or None when it accepts it.

    One event's validation is bounded by the server's ``PI_WORKFLOWS_VALIDATE_SECONDS``
    (``bound``), as a checkpoint answer's is: an event wait's own ``timeout`` is how long it
    waits for events, not how long one check may take.
    """
    if node.validate is None:
        return None
    limit = bound if bound is not None else node.timeout
    outcome = call(
        node.validate,
        (data, ctx),
        label=f"node {node_id!r} validate",
        deadline=Deadline(limit),
        cancellation=ctx.cancellation,
    )
    if isinstance(outcome, Returned):
        return None
    if isinstance(outcome, Raised) and isinstance(outcome.error, Rejected):
        return one_line(outcome.error.message) or "rejected"
    if isinstance(outcome, Raised):
        return one_line(f"validate raised {describe_exception(outcome.error)}")
    assert isinstance(outcome, TimedOut)
    return f"validation did not finish: validate ran longer than {limit:g} s"


def _attempt(reply: AttemptReply, node_id: str) -> Attempt:
    if reply.node_id != node_id:
        raise ProtocolViolationError(
            "node.retry", f"attempt for node {reply.node_id!r}, expected {node_id!r}"
        )
    return Attempt.of(reply)


def cause_names(result: NodeResult) -> tuple[str, ...]:
    """The qualified class names of the exception that failed the attempt, nearest first:
    the one its code raised, or those recorded with a failure adopted from a dead runner."""
    return class_names(result.cause) if result.cause is not None else result.cause_classes


def error_class(result: NodeResult) -> str | None:
    """The qualified class name of the exception that failed the attempt, if one did."""
    names = cause_names(result)
    return names[0] if names else None


@dataclass(frozen=True)
class Selected:
    """Whether a policy retries an attempt; ``note`` says why not, when that is worth a line
    in the history (``never`` matched, or the predicate raised or ran too long)."""

    retry: bool
    note: str | None = None


def classify(policy: RetryPolicy, outcome: str, result: NodeResult, node_id: str) -> Selected:
    """Whether ``policy`` retries an attempt that ended with ``outcome`` and ``result``.

    ``never`` wins over ``on``. A predicate gets the raised exception, or an
    ``AttemptFailed`` when nothing was raised (or the exception was raised in a runner that
    died: its recorded class names); a predicate that raises or outlives
    ``PREDICATE_SECONDS`` means "do not retry", and the note records it.
    """
    names = cause_names(result)
    if names and policy.never_retries(names):
        return Selected(False, f"not retried: {names[0]} is listed in never")
    if policy.retries(outcome) or (names and policy.retries_class(names)):
        return Selected(True)
    if policy.predicate is None:
        return Selected(False)
    error = result.cause or AttemptFailed(outcome, result.error or outcome, names)
    label = f"node {node_id!r} retry predicate"
    answer = call(
        policy.predicate,
        (error,),
        label=label,
        deadline=Deadline(PREDICATE_SECONDS),
        cancellation=CancellationSignal(),
    )
    if isinstance(answer, TimedOut):
        return Selected(
            False, f"not retried: the retry predicate ran longer than {PREDICATE_SECONDS:g} s"
        )
    if isinstance(answer, Raised):
        return Selected(
            False,
            one_line(f"not retried: the retry predicate raised {describe_exception(answer.error)}"),
        )
    if not isinstance(answer.value, bool):
        return Selected(
            False,
            one_line(
                "not retried: the retry predicate returned"
                f" {type(answer.value).__name__}, not True or False"
            ),
        )
    return Selected(answer.value)


@dataclass(frozen=True)
class RetryStep:
    """What ``retry_step`` did: ``retried`` False means route the result (with ``note``, why
    the policy did not retry it, for the history); True with ``following`` the next try to
    run now, True without it: the run waits or parked and the child exits."""

    retried: bool
    following: Attempt | None = None
    note: str | None = None


def retry_step(rt: Runtime, node: Node, attempt: Attempt, result: NodeResult) -> RetryStep:
    """Apply the node's retry policy to the attempt's result.

    Not retried: no policy, an ``ok`` or unselected outcome (``classify``), or the tries ran
    out with ``on_exhausted="fail"``; the caller routes the result. Otherwise the next try
    started now (run it), or the run now waits for the retry's delay or parked
    ``retriesExhausted``; the child exits.

    The delay before try ``n + 1`` is the policy's ``delay_before(n)``: the first retry
    waits ``delay``, each later one ``backoff`` times longer.
    """
    if not isinstance(node, ComputeNode | ActionNode | ShellNode) or node.retry is None:
        return RetryStep(False)
    policy = node.retry
    outcome = _WIRE_OUTCOME.get(result.outcome)
    if outcome is None:
        return RetryStep(False)
    selected = classify(policy, outcome, result, attempt.node_id)
    if not selected.retry:
        return RetryStep(False, note=selected.note)
    payload: dict[str, object] = {
        "attemptId": attempt.attempt_id,
        "outcome": outcome,
        "error": result.error or outcome,
    }
    named = error_class(result)
    if named is not None:
        payload["errorClass"] = named
    if attempt.try_no < policy.attempts:
        payload["delayMs"] = millis(policy.delay_before(attempt.try_no, random.random()))  # noqa: S311 - jitter, not a secret
        payload["timeoutMs"] = millis(execution_timeout(node))
    elif policy.on_exhausted == "pause":
        payload["exhausted"] = True
        payload["delayMs"] = 0
    else:
        return RetryStep(False)
    reply = convert(rt.channel.request("node.retry", payload), RetryReply, "node.retry")
    if reply.next_attempt is not None:
        return RetryStep(True, _attempt(reply.next_attempt, attempt.node_id))
    return RetryStep(True)
