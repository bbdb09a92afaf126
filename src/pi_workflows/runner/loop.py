"""The execution loop of one runner generation: start or resume, execute, route, commit.

Runs in the runner child; never opens the database. After one ``state.get`` the loop keeps
its own copy of the engine's ``RunState`` and updates it from what it committed:

1. an ``active`` attempt that is ``timed_out`` or ``waiting`` on a settled request is routed
   without running the node; a ``running`` one (should not happen after recovery) is
   executed afresh under its committed attempt; otherwise ``node.start`` opens the current
   node (the start node when ``currentNode`` is null);
2. the node executes (``nodes.execute``); a ``Waited`` or ``Parked`` execution ends the
   child;
3. the engine decides (``advance``) and ``node.finish`` commits the result with ``next``;
   a ``goto`` sets ``startNext`` so the next attempt opens in the same commit, and the loop
   continues with it; a ``finish`` ends the child.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, Final

from pi_workflows.authoring import (
    CancellationSignal,
    ComputeNode,
    FanOutNode,
    JsonValue,
    Outcome,
    SleepNode,
    SubworkflowNode,
    WaitEventNode,
)
from pi_workflows.engine import (
    Complete,
    Fail,
    GoTo,
    NodeResult,
    RunState,
    Step,
    TimeOut,
    Transition,
    advance,
    canonical_json,
    timeout_result,
)
from pi_workflows.runner.blobs import state_size
from pi_workflows.runner.composition import joined
from pi_workflows.runner.durable import (
    await_event,
    error_class,
    execution_timeout,
    resumed_sleep,
    retry_step,
)
from pi_workflows.runner.envelope import (
    ActiveAttempt,
    AttemptReply,
    CleanupView,
    Reevaluation,
    StateView,
    convert,
)
from pi_workflows.runner.errors import ProtocolViolationError
from pi_workflows.runner.limits import MAX_RUN_STATE_BYTES, millis
from pi_workflows.runner.logs import capture
from pi_workflows.runner.nodes import execute
from pi_workflows.runner.runtime import (
    Attempt,
    Execution,
    Finished,
    Parked,
    Runtime,
    Waited,
    node_context,
)
from pi_workflows.runner.values import bounded
from pi_workflows.runner.waits import resumed

WIRE_OUTCOME: Final = {
    Outcome.OK: "completed",
    Outcome.FAILED: "failed",
    Outcome.TIMED_OUT: "timed_out",
}
"""``node.finish`` spells a node's outcome as the attempt status it becomes."""

MAX_REEVALUATIONS: Final = 20
"""How often a ``settings_route`` attempt is evaluated again because the settings changed
before its route committed; the evaluation after the last one routes whatever happens."""


def engine_state(view: StateView) -> RunState:
    """The engine's ``RunState`` from a ``state.get`` reply.

    Result records keep the engine's shape (``outcome``, ``error``, ``details`` if any); a
    node whose latest result is not ``ok`` has no entry in ``outputs``. A server-settled
    ``timed_out`` active attempt that the reply already counts in ``visits`` and
    ``stepCount`` is taken out again, because the loop records it once more when it routes
    it (the engine's ``advance`` takes the state from before the result).
    """
    outputs = dict(view.outputs)
    results: dict[str, MappingProxyType[str, JsonValue]] = {}
    visits = dict(view.visits)
    steps = view.step_count
    active = view.active
    if active is not None and active.status == "timed_out":
        counted = visits.get(active.node_id, 0)
        if counted >= active.visit and steps > 0:
            visits[active.node_id] = counted - 1
            steps -= 1
    for node_id, record in view.results.items():
        outcome = record.get("outcome")
        entry: dict[str, JsonValue] = {
            "outcome": "ok" if outcome == "completed" else outcome,
            "error": record.get("error"),
        }
        if isinstance(record.get("details"), dict):
            entry["details"] = record["details"]
        results[node_id] = MappingProxyType(entry)
        if entry["outcome"] != "ok":
            outputs.pop(node_id, None)
    return RunState(
        outputs=MappingProxyType(outputs),
        results=MappingProxyType(results),
        visits=MappingProxyType(visits),
        steps=steps,
    )


def next_payload(transition: Transition) -> dict[str, Any]:
    """The ``next`` field of ``node.finish`` for an engine transition."""
    match transition:
        case GoTo(node_id=target):
            return {"type": "goto", "nodeId": target}
        case Complete(output=output):
            return {"type": "finish", "status": "completed", "output": output}
        case Fail(error=error):
            return {"type": "finish", "status": "failed", "error": error}
        case TimeOut(error=error):
            return {"type": "finish", "status": "timed_out", "error": error}


class Loop:
    """Drives one generation from the state it read to a wait, a finish or an exit."""

    def __init__(self, rt: Runtime, view: StateView) -> None:
        self.rt = rt
        self.view = view
        self.state = engine_state(view)
        self.sizes = state_size(view)  # canonical bytes of the input and each latest output
        capture.attach(rt.channel)  # what attempts print and log goes to their run's logs

    def _known(self, node_id: str, what: str) -> str:
        if node_id not in self.rt.workflow.nodes:
            raise ProtocolViolationError(
                what, f"workflow {self.rt.workflow.name!r} has no node {node_id!r}"
            )
        return node_id

    def _start(self, node_id: str) -> Attempt:
        timeout = millis(execution_timeout(self.rt.workflow.node(node_id)))
        reply = self.rt.channel.request("node.start", {"nodeId": node_id, "timeoutMs": timeout})
        started = convert(reply, AttemptReply, "node.start")
        return self._attempt(started, node_id, "node.start")

    def _attempt(self, reply: AttemptReply, node_id: str, what: str) -> Attempt:
        if reply.node_id != node_id:
            raise ProtocolViolationError(
                what, f"attempt for node {reply.node_id!r}, expected {node_id!r}"
            )
        return Attempt.of(reply)

    def _resume(self, active: ActiveAttempt) -> tuple[Attempt, Execution]:
        self._known(active.node_id, "state.get")
        attempt = Attempt.of(active)
        node_id = attempt.node_id
        capture.begin(attempt.attempt_id)
        if active.status == "running":
            return attempt, execute(self.rt, self.state, attempt)
        ctx = node_context(self.rt, self.state, attempt, CancellationSignal())
        node = self.rt.workflow.node(node_id)
        self.rt.termination.watch(ctx.cancellation)
        try:
            if active.status == "waiting" and isinstance(node, SleepNode):
                execution: Execution = resumed_sleep(active)
            elif active.status == "waiting" and isinstance(node, WaitEventNode):
                execution = await_event(self.rt, node, attempt, ctx)
            elif active.status == "waiting" and isinstance(node, SubworkflowNode | FanOutNode):
                execution = joined(self.rt, node, active)
            else:
                execution = resumed(self.rt, active, ctx)
        finally:
            self.rt.termination.watch(None)
        if isinstance(execution, Finished):
            execution = Finished(
                bounded(node_id, execution.result),
                submission_id=execution.submission_id,
                signal_id=execution.signal_id,
            )
        return attempt, execution

    def run(self) -> None:
        """Execute until the run waits or finishes (or the child must exit)."""
        if self.view.cleanup is not None:
            self._clean_up(self.view.cleanup)
            return
        if self.view.active is not None:
            attempt, execution = self._resume(self.view.active)
            if isinstance(execution, Waited):
                return  # the submission was rejected: the run waits again
        else:
            current = self.view.current_node
            node_id = self._known(current, "state.get") if current else self.rt.workflow.start
            attempt = self._start(node_id)
            execution = execute(self.rt, self.state, attempt)
        while isinstance(execution, Finished):
            following = self._finish(attempt, execution)
            if following is None:
                return
            attempt = following
            execution = execute(self.rt, self.state, attempt)
        assert isinstance(execution, Waited | Parked)

    def _clean_up(self, cleanup: CleanupView) -> None:
        """The run was cancelled or passed its run deadline: run its cleanup node once, with
        ``ctx.cancel_reason``, and end the run as it was ended, whatever the node's outcome
        (docs/authoring.md, "Cleanup on cancel"). A cleanup attempt the server timed out is
        only routed; one a lost runner left is run again as a new attempt (its effect, if
        settled, is not applied again)."""
        node_id = self._known(cleanup.node_id, "state.get")
        if node_id != self.rt.workflow.on_cancel:
            raise ProtocolViolationError(
                "state.get", f"node {node_id!r} is not the workflow's on_cancel node"
            )
        self.rt = dataclasses.replace(self.rt, cancel_reason=cleanup.reason)
        active = self.view.active
        if active is not None and active.node_id == node_id and active.status == "timed_out":
            attempt = Attempt.of(active)
            result = timeout_result(node_id, self.rt.workflow.node(node_id))
        else:
            if active is not None and active.node_id == node_id and active.status == "running":
                attempt = Attempt.of(active)
                capture.begin(attempt.attempt_id)
            else:
                attempt = self._start(node_id)
            execution = execute(self.rt, self.state, attempt)
            if not isinstance(execution, Finished):
                return  # parked (an uncertain effect): a person resolves it, then it goes on
            result = self._within_state_cap(node_id, execution.result)
        payload: dict[str, Any] = {
            "attemptId": attempt.attempt_id,
            "outcome": WIRE_OUTCOME[result.outcome],
            "next": {"type": "finish", "status": cleanup.ends_as},
        }
        if result.outcome is Outcome.OK:
            payload["output"] = result.output
        else:
            payload["error"] = result.error
        self.rt.channel.request("node.finish", payload)

    def _within_state_cap(self, node_id: str, result: NodeResult) -> NodeResult:
        """``result``, or a failure when its output would take the run's state past the cap."""
        if result.outcome is not Outcome.OK:
            return result
        size = len(canonical_json(result.output))
        total = sum(v for k, v in self.sizes.items() if k != node_id) + size
        if total <= MAX_RUN_STATE_BYTES:
            return result
        return NodeResult.failed(
            f"the output of node {node_id!r} ({size} bytes) would make the run's state {total}"
            f" bytes of JSON; the limit is {MAX_RUN_STATE_BYTES} (the input plus the latest"
            " output of every node)"
        )

    def _finish(self, attempt: Attempt, execution: Finished) -> Attempt | None:
        """Commit the node's result and the engine's decision (or, when its retry policy
        tries it again, the retry); the next attempt, if any. A ``settings_route`` node
        whose settings changed before its route committed is evaluated again with the new
        ones (at most ``MAX_REEVALUATIONS`` times, then its last evaluation routes)."""
        node = self.rt.workflow.node(attempt.node_id)
        route_check = isinstance(node, ComputeNode) and node.settings_route
        for evaluation in range(MAX_REEVALUATIONS + 1):
            committed = self._commit(attempt, execution, route_check=route_check)
            if not isinstance(committed, Reevaluation):
                return committed
            attempt = dataclasses.replace(
                attempt, settings_change=committed.settings_change, settings=committed.settings
            )
            again = execute(self.rt, self.state, attempt)
            if not isinstance(again, Finished):  # a compute node always finishes
                raise ProtocolViolationError("node.finish", "a settings_route did not finish")
            execution = again
            route_check = evaluation + 1 < MAX_REEVALUATIONS
        raise ProtocolViolationError("node.finish", "reevaluate after the last evaluation")

    def _commit(
        self, attempt: Attempt, execution: Finished, *, route_check: bool
    ) -> Attempt | Reevaluation | None:
        """One ``node.finish`` (or retry) of ``execution``; a ``Reevaluation`` when the
        server did not commit a ``settings_route``'s route because its settings changed."""
        result: NodeResult = self._within_state_cap(attempt.node_id, execution.result)
        retried = retry_step(self.rt, self.rt.workflow.node(attempt.node_id), attempt, result)
        if retried.retried:
            return retried.following
        step: Step = advance(self.rt.workflow, self.state, attempt.node_id, result)
        payload: dict[str, Any] = {
            "attemptId": attempt.attempt_id,
            "outcome": WIRE_OUTCOME[result.outcome],
            "next": next_payload(step.transition),
        }
        if route_check:
            payload["settingsRoute"] = True
        if result.outcome is Outcome.OK:
            payload["output"] = result.output
            if execution.message is not None:
                payload["message"] = execution.message
            if execution.submission_id is not None:
                payload["submissionId"] = execution.submission_id
            if execution.signal_id is not None:
                payload["signalId"] = execution.signal_id
        else:
            payload["error"] = result.error
            named = error_class(result)
            if named is not None:
                payload["errorClass"] = named
            if retried.note is not None:
                payload["retryNote"] = retried.note
        transition = step.transition
        if isinstance(transition, GoTo):
            payload["startNext"] = True
            payload["timeoutMs"] = millis(
                execution_timeout(self.rt.workflow.node(transition.node_id))
            )
        reply = self.rt.channel.request("node.finish", payload)
        again = reply.get("reevaluate")
        if again is not None:
            return convert(again, Reevaluation, "node.finish")
        self.state = step.state
        if result.outcome is Outcome.OK:
            self.sizes[attempt.node_id] = len(canonical_json(result.output))
        else:
            self.sizes.pop(attempt.node_id, None)
        if not isinstance(transition, GoTo):
            return None
        following = reply.get("nextAttempt")
        if following is None:
            raise ProtocolViolationError(
                "node.finish", "startNext was set but the reply has no nextAttempt"
            )
        return self._attempt(
            convert(following, AttemptReply, "node.finish"), transition.node_id, "node.finish"
        )
