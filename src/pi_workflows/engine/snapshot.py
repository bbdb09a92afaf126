"""The definition snapshot of a workflow and its digest.

The snapshot is a JSON description of a loaded workflow's topology (nodes with kind,
timeout, effect, choices and expected output; routes with their cases), with no code and
no callback results. The server stores it with a run so it can show and check the run
without loading workflow code. The digest is the sha256 of its canonical JSON (sorted keys,
compact separators, UTF-8), identical across processes and hash seeds.
"""

from __future__ import annotations

import hashlib
from typing import Final

from pi_workflows.authoring import (
    ActionNode,
    AgentNode,
    AssistantMessage,
    CheckpointNode,
    ComputeNode,
    Edge,
    Effect,
    FanOutNode,
    HumanDecisionNode,
    JsonObject,
    JsonValue,
    Node,
    NotifyNode,
    RetryPolicy,
    Route,
    ShellNode,
    SleepNode,
    SubworkflowNode,
    WaitEventNode,
    Workflow,
    case_key,
)
from pi_workflows.engine.json_values import canonical_json

SNAPSHOT_SCHEMA: Final = "pi-workflows.definition.v1"
"""The ``schema`` value of every snapshot this version writes."""


def snapshot(workflow: Workflow) -> JsonObject:
    """The JSON topology snapshot of ``workflow``.

    Shape (camelCase keys)::

        {"schema": "pi-workflows.definition.v1", "name": ..., "start": ..., "maxSteps": ...,
         "nodes": {id: {"kind": ..., "timeoutMs": int | null, ...kind fields}},
         "edges": [{"from": a, "to": b} | {"from": a, "on": "$.x",
                    "cases": [{"when": v, "to": t}], "default": t | null}]}

    Timeouts are whole milliseconds so no float formatting enters the digest. Edges are
    sorted by source and switch cases by value, so declaration order does not matter.
    Typed contracts add their JSON Schema, only when given (so every digest written before
    they existed is kept): ``inputSchema`` at the top, ``outputSchema`` on an agent node,
    ``answerSchema`` on a checkpoint. Live settings add ``settingsSchema``,
    ``settingsDefaults`` and ``settingsChangedBy`` at the top and ``settingsRoute`` on a
    ``settings_route`` node, only when declared (the server changes settings from these).
    A run deadline adds ``deadlineMs`` at the top, only when declared (the server arms it
    when a run starts); a cleanup node adds ``onCancel`` (its id; the node is in ``nodes``).
    """
    nodes: JsonObject = {node_id: _node(node) for node_id, node in workflow.nodes.items()}
    edges: list[JsonValue] = [_route(route) for route in sorted(workflow.edges, key=_source)]
    data: JsonObject = {
        "schema": SNAPSHOT_SCHEMA,
        "name": workflow.name,
        "start": workflow.start,
        "maxSteps": workflow.max_steps,
        "nodes": nodes,
        "edges": edges,
    }
    if workflow.input_contract is not None:
        data["inputSchema"] = workflow.input_contract.schema
    settings = workflow.settings
    if settings is not None:
        data["settingsSchema"] = settings.contract.schema
        data["settingsDefaults"] = settings.defaults
        data["settingsChangedBy"] = list(settings.changed_by)
    if workflow.deadline is not None:
        data["deadlineMs"] = round(workflow.deadline * 1000)
    if workflow.on_cancel is not None:
        data["onCancel"] = workflow.on_cancel
    return data


def definition_digest(snapshot: JsonObject) -> str:
    """The sha256 hex digest of the snapshot's canonical JSON bytes."""
    return hashlib.sha256(canonical_json(snapshot)).hexdigest()


def _source(route: Route) -> str:
    return route.source


def _millis(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1000)


def _effect(effect: Effect | None) -> JsonValue:
    if effect is None:  # unreachable for a validated workflow; keeps the type total
        return None
    return {"kind": effect.kind.value, "type": effect.type}


def _retry(policy: RetryPolicy | None) -> JsonValue:
    if policy is None:
        return None
    outcomes: list[JsonValue] = [*sorted(policy.on)]
    data: JsonObject = {
        "attempts": policy.attempts,
        "delayMs": _millis(policy.delay),
        "backoff": policy.backoff,
        "maxDelayMs": _millis(policy.max_delay),
        "jitter": policy.jitter,
        "on": outcomes,
        "onExhausted": policy.on_exhausted,
    }
    # Only when used, so the snapshot of a policy by outcome alone stays as it was.
    if policy.on_errors:
        data["onErrors"] = [*sorted(policy.on_errors)]
    if policy.predicate is not None:
        data["predicate"] = True
    if policy.never:
        data["never"] = [*sorted(policy.never)]
    return data


def _checkpoint(node: CheckpointNode, data: JsonObject) -> None:
    data["validates"] = node.validate is not None
    if node.answer is not None:
        data["answerSchema"] = node.answer.schema
    if node.for_person:  # only when set: snapshots of other checkpoints stay as they were
        data["forPerson"] = True


def _compute(node: ComputeNode) -> JsonObject:
    data: JsonObject = {}
    if node.retry is not None:
        data["retry"] = _retry(node.retry)
    if node.settings_route:
        data["settingsRoute"] = True
    return data


def _decision(node: HumanDecisionNode) -> JsonObject:
    rule = node.on_timeout
    return {
        "choices": [
            {"id": c.id, "label": c.label, "description": c.description} for c in node.choices
        ],
        "onTimeout": (
            None if rule is None else {"afterMs": _millis(rule.after), "choice": rule.choice}
        ),
    }


def _node(node: Node) -> JsonObject:
    data: JsonObject = {"kind": node.kind.value, "timeoutMs": _millis(node.timeout)}
    audience = getattr(node, "audience", None)  # human_decision and notify (docs/channels.md)
    if audience is not None:
        data["audience"] = audience
    match node:
        case ComputeNode():
            data.update(_compute(node))
        case ActionNode():
            data["effect"] = _effect(node.effect)
            if node.retry is not None:
                data["retry"] = _retry(node.retry)
        case ShellNode():
            data["effect"] = _effect(node.effect)
            if node.retry is not None:
                data["retry"] = _retry(node.retry)
            codes: list[JsonValue] = [*sorted(node.allow_exit_codes)]
            data["allowExitCodes"] = codes
        case NotifyNode():
            data["notifyKind"] = node.notify_kind.value
        case AgentNode():
            replies = isinstance(node.expected_output, AssistantMessage)
            data["expectedOutput"] = None if replies else str(node.expected_output)
            data["assistantMessage"] = replies
            data["validates"] = node.validate is not None
            tools = node.allowed_tools
            data["allowedTools"] = list(tools) if tools is not None else None
            if node.route_field is not None:
                data["routeField"] = node.route_field
                data["routes"] = list(node.routes)
            if node.output is not None:
                data["outputSchema"] = node.output.schema
        case CheckpointNode():
            _checkpoint(node, data)
        case HumanDecisionNode():
            data.update(_decision(node))
        case SleepNode():
            data["durationMs"] = _millis(node.duration)
            data["untilCallback"] = node.until is not None
        case WaitEventNode():
            data["event"] = node.name
            data["validates"] = node.validate is not None
        case SubworkflowNode() | FanOutNode():
            target = node.workflow
            # A name as written, or the object's workflow name (its file and binding are
            # the child runs' own source identity, recorded when each starts).
            data["workflow"] = target if isinstance(target, str) else {"object": target.name}
            data["detached"] = node.detached
            if isinstance(node, FanOutNode):
                data["concurrency"] = node.concurrency
                if node.rate is not None:  # only when set: older snapshots stay as they were
                    data["rate"] = node.rate.text
                data["failFast"] = node.fail_fast
    return data


def _route(route: Route) -> JsonObject:
    if isinstance(route, Edge):
        return {"from": route.source, "to": route.target}
    cases = sorted(route.cases, key=lambda case: _case_order(case.value))
    data: JsonObject = {
        "from": route.source,
        "on": route.on,
        "cases": [{"when": case.value, "to": case.target} for case in cases],
        "default": route.default,
    }
    # Only when given, so the digest of every switch written before these existed is kept.
    if route.failed is not None:
        data["failed"] = route.failed
    if route.timed_out is not None:
        data["timedOut"] = route.timed_out
    return data


def _case_order(value: object) -> tuple[str, str]:
    kind, plain = case_key(value)
    return (kind, repr(plain))
