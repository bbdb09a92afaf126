"""How the raw facts of one node execution become a ``NodeResult``.

The runner executes callbacks, commands and waits; these pure helpers turn what it observed
into the result the engine routes, so every runner path applies the same rules: a non-JSON
output fails the node, a disallowed exit code fails a shell node, a decision timeout takes
its default choice, and so on. No I/O, no clock.
"""

from __future__ import annotations

from typing import Final, cast

from pi_workflows.authoring import (
    HumanDecisionNode,
    JsonObject,
    JsonValue,
    Node,
    NotifyNode,
    ShellNode,
    json_problem,
)
from pi_workflows.engine.errors import NodeValueError
from pi_workflows.engine.state import NodeResult

DECIDED_BY_PERSON: Final = "person"
DECIDED_BY_TIMEOUT: Final = "timeout"


def result_from_output(node_id: str, value: object) -> NodeResult:
    """``ok`` with ``value`` if it is plain JSON, else ``failed`` with a message naming the
    node and where in the value the problem is."""
    problem = json_problem(value)
    if problem is not None:
        return NodeResult.failed(f"the output of node {node_id!r} is not JSON: {problem}")
    return NodeResult.ok(cast(JsonValue, value))  # json_problem proved it is JSON


def shell_result(node: ShellNode, exit_code: int, stdout: str, stderr: str) -> NodeResult:
    """The result of a finished shell command.

    The output is ``{"exitCode", "stdout", "stderr"}`` (the runner passes bounded, decoded
    text). An exit code outside ``allow_exit_codes`` (or death by a signal, a negative
    code) fails the node with the same object as the result's ``details``.
    """
    output: JsonObject = {"exitCode": exit_code, "stdout": stdout, "stderr": stderr}
    if exit_code in node.allow_exit_codes:
        return NodeResult.ok(output)
    if exit_code < 0:
        error = f"the command was killed by signal {-exit_code}"
    else:
        allowed = ", ".join(str(code) for code in sorted(node.allow_exit_codes))
        error = f"the command exited with code {exit_code} (allowed: {allowed})"
    return NodeResult.failed(error, details=output)


def decision_result(
    node_id: str, node: Node, choice_id: str, decided_by: str = DECIDED_BY_PERSON
) -> NodeResult:
    """The result of answering a ``human_decision`` with ``choice_id``.

    Raises ``NodeValueError`` if the node is not a decision or the choice is not declared,
    so an invalid answer is refused before anything is recorded.
    """
    if not isinstance(node, HumanDecisionNode):
        raise NodeValueError(node_id, f"is a {node.kind.value} node, not a human_decision")
    if choice_id not in node.choice_ids:
        raise NodeValueError(
            node_id,
            f"{choice_id!r} is not one of the declared choices ({', '.join(node.choice_ids)})",
        )
    return NodeResult.ok({"choice": choice_id, "decidedBy": decided_by})


def timeout_result(node_id: str, node: Node) -> NodeResult:
    """The result when a node's deadline passes.

    A ``human_decision`` with ``on_timeout`` takes its default choice (an ``ok`` result);
    any other node is ``timed_out``.
    """
    if isinstance(node, HumanDecisionNode) and node.on_timeout is not None:
        return decision_result(node_id, node, node.on_timeout.choice, DECIDED_BY_TIMEOUT)
    limit = node.timeout
    within = f" within {_duration(limit)}" if limit is not None else ""
    return NodeResult.timed_out(f"node {node_id!r} produced no result{within}")


def notify_result(node_id: str, node: NotifyNode, message: object) -> NodeResult:
    """The result of a notify node whose message evaluated to ``message``."""
    if not isinstance(message, str) or not message:
        return NodeResult.failed(
            f"the message of node {node_id!r} must be non-empty text, got {type(message).__name__}"
        )
    return NodeResult.ok({"message": message, "kind": node.notify_kind.value})


def checkpoint_request(node_id: str, value: object) -> JsonObject:
    """Normalise a checkpoint's evaluated request to a JSON object with a ``"question"``.

    A plain string becomes ``{"question": text}``. Raises ``NodeValueError`` for anything
    else that is not a JSON object with a non-empty ``"question"`` string.
    """
    if isinstance(value, str) and value.strip():
        return {"question": value}
    if isinstance(value, dict):
        problem = json_problem(value)
        if problem is not None:
            raise NodeValueError(node_id, f"the request is not JSON: {problem}")
        question = value.get("question")
        if isinstance(question, str) and question.strip():
            return dict(value)
    raise NodeValueError(
        node_id, 'a checkpoint request must be a question or a JSON object with a "question"'
    )


def require_text(node_id: str, what: str, value: object) -> str:
    """Return ``value`` if it is non-empty text, else raise ``NodeValueError``.

    For evaluated ``prompt``, ``title`` and ``details`` fields.
    """
    if isinstance(value, str) and value.strip():
        return value
    raise NodeValueError(node_id, f"{what} must be non-empty text, got {type(value).__name__}")


def _duration(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds:g} seconds"
