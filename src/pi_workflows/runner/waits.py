"""Interactive nodes: sending a durable request, validating submissions, routing answers.

Runs in the runner child; never opens the database. ``request_wait`` evaluates the node's
request fields (checkpoint ``request``, decision ``title``/``details``, agent ``prompt``)
within the node deadline and sends ``node.wait`` (kind ``agent``, ``assistant`` for an
``assistant_message()`` step, ``checkpoint`` or ``decision``); the child then exits.
``resumed`` turns the ``active`` attempt a later runner reads from ``state.get`` into what
to do: a ``validating`` request's submission is checked with the node's ``validate`` (only
ever here, in a supervised runner; a typed contract, ``output=`` or ``answer=``, first) and
either accepted — the result carries the submission
id and ``node.finish`` commits both — or rejected with ``interaction.reject`` and the exact
message, after which the run waits again and the child exits; a decision answer
``{"choice": id}`` is a ``decision_result`` (by the person, or by timeout), a timeout
is ``timed_out`` for the same attempt, and an agent step its model never submitted (closed
``failed`` after its reminders) fails with ``missingSubmission``.

The agent request's ``contract`` is rendered before the server assigns the request id, so
it names the request as ``REQUEST_ID_PLACEHOLDER``; the server substitutes the id when it
records the step's message.
"""

from __future__ import annotations

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
from pi_workflows.protocol import REQUEST_ID_PLACEHOLDER
from pi_workflows.runner.callbacks import Deadline, Raised, TimedOut, call, evaluate
from pi_workflows.runner.contracts import Refused, check
from pi_workflows.runner.envelope import ActiveAttempt, RequestView
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
from pi_workflows.runner.values import bounded, size_problem

ANSWER_KEYS = frozenset({"expectedAnswer", "answerSchema"})
"""The request keys a checkpoint with ``answer=`` adds: the generated expected answer
(readable text, then the schema) and the JSON Schema itself."""


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
    if node.answer is not None:
        taken = sorted(ANSWER_KEYS & request.keys())
        if taken:
            raise _FieldFailedError(
                NodeResult.failed(
                    f"node {node_id!r}: the request's {', '.join(map(repr, taken))} is where"
                    " answer= puts the expected answer and its schema; rename that key"
                )
            )
        request["expectedAnswer"] = node.answer.text
        request["answerSchema"] = node.answer.schema
    payload: JsonObject = {"kind": "checkpoint", "request": request}
    if node.for_person:
        payload["forPerson"] = True
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
    if node.audience is not None:
        request = payload["request"]
        assert isinstance(request, dict)
        request["audience"] = node.audience
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
        allowed_tools=node.allowed_tools,
    )
    request: JsonObject = {
        "prompt": prompt,
        "expectedOutput": None if replies else str(node.expected_output),
        "assistantMessage": replies,
        "allowedTools": list(node.allowed_tools) if node.allowed_tools is not None else None,
        "contract": contract,
    }
    if node.output is not None:
        request["outputSchema"] = node.output.schema
    payload: JsonObject = {"kind": "assistant" if replies else "agent", "request": request}
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


def _reject(rt: Runtime, request_id: str, submission_id: str, error: str) -> Waited:
    """Record the submission's rejection; the run waits again and this child exits."""
    rt.channel.request("interaction.reject", {"submissionId": submission_id, "error": error})
    return Waited(request_id)


def _validate(
    rt: Runtime,
    node_id: str,
    node: CheckpointNode | AgentNode,
    request: RequestView,
    ctx: NodeContext,
) -> Execution:
    """Validate the submission of a ``validating`` request: accept it (the result carries the
    submission id, committed with ``node.finish``) or reject it with the reason."""
    submission = request.submission
    if submission is None:
        raise ProtocolViolationError("state.get", f"request {request.request_id} has no submission")
    value = submission.value

    def reject(error: str) -> Waited:
        return _reject(rt, request.request_id, submission.submission_id, error)

    replies = isinstance(node, AgentNode) and isinstance(node.expected_output, AssistantMessage)
    if replies and (not isinstance(value, str) or not value.strip()):
        return reject("an assistant-message step's output is the reply text; it was empty")
    typed = node.output if isinstance(node, AgentNode) else node.answer
    if typed is not None:  # the typed contract first: validate sees only a matching value
        what = "output" if isinstance(node, AgentNode) else "answer"
        checked = check(typed, value, what)
        if isinstance(checked, Refused):
            whose = "step" if isinstance(node, AgentNode) else "checkpoint"
            return reject(
                f"the {what} does not match the {whose}'s schema: {checked.problem}; correct it"
                " and submit again"
            )
        value = checked.value
    validate = node.validate
    if validate is not None:
        label = f"node {node_id!r} validate"
        outcome = call(
            validate,
            (value, ctx),
            label=label,
            deadline=Deadline(node.timeout),
            cancellation=ctx.cancellation,
        )
        if isinstance(outcome, Raised) and isinstance(outcome.error, Rejected):
            return reject(one_line(outcome.error.message) or "rejected")
        if isinstance(outcome, Raised):
            return reject(one_line(f"validate raised {describe_exception(outcome.error)}"))
        if isinstance(outcome, TimedOut):
            return reject(f"validation did not finish: validate ran longer than {node.timeout} s")
    result = bounded(node_id, result_from_output(node_id, value))
    if result.error is not None:
        return reject(result.error)
    return Finished(result, submission_id=submission.submission_id)


def resumed(rt: Runtime, active: ActiveAttempt, ctx: NodeContext) -> Execution:
    """The execution of a ``timed_out`` or ``waiting`` active attempt, without running the
    node: route its timeout or answer, or validate its submission."""
    node_id = active.node_id
    node = rt.workflow.node(node_id)
    if active.status == "timed_out":
        return Finished(timeout_result(node_id, node))
    request = active.request
    if active.status != "waiting" or request is None:
        raise ProtocolViolationError(
            "state.get", f"active attempt {active.attempt_id} is {active.status} without a request"
        )
    if request.status == "validating":
        if not isinstance(node, CheckpointNode | AgentNode):
            raise ProtocolViolationError("state.get", f"node {node_id!r} takes no submissions")
        return _validate(rt, node_id, node, request, ctx)
    if request.status == "answered" and isinstance(node, HumanDecisionNode):
        answer = request.answer
        choice = answer.get("choice") if isinstance(answer, dict) else None
        if not isinstance(choice, str):
            return Finished(
                NodeResult.failed(f"the answer to decision {node_id!r} names no choice")
            )
        try:
            return Finished(decision_result(node_id, node, choice, DECIDED_BY_PERSON))
        except NodeValueError as exc:
            return Finished(NodeResult.failed(str(exc)))
    if request.status == "failed":  # the model never submitted it (store/reminders.py)
        answer = request.answer
        error = answer.get("error") if isinstance(answer, dict) else None
        details = answer if isinstance(answer, dict) else None
        return Finished(
            NodeResult.failed(str(error or f"step {node_id!r} was never submitted"), details)
        )
    if request.status == "timed_out":
        answer = request.answer
        if isinstance(node, HumanDecisionNode) and isinstance(answer, dict):
            choice = answer.get("choice")
            if isinstance(choice, str) and choice in node.choice_ids:
                return Finished(decision_result(node_id, node, choice, DECIDED_BY_TIMEOUT))
        return Finished(timeout_result(node_id, node))
    raise ProtocolViolationError(
        "state.get", f"request {request.request_id} is {request.status}; there is nothing to route"
    )
