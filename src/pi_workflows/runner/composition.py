"""Child runs in the runner: a ``subworkflow`` or ``fan_out`` node starts them and, once they
all ended, makes its result from theirs.

Runs in the runner child; never opens the database. ``spawn_children`` evaluates the child
inputs (``input(ctx)``, or ``items(ctx)`` and ``input(ctx, item)``), describes the child
workflow once (it loads it as the resolver would: its definition snapshot, digest, source
identity and mounted modules, which every child run records), checks each input against
the child workflow's input schema, if it has one (as the server checks a ``run.start``),
and sends ``node.spawn``:
the server records the join, starts the first children and the run waits with no runner
(the child exits). ``joined`` reads the children's ends in item order (``join.results``)
and turns them into the node's result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from pi_workflows.authoring import (
    MAX_DEPTH,
    MAX_ITEMS,
    FanOutNode,
    JsonValue,
    NodeContext,
    SubworkflowNode,
)
from pi_workflows.engine import NodeResult, canonical_json, check_json
from pi_workflows.engine.errors import NotJsonError
from pi_workflows.protocol.json_schema import value_problem
from pi_workflows.runner.blobs import fetch
from pi_workflows.runner.callbacks import Deadline, call, evaluate
from pi_workflows.runner.envelope import ActiveAttempt, JoinPage, convert
from pi_workflows.runner.errors import ProtocolViolationError
from pi_workflows.runner.runtime import (
    Attempt,
    Execution,
    Finished,
    Runtime,
    Waited,
    value_or_failure,
)
from pi_workflows.sources import WorkflowLoadError, WorkflowNotFoundError, load, resolve

MAX_SPAWN_BYTES: Final = 512 * 1024
"""The most canonical JSON all the children's inputs of one node may take together (they
travel in one ``node.spawn`` frame)."""

JOIN_PAGE: Final = 200
"""Children per ``join.results`` page."""

_OUTCOME_OF: Final = {
    "completed": "ok",
    "failed": "failed",
    "timed_out": "timed_out",
    "cancelled": "cancelled",
    "skipped": "skipped",
}


def _json(node_id: str, what: str, value: object) -> tuple[JsonValue, NodeResult | None]:
    try:
        return check_json(value, f"{what} of node {node_id!r}"), None
    except NotJsonError as exc:
        return None, NodeResult.failed(str(exc))


def _inputs(
    node_id: str, node: SubworkflowNode | FanOutNode, ctx: NodeContext, deadline: Deadline
) -> tuple[list[JsonValue], NodeResult | None]:
    """The children's inputs, in item order, or the failure that stops the node."""
    if isinstance(node, SubworkflowNode):
        if node.input is None:
            return [{}], None
        label = f"node {node_id!r} input"
        outcome = call(node.input, (ctx,), label=label, deadline=deadline,
                       cancellation=ctx.cancellation)  # fmt: skip
        given, failed = value_or_failure(outcome, node_id, node, label)
        if failed is not None:
            return [], failed
        found, bad = _json(node_id, "input", given)
        return ([], bad) if bad is not None else ([found], None)
    label = f"node {node_id!r} items"
    outcome = evaluate(node.items, ctx=ctx, label=label, deadline=deadline,
                       cancellation=ctx.cancellation)  # fmt: skip
    items, failed = value_or_failure(outcome, node_id, node, label)
    if failed is not None:
        return [], failed
    if not isinstance(items, list):
        return [], NodeResult.failed(
            f"node {node_id!r} items must return a JSON list, got {type(items).__name__}"
        )
    if len(items) > MAX_ITEMS:
        return [], NodeResult.failed(
            f"node {node_id!r} items returned {len(items)} items; a fan_out starts at most"
            f" {MAX_ITEMS} children (split the list, or fan out in two levels)"
        )
    inputs: list[JsonValue] = []
    for index, item in enumerate(items):
        value: object = item
        if node.input is not None:
            label = f"node {node_id!r} input of item {index}"
            result = call(node.input, (ctx, item), label=label, deadline=deadline,
                          cancellation=ctx.cancellation)  # fmt: skip
            value, failed = value_or_failure(result, node_id, node, label)
            if failed is not None:
                return [], failed
        found, bad = _json(node_id, f"input of item {index}", value)
        if bad is not None:
            return [], bad
        inputs.append(found)
    return inputs, None


def spawn_children(
    rt: Runtime,
    node: SubworkflowNode | FanOutNode,
    attempt: Attempt,
    ctx: NodeContext,
    deadline: Deadline,
) -> Execution:
    """Start the node's child runs (``node.spawn``); the run then waits for all of them."""
    node_id = attempt.node_id
    inputs, failed = _inputs(node_id, node, ctx, deadline)
    if failed is not None:
        return Finished(failed)
    if not inputs:  # a fan_out over an empty list: nothing to wait for
        return Finished(NodeResult.ok([]))
    if rt.depth + 1 > MAX_DEPTH:
        return Finished(
            NodeResult.failed(
                f"node {node_id!r} would start a child run {rt.depth + 1} levels deep; runs"
                f" nest at most {MAX_DEPTH} levels (does a workflow fan out to itself?)"
            )
        )
    size = sum(len(canonical_json(value)) for value in inputs)
    if size > MAX_SPAWN_BYTES:
        return Finished(
            NodeResult.failed(
                f"node {node_id!r}'s child inputs are {size} bytes of JSON together; the limit"
                f" is {MAX_SPAWN_BYTES} (pass each child less, e.g. a path instead of a file)"
            )
        )
    spec = rt.child_specs.get(node_id)
    if spec is None:
        raise ProtocolViolationError("node.spawn", f"node {node_id!r} has no child workflow")
    try:
        loaded = load(resolve(spec, Path(rt.project_dir) if rt.project_dir else None))
    except (WorkflowLoadError, WorkflowNotFoundError) as exc:
        return Finished(NodeResult.failed(f"node {node_id!r}: the child workflow: {exc}"))
    typed = loaded.workflow.input_contract
    if typed is not None:
        for index, value in enumerate(inputs):
            problem = value_problem(typed.schema, value, "input")
            if problem is not None:
                which = "the child's" if isinstance(node, SubworkflowNode) else f"child {index}'s"
                return Finished(
                    NodeResult.failed(
                        f"node {node_id!r}: {which} input does not match the input schema"
                        f" of workflow {loaded.workflow.name!r}: {problem}"
                    )
                )
    identity = loaded.identity
    payload: dict[str, Any] = {
        "attemptId": attempt.attempt_id,
        "kind": "subworkflow" if isinstance(node, SubworkflowNode) else "fan_out",
        "child": {
            "workflowName": loaded.workflow.name,
            "definition": loaded.snapshot,
            "definitionDigest": loaded.digest,
            "source": {
                "kind": identity.kind.value,
                "ref": identity.locator,
                "revision": identity.sha256,
                "projectDir": rt.project_dir,
                "mounted": dict(loaded.mounted),
            },
        },
        "inputs": inputs,
        "concurrency": node.concurrency if isinstance(node, FanOutNode) else 1,
        "failFast": isinstance(node, FanOutNode) and node.fail_fast,
        "detached": node.detached,
    }
    if isinstance(node, FanOutNode) and node.rate is not None:
        payload["rate"] = {"count": node.rate.count, "periodMs": node.rate.period_ms}
    rt.channel.request("node.spawn", payload)
    return Waited()


def joined(rt: Runtime, node: SubworkflowNode | FanOutNode, active: ActiveAttempt) -> Finished:
    """A waiting attempt whose children all ended: the node's result from theirs."""
    wait = active.wait
    if wait is None or wait.kind != "children" or wait.status != "fired":
        raise ProtocolViolationError(
            "state.get", f"attempt {active.attempt_id} has no finished join to route"
        )
    children: list[dict[str, Any]] = []
    after = 0
    while True:
        page = convert(
            rt.channel.request(
                "join.results", {"waitId": wait.wait_id, "after": after, "limit": JOIN_PAGE}
            ),
            JoinPage,
            "join.results",
        )
        for item in page.items:
            output = fetch(rt.channel, item.output_ref) if item.output_ref else item.output
            children.append(
                {"item": item.item, "run_id": item.run_id, "status": item.status,
                 "output": output, "error": item.error}
            )  # fmt: skip
        if page.next is None:
            break
        after = page.next
    if isinstance(node, SubworkflowNode):
        return Finished(_subworkflow_result(active.node_id, children))
    return Finished(_fan_out_result(children))


def _subworkflow_result(node_id: str, children: list[dict[str, Any]]) -> NodeResult:
    if len(children) != 1:
        raise ProtocolViolationError("join.results", f"a subworkflow has {len(children)} children")
    child = children[0]
    status, run_id = child["status"], child["run_id"]
    if status == "completed":
        return NodeResult.ok(child["output"])
    if status == "timed_out":
        return NodeResult.timed_out(f"child run {run_id} timed out: {child['error']}")
    if status == "cancelled":
        return NodeResult.failed(f"child run {run_id} was cancelled: {child['error']}")
    return NodeResult.failed(f"child run {run_id} failed: {child['error']}")


def _fan_out_result(children: list[dict[str, Any]]) -> NodeResult:
    listed: list[JsonValue] = [
        {
            "runId": child["run_id"],
            "outcome": _OUTCOME_OF.get(child["status"], child["status"]),
            "output": child["output"],
            "error": child["error"],
        }
        for child in children
    ]
    failed = [c for c in children if c["status"] != "completed"]
    if not failed:
        return NodeResult.ok(listed)
    first = failed[0]
    return NodeResult.failed(
        f"{len(failed)} of {len(children)} children did not complete; the first: child"
        f" {first['item']} ({first['run_id'] or 'not started'}) {first['status']}"
        + (f": {first['error']}" if first["error"] else ""),
        details={"children": listed},
    )


__all__ = ["joined", "spawn_children"]
