"""Interactive nodes: sending a durable request, and routing it once answered or timed out.

Runs in the runner child; never opens the database. ``request_wait`` evaluates the node's
request fields (checkpoint ``request``, decision ``title``/``details``, agent ``prompt``)
within the node deadline and sends ``node.wait``; the child then exits. ``resumed_result``
turns the ``active`` attempt a later runner reads from ``state.get`` into the node's result:
a checkpoint or agent answer is the output (after the node's ``validate``: accepted -> ok,
``Rejected`` -> failed with its message; the full validation bridge, where a rejection
keeps the request open, is a later issue), a decision answer ``{"choice": id}`` is a
``decision_result`` (by the person, or by timeout), and a plain timeout is ``timed_out``.

The agent request's ``contract`` is rendered before the server assigns the request id, so
it names the request as ``REQUEST_ID_PLACEHOLDER``; whoever presents it substitutes the id.
"""

from __future__ import annotations

from typing import Any, Final

from pi_workflows.authoring import (
    AgentNode,
    AssistantMessage,
    CheckpointNode,
    HumanDecisionNode,
    JsonObject,
    JsonValue,
    Node,
    NodeContext,
    Rejected,
)
from pi_workflows.engine import (
    DECIDED_BY_PERSON,
    DECIDED_BY_TIMEOUT,
    NodeResult,
    NodeValueError,
    checkpoint_request,
    decision_result,
    require_text,
    result_from_output,
    step_contract,
    timeout_result,
)
from pi_workflows.runner.callbacks import Deadline, Raised, TimedOut, call, evaluate
from pi_workflows.runner.envelope import ActiveAttempt
from pi_workflows.runner.errors import ProtocolViolationError, one_line
from pi_workflows.runner.limits import millis
from pi_workflows.runner.runtime import (
    Attempt,
    Execution,
    Finished,
    Runtime,
    Waited,
    failure,
    value_or_failure,
)
from pi_workflows.runner.values import bounded, size_problem

REQUEST_ID_PLACEHOLDER: Final = "<requestId>"
"""Stands for the request id in an agent request's ``contract`` text."""


class _FieldFailedError(Exception):
    """Internal: a request field could not be evaluated; carries the node's result."""

    def __init__(self, result: NodeResult) -> None:
        super().__init__(result.error)
        self.result = result


def _field(
    value: object, what: str, node_id: str, node: Node, ctx: NodeContext, deadline: Deadline
) -> object:
    label = f"node {node_id!r} {what}"
    outcome = evaluate(
        value, ctx=ctx, label=label, deadline=deadline, cancellation=ctx.cancellation
    )
    found, failed = value_or_failure(outcome, node_id, node, label)
    if failed is not None:
        raise _FieldFailedError(failed)
    return found


def _text(
    value: object, what: str, node_id: str, node: Node, ctx: NodeContext, deadline: Deadline
) -> str:
    found = _field(value, what, node_id, node, ctx, deadline)
    try:
        return require_text(node_id, what, found)
    except NodeValueError as exc:
        raise _FieldFailedError(NodeResult.failed(str(exc))) from None


def _checkpoint(
    node_id: str, node: CheckpointNode, ctx: NodeContext, deadline: Deadline
) -> JsonObject:
    found = _field(node.request, "request", node_id, node, ctx, deadline)
    try:
        request = checkpoint_request(node_id, found)
    except NodeValueError as exc:
        raise _FieldFailedError(NodeResult.failed(str(exc))) from None
    payload: JsonObject = {"kind": "checkpoint", "request": request}
    if node.timeout is not None:
        payload["timeoutMs"] = millis(node.timeout)
    return payload


def _decision(
    node_id: str, node: HumanDecisionNode, ctx: NodeContext, deadline: Deadline
) -> JsonObject:
    title = _text(node.title, "title", node_id, node, ctx, deadline)
    details = None
    if node.details is not None:
        details = _text(node.details, "details", node_id, node, ctx, deadline)
    choices: list[JsonValue] = [
        {"id": c.id, "label": c.label, "description": c.description} for c in node.choices
    ]
    payload: JsonObject = {
        "kind": "decision",
        "request": {"title": title, "details": details, "choices": choices},
        "choices": list(node.choice_ids),
    }
    if node.on_timeout is not None:
        payload["timeoutChoice"] = node.on_timeout.choice
        payload["timeoutMs"] = millis(node.on_timeout.after)
    return payload


def _agent(
    rt: Runtime, node_id: str, node: AgentNode, ctx: NodeContext, deadline: Deadline
) -> JsonObject:
    prompt = _text(node.prompt, "prompt", node_id, node, ctx, deadline)
    replies = isinstance(node.expected_output, AssistantMessage)
    contract = step_contract(
        workflow=rt.workflow.name,
        node_id=node_id,
        request_id=REQUEST_ID_PLACEHOLDER,
        expected_output=node.expected_output,
    )
    request: JsonObject = {
        "prompt": prompt,
        "expectedOutput": None if replies else str(node.expected_output),
        "assistantMessage": replies,
        "allowedTools": list(node.allowed_tools) if node.allowed_tools is not None else None,
        "contract": contract,
    }
    payload: JsonObject = {"kind": "agent", "request": request}
    if node.timeout is not None:
        payload["timeoutMs"] = millis(node.timeout)
    return payload


def request_wait(
    rt: Runtime, node: Node, attempt: Attempt, ctx: NodeContext, deadline: Deadline
) -> Execution:
    """Build the node's request and commit it with ``node.wait`` (or fail the node)."""
    node_id = attempt.node_id
    try:
        match node:
            case CheckpointNode():
                payload = _checkpoint(node_id, node, ctx, deadline)
            case HumanDecisionNode():
                payload = _decision(node_id, node, ctx, deadline)
            case AgentNode():
                payload = _agent(rt, node_id, node, ctx, deadline)
            case _:
                raise ProtocolViolationError("node.wait", f"node {node_id!r} is not interactive")
    except _FieldFailedError as failed:
        return Finished(failed.result)
    problem = size_problem(f"the request of node {node_id!r}", payload["request"])
    if problem is not None:
        return Finished(NodeResult.failed(problem))
    reply = rt.channel.request("node.wait", {"attemptId": attempt.attempt_id, **payload})
    request_id = reply.get("requestId")
    if not isinstance(request_id, str):
        raise ProtocolViolationError("node.wait", "the reply has no requestId")
    return Waited(request_id)


def _validated(
    node_id: str,
    node: CheckpointNode | AgentNode,
    answer: Any,
    ctx: NodeContext,
) -> NodeResult:
    validate = node.validate
    if validate is not None:
        label = f"node {node_id!r} validate"
        outcome = call(
            validate,
            (answer, ctx),
            label=label,
            deadline=Deadline(node.timeout),
            cancellation=ctx.cancellation,
        )
        if isinstance(outcome, Raised) and isinstance(outcome.error, Rejected):
            return NodeResult.failed(one_line(f"rejected: {outcome.error.message}"))
        if isinstance(outcome, Raised | TimedOut):
            return failure(outcome, node_id, node, label)
    return bounded(node_id, result_from_output(node_id, answer))


def _answered(node_id: str, node: Node, answer: Any, ctx: NodeContext) -> NodeResult:
    if isinstance(node, HumanDecisionNode):
        choice = answer.get("choice") if isinstance(answer, dict) else None
        if not isinstance(choice, str):
            return NodeResult.failed(f"the answer to decision {node_id!r} names no choice")
        try:
            return decision_result(node_id, node, choice, DECIDED_BY_PERSON)
        except NodeValueError as exc:
            return NodeResult.failed(str(exc))
    if isinstance(node, CheckpointNode | AgentNode):
        return _validated(node_id, node, answer, ctx)
    raise ProtocolViolationError("state.get", f"node {node_id!r} ({node.kind.value}) cannot wait")


def resumed_result(rt: Runtime, active: ActiveAttempt, ctx: NodeContext) -> NodeResult:
    """The result of a ``timed_out`` or ``waiting`` active attempt, without running the node."""
    node_id = active.node_id
    node = rt.workflow.node(node_id)
    if active.status == "timed_out":
        return timeout_result(node_id, node)
    request = active.request
    if active.status != "waiting" or request is None:
        raise ProtocolViolationError(
            "state.get", f"active attempt {active.attempt_id} is {active.status} without a request"
        )
    if request.status == "answered":
        return _answered(node_id, node, request.answer, ctx)
    if request.status == "timed_out":
        answer = request.answer
        if isinstance(node, HumanDecisionNode) and isinstance(answer, dict):
            choice = answer.get("choice")
            if isinstance(choice, str) and choice in node.choice_ids:
                return decision_result(node_id, node, choice, DECIDED_BY_TIMEOUT)
        return timeout_result(node_id, node)
    raise ProtocolViolationError(
        "state.get", f"request {request.request_id} is {request.status}; there is nothing to route"
    )
