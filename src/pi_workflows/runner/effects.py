"""Action and shell nodes: every body runs inside a managed effect, and only when reserved.

Runs in the runner child; never opens the database. The order is always ``effect.reserve``
-> (only if the reply's status is ``applying``) run the body -> ``effect.settle``. A reply
with a stored ``applied`` or ``rejected`` outcome is adopted as the node's result and the
body does not run. What the runner stores in an effect (so adoption reproduces the result):

- ``applied``: ``result`` is the node output (an action's return value; a shell command's
  ``{exitCode, stdout, stderr}``, whatever its exit code, since the command did run);
- ``rejected``: ``error`` is the one-line failure; ``result`` is ``{"outcome": "timed_out"}``
  when the node deadline stopped the body, else absent;
- ``receipt``: a shell command's ``{command, exitCode, signal, durationMs, stdoutBytes,
  stderrBytes, truncated}``; an action's ``{durationMs}``.

A shell command the node deadline kills is settled ``rejected`` with the timed-out mark under
an idempotent effect; under a manual effect its outcome is unknown, so the runner proposes
``run.park`` with ``effectAmbiguous`` and the server marks the effect ambiguous in the same
commit. An operator resolving a shell effect as applied without a result makes the node's
output ``{exitCode: 0, stdout: "", stderr: ""}``.

An action body that outlives its deadline is asked to stop (``ctx.cancellation``, and its
async task is cancelled) and given ``ACTION_GRACE_SECONDS``. If it ends within the grace it
is settled with what it did: a ``NodeCancelledError`` (or ``CancelledError``) means it
stopped, so the effect is rejected and the node ``timed_out``; a late return value is still
``applied`` (it happened). If it still runs, its outcome is unknown, so nothing is settled and
the child exits (``EffectOutcomeUnknownError``) for the server to settle the effect by kind
(the server's own node deadline normally kills the runner before that).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

from pi_workflows.authoring import (
    ActionContext,
    ActionNode,
    CancellationSignal,
    Effect,
    EffectKind,
    JsonObject,
    JsonValue,
    NodeCancelledError,
    NodeContext,
    ShellNode,
    class_names,
    env_problem,
)
from pi_workflows.engine import (
    NodeResult,
    canonical_json,
    check_json,
    result_from_output,
    shell_result,
    timeout_result,
)
from pi_workflows.protocol import TIMED_OUT_RESULT, effect_key, fingerprint
from pi_workflows.runner import evidence
from pi_workflows.runner.callbacks import (
    CallOutcome,
    Deadline,
    Inbox,
    Raised,
    Returned,
    TimedOut,
    call,
    spawn,
)
from pi_workflows.runner.envelope import Reservation, convert
from pi_workflows.runner.errors import (
    ChannelClosedError,
    EffectOutcomeUnknownError,
    ProtocolViolationError,
    one_line,
)
from pi_workflows.runner.limits import ACTION_GRACE_SECONDS, MAX_UPDATE_BYTES
from pi_workflows.runner.runtime import Attempt, Parked, Runtime, failure
from pi_workflows.runner.shell import run_command
from pi_workflows.runner.values import bounded

TIMED_OUT_MARK: JsonObject = dict(TIMED_OUT_RESULT)
"""The ``result`` of a rejected effect whose body the node deadline stopped."""

_ENDED_BY_CANCEL = (NodeCancelledError, asyncio.CancelledError)


def action_context(
    ctx: NodeContext, key: str, publish: Callable[[JsonValue], None]
) -> ActionContext:
    """``ctx`` plus the effect key and the update publisher."""
    base = {f.name: getattr(ctx, f.name) for f in fields(NodeContext)}
    return ActionContext(**base, effect_key=key, publish_update=publish)


def publisher(inbox: Inbox) -> Callable[[JsonValue], None]:
    """``ctx.publish_update``: checks the value now, queues it for the main thread."""

    def publish_update(value: JsonValue) -> None:
        check_json(value, "a publish_update value")
        size = len(canonical_json(value))
        if size > MAX_UPDATE_BYTES:
            raise ValueError(
                f"a publish_update value is {size} bytes of JSON; the limit is {MAX_UPDATE_BYTES}"
            )
        inbox.post_update(value)

    return publish_update


def _deliver(rt: Runtime, attempt: Attempt, inbox: Inbox) -> Callable[[JsonValue], None]:
    """Send one coalesced update as ``node.update``, with how many values the callback had
    published by then (the server keeps the latest; ``store/progress.py``)."""

    def deliver(value: JsonValue) -> None:
        rt.channel.request(
            "node.update",
            {"attemptId": attempt.attempt_id, "body": value, "published": inbox.published},
        )

    return deliver


def _reserve(
    rt: Runtime, attempt: Attempt, effect: Effect, command: Sequence[str] | None = None
) -> Reservation:
    identity: dict[str, Any] = {
        "type": effect.type,
        "kind": effect.kind.value,
        "nodeId": attempt.node_id,
        "visit": attempt.visit,
    }
    if command is not None:
        identity["command"] = list(command)
    payload = {
        "attemptId": attempt.attempt_id,
        "effectType": effect.type,
        "effectKind": effect.kind.value,
        "nodeId": attempt.node_id,
        "visit": attempt.visit,
        "fingerprint": fingerprint(identity),
    }
    reservation = convert(
        rt.channel.request("effect.reserve", payload), Reservation, "effect.reserve"
    )
    if reservation.status not in ("applying", "applied", "rejected"):
        raise ProtocolViolationError(
            "effect.reserve",
            f"status {reservation.status!r} (expected applying, applied or rejected)",
        )
    expected = visit_key(rt, attempt, effect)
    if reservation.effect_key != expected:
        raise ProtocolViolationError(
            "effect.reserve", f"effect key {reservation.effect_key!r}, expected {expected!r}"
        )
    return reservation


def visit_key(rt: Runtime, attempt: Attempt, effect: Effect) -> str:
    """The key of the effect of this node visit: what ``ctx.effect_key`` is and what the
    server reserves (``protocol.effect_key``: run, round, node, visit, effect type)."""
    return effect_key(rt.run_id, rt.round, attempt.node_id, attempt.visit, effect.type)


def _settle(
    rt: Runtime,
    reservation: Reservation,
    *,
    status: str,
    attempt: Attempt,
    effect: Effect,
    result: JsonValue = None,
    error: str | None = None,
    receipt: JsonObject | None = None,
) -> None:
    """Report the body's outcome; a manual effect's is on disk until the server has it
    (``runner/evidence.py``). An idempotent effect keeps none: one whose report is lost
    runs again (its key makes that safe), so nobody would read it."""
    payload: dict[str, Any] = {"effectId": reservation.effect_id, "status": status}
    if result is not None:
        payload["result"] = result
    if error is not None:
        payload["error"] = error
    if receipt is not None:
        payload["receipt"] = receipt
    kept = evidence.write(
        rt.evidence_dir if effect.kind is EffectKind.MANUAL else None,
        {
            "runId": rt.run_id,
            "effectId": reservation.effect_id,
            "effectKey": reservation.effect_key,
            "attemptId": attempt.attempt_id,
            "nodeId": attempt.node_id,
            "visit": attempt.visit,
            "effectType": effect.type,
            "effectKind": effect.kind.value,
            "status": status,
            "result": result,
            "error": error,
            "receipt": receipt,
        },
    )
    rt.channel.request("effect.settle", payload)
    evidence.remove(kept)


def _adopted_rejection(reservation: Reservation) -> NodeResult:
    """The failure a rejected effect recorded, for the attempt that adopts it: timed out, or
    failed with the class names of the exception that failed it (``_raised_result``), so
    the node's retry policy classifies it as it would have in the runner that ran it."""
    error = one_line(reservation.error or f"effect {reservation.effect_id} was rejected")
    if reservation.result == TIMED_OUT_MARK:
        return NodeResult.timed_out(error)
    recorded = reservation.result
    names = recorded.get(ERROR_CLASSES) if isinstance(recorded, dict) else None
    if isinstance(names, list) and all(isinstance(n, str) for n in names):
        return NodeResult.failed(error, cause_classes=tuple(names))
    return NodeResult.failed(error)


ERROR_CLASSES = "errorClasses"
"""The key of a rejected effect's ``result`` that lists the class names of the exception
that failed its body (``authoring.class_names``), kept for the attempt that adopts it."""


def _raised_result(result: NodeResult) -> JsonObject | None:
    """What a rejected effect records of its body's exception, or None (nothing raised)."""
    if result.cause is None:
        return None
    return {ERROR_CLASSES: [one_line(name) for name in class_names(result.cause)]}


def run_action(
    rt: Runtime, node: ActionNode, attempt: Attempt, ctx: NodeContext, deadline: Deadline
) -> NodeResult:
    """Reserve the action's effect, run its body if (and only if) told to, settle it."""
    assert node.effect is not None  # a validated workflow declares one
    node_id = attempt.node_id
    reservation = _reserve(rt, attempt, node.effect)
    if reservation.status == "applied":
        return bounded(node_id, result_from_output(node_id, reservation.result))
    if reservation.status == "rejected":
        return _adopted_rejection(reservation)
    inbox = Inbox()
    action_ctx = action_context(ctx, reservation.effect_key, publisher(inbox))
    label = f"node {node_id!r} action"
    started = time.monotonic()
    running = spawn(node.run, (action_ctx,), label, inbox)
    deliver = _deliver(rt, attempt, inbox)
    outcome = inbox.wait(deadline, deliver)
    late = outcome is None
    if outcome is None:
        ctx.cancellation.set()
        running.handle.cancel()
        outcome = inbox.wait(Deadline(ACTION_GRACE_SECONDS), deliver)
        if outcome is None:
            raise EffectOutcomeUnknownError(node_id, reservation.effect_id)
    receipt: JsonObject = {"durationMs": round((time.monotonic() - started) * 1000)}
    if isinstance(outcome, Returned):
        result = bounded(node_id, result_from_output(node_id, outcome.value))
        if result.error is None:
            _settle(
                rt,
                reservation,
                attempt=attempt,
                effect=node.effect,
                status="applied",
                result=result.output,
                receipt=receipt,
            )
        else:
            _settle(
                rt,
                reservation,
                attempt=attempt,
                effect=node.effect,
                status="rejected",
                error=result.error,
                receipt=receipt,
            )
        return result
    assert isinstance(outcome, Raised)
    if late and isinstance(outcome.error, _ENDED_BY_CANCEL):
        timed_out = timeout_result(node_id, node)
        _settle(
            rt,
            reservation,
            attempt=attempt,
            effect=node.effect,
            status="rejected",
            result=TIMED_OUT_MARK,
            error=timed_out.error,
            receipt=receipt,
        )
        return timed_out
    result = failure(outcome, node_id, node, label)
    _settle(
        rt,
        reservation,
        attempt=attempt,
        effect=node.effect,
        status="rejected",
        result=_raised_result(result),
        error=result.error,
        receipt=receipt,
    )
    return result


def _command(node_id: str, value: object) -> list[str] | NodeResult:
    if isinstance(value, list | tuple) and value and all(isinstance(arg, str) for arg in value):
        return [str(arg) for arg in value]
    return NodeResult.failed(
        f"the command of node {node_id!r} must be a non-empty list of strings, "
        f"got {type(value).__name__}"
    )


def run_shell(
    rt: Runtime,
    node: ShellNode,
    attempt: Attempt,
    ctx: NodeContext,
    deadline: Deadline,
    cancellation: CancellationSignal,
) -> NodeResult | Parked:
    """Resolve the command, reserve its effect, run it if told to, settle it with a receipt.

    A command callback sees the same ``ctx.effect_key`` the reservation then gets (it is
    derived from the run, round, node, visit and effect type, so it is known before the
    reservation, which needs the resolved command). A command the node deadline killed
    under a manual effect may or may not have done its work: the runner parks the run with
    ``effectAmbiguous`` (the effect stays for an operator) instead of settling it.
    """
    assert node.effect is not None
    node_id = attempt.node_id
    label = f"node {node_id!r} command"
    inbox = Inbox()
    command_ctx = action_context(ctx, visit_key(rt, attempt, node.effect), publisher(inbox))
    outcome: CallOutcome = Returned(node.command)
    if callable(node.command):
        outcome = call(
            node.command,
            (command_ctx,),
            label=label,
            deadline=deadline,
            cancellation=cancellation,
            inbox=inbox,
            deliver=_deliver(rt, attempt, inbox),
        )
    if isinstance(outcome, Raised | TimedOut):
        return failure(outcome, node_id, node, label)
    command = _command(node_id, outcome.value)
    if isinstance(command, NodeResult):
        return command
    added: object = dict(node.env) if isinstance(node.env, tuple) else None
    if callable(node.env):
        env_label = f"node {node_id!r} env"
        env_outcome = call(
            node.env,
            (command_ctx,),
            label=env_label,
            deadline=deadline,
            cancellation=cancellation,
            inbox=inbox,
            deliver=_deliver(rt, attempt, inbox),
        )
        if isinstance(env_outcome, Raised | TimedOut):
            return failure(env_outcome, node_id, node, env_label)
        problem = env_problem(env_outcome.value)
        if problem is not None:
            return NodeResult.failed(f"the {env_label} callback returned a bad value: {problem}")
        added = env_outcome.value
    env = _environment(added)
    reservation = _reserve(rt, attempt, node.effect, command)
    if reservation.status == "applied":
        return _adopt_shell(node_id, node, reservation)
    if reservation.status == "rejected":
        return _adopted_rejection(reservation)
    run = run_command(
        command,
        env=env,
        deadline=deadline,
        groups=rt.groups,
        termination=rt.termination,
        register=lambda pid, start: _register(rt, pid, start, command[0]),
        ended=lambda pid: _ended(rt, pid),
    )
    receipt = run.receipt()
    if run.spawn_error is not None:
        _settle(
            rt,
            reservation,
            attempt=attempt,
            effect=node.effect,
            status="rejected",
            error=run.spawn_error,
            receipt=receipt,
        )
        return NodeResult.failed(run.spawn_error)
    if run.timed_out and node.effect.kind is EffectKind.MANUAL:
        rt.channel.request(
            "run.park",
            {
                "reason": "effectAmbiguous",
                "detail": f"the command of node {node_id!r} was killed at its timeout",
            },
        )
        return Parked("effectAmbiguous")
    if run.timed_out:
        timed_out = timeout_result(node_id, node)
        _settle(
            rt,
            reservation,
            attempt=attempt,
            effect=node.effect,
            status="rejected",
            result=TIMED_OUT_MARK,
            error=timed_out.error,
            receipt=receipt,
        )
        return timed_out
    assert run.returncode is not None
    stdout, stderr, _ = run.texts()
    output: JsonObject = {"exitCode": run.returncode, "stdout": stdout, "stderr": stderr}
    _settle(
        rt,
        reservation,
        attempt=attempt,
        effect=node.effect,
        status="applied",
        result=output,
        receipt=receipt,
    )
    return shell_result(node, run.returncode, stdout, stderr)


def _environment(added: object) -> dict[str, str] | None:
    """The command's environment: the runner's (the run's recorded one) with ``added``
    (a checked mapping) laid over it, a None value removing a variable; None when nothing
    is added."""
    if not isinstance(added, dict):
        return None
    env = dict(os.environ)
    for name, value in added.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _register(rt: Runtime, pid: int, start: float, program: str) -> None:
    rt.channel.request("process.register", {"pid": pid, "processStart": start, "command": program})


def _ended(rt: Runtime, pid: int) -> None:
    """Tell the server the command's group is gone. A server that is gone needs no telling
    (the next one stops what its registry names by identity), and the body's outcome must
    still reach the evidence file (``_settle``), so a closed channel is not raised here."""
    with contextlib.suppress(ChannelClosedError):
        rt.channel.request("process.ended", {"pid": pid})


def _adopt_shell(node_id: str, node: ShellNode, reservation: Reservation) -> NodeResult:
    stored = reservation.result
    if stored is None:
        # An operator resolved it as applied without giving an output: the command did its
        # work, and nothing of what it printed is known.
        return shell_result(node, 0, "", "")
    if isinstance(stored, dict):
        code, stdout, stderr = stored.get("exitCode"), stored.get("stdout"), stored.get("stderr")
        if (
            isinstance(code, int)
            and not isinstance(code, bool)
            and isinstance(stdout, str)
            and isinstance(stderr, str)
        ):
            return shell_result(node, code, stdout, stderr)
    return NodeResult.failed(
        f"the stored result of effect {reservation.effect_id} (node {node_id!r}) is not a "
        "shell output"
    )
