"""Executing one node attempt, by kind.

Runs in the runner child; never opens the database. ``execute`` gives the attempt its
deadline (the node timeout, counted from the moment the attempt was committed) and its
cancellation signal, builds ``ctx``, and runs the kind's rule:

- ``compute``: ``run(ctx)`` -> output;
- ``notify``: ``message`` -> ``{message, kind}`` plus the workflow message ``{kind, body}``
  that ``node.finish`` records in the same commit;
- ``action`` / ``shell``: inside a managed effect (``effects.py``);
- ``checkpoint`` / ``human_decision`` / ``agent``: a durable request (``waits.py``);
- ``sleep`` / ``wait_event``: a durable wait (``durable.py``);
- ``subworkflow`` / ``fan_out``: child runs and their join (``composition.py``).
"""

from __future__ import annotations

from pi_workflows.authoring import (
    ActionNode,
    AgentNode,
    CancellationSignal,
    CheckpointNode,
    ComputeNode,
    FanOutNode,
    HumanDecisionNode,
    JsonObject,
    NodeContext,
    NotifyNode,
    ShellNode,
    SleepNode,
    SubworkflowNode,
    WaitEventNode,
)
from pi_workflows.engine import NodeResult, RunState, notify_result, result_from_output
from pi_workflows.runner.callbacks import Deadline, call, evaluate
from pi_workflows.runner.composition import spawn_children
from pi_workflows.runner.durable import await_event, execution_timeout, sleep_node
from pi_workflows.runner.effects import run_action, run_shell
from pi_workflows.runner.logs import capture
from pi_workflows.runner.runtime import (
    Attempt,
    Execution,
    Finished,
    Parked,
    Runtime,
    node_context,
    value_or_failure,
)
from pi_workflows.runner.values import bounded
from pi_workflows.runner.waits import request_wait


def execute(rt: Runtime, state: RunState, attempt: Attempt) -> Execution:
    """Run ``attempt`` of its node over ``state`` (the run state before it)."""
    node_id = attempt.node_id
    node = rt.workflow.node(node_id)
    capture.begin(attempt.attempt_id)
    deadline = Deadline(execution_timeout(node))
    cancellation = CancellationSignal()
    rt.termination.watch(cancellation)
    ctx = node_context(rt, state, attempt, cancellation)
    try:
        match node:
            case ComputeNode():
                label = f"node {node_id!r} run"
                outcome = call(
                    node.run, (ctx,), label=label, deadline=deadline, cancellation=cancellation
                )
                value, failed = value_or_failure(outcome, node_id, node, label)
                if failed is not None:
                    return Finished(bounded(node_id, failed))
                return Finished(bounded(node_id, result_from_output(node_id, value)))
            case NotifyNode():
                return _notify(node_id, node, ctx, deadline)
            case ActionNode():
                return Finished(bounded(node_id, run_action(rt, node, attempt, ctx, deadline)))
            case ShellNode():
                result = run_shell(rt, node, attempt, ctx, deadline, cancellation)
                if isinstance(result, Parked):
                    return result
                return Finished(bounded(node_id, result))
            case CheckpointNode() | HumanDecisionNode() | AgentNode():
                return request_wait(rt, node, attempt, ctx, deadline)
            case SleepNode():
                return sleep_node(rt, node, attempt, ctx, deadline)
            case WaitEventNode():
                return await_event(rt, node, attempt, ctx)
            case SubworkflowNode() | FanOutNode():
                return spawn_children(rt, node, attempt, ctx, deadline)
    finally:
        rt.termination.watch(None)


def _notify(node_id: str, node: NotifyNode, ctx: NodeContext, deadline: Deadline) -> Finished:
    label = f"node {node_id!r} message"
    outcome = evaluate(
        node.message, ctx=ctx, label=label, deadline=deadline, cancellation=ctx.cancellation
    )
    text, failed = value_or_failure(outcome, node_id, node, label)
    result: NodeResult = failed if failed is not None else notify_result(node_id, node, text)
    result = bounded(node_id, result)
    if result.error is not None or not isinstance(text, str):
        return Finished(result)
    note: JsonObject = {"kind": node.notify_kind.value, "body": text}
    if node.audience is not None:
        note["audience"] = node.audience
    return Finished(result, note)
