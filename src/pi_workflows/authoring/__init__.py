"""The public API to define workflows: nodes, routes, effects, choices and contexts.

Imports nothing else from ``pi_workflows``; every other layer builds on it. The names most
authors need are re-exported from ``pi_workflows`` itself; this package also exports the
node classes, context types and helpers the runner and engine use. See
``docs/authoring.md`` for the author's guide.

Modules: ``workflow`` (the ``Workflow`` class), ``nodes`` (node kinds and constructors),
``routing`` (edges, switches, paths), ``contracts`` (typed contracts: input, output and
answer schemas), ``effects`` (effect declarations), ``retries``
(retry policies), ``composition`` (child runs: subworkflow, fan_out), ``kinds`` (the node
kinds), ``context``
(``ctx`` types and cancellation), ``values`` (JSON values, outcomes, durations),
``validation`` (load-time graph checks, every problem at once), ``locations`` (the line each
node and route was written at), ``errors``.
"""

from pi_workflows.authoring.composition import (
    MAX_DEPTH,
    MAX_ITEMS,
    FanOutNode,
    SubworkflowNode,
    WorkflowLike,
    fan_out,
    subworkflow,
)
from pi_workflows.authoring.context import (
    ActionContext,
    CancellationSignal,
    ChildRun,
    NodeContext,
    evaluate,
    invoke,
)
from pi_workflows.authoring.contracts import Contract
from pi_workflows.authoring.effects import Effect, EffectKind, idempotent_effect, manual_effect
from pi_workflows.authoring.errors import NodeCancelledError, Rejected, WorkflowDefinitionError
from pi_workflows.authoring.kinds import NodeKind
from pi_workflows.authoring.nodes import (
    AGENT_DEFAULT_TIMEOUT,
    EVENT_NAME_PATTERN_TEXT,
    ActionCallback,
    ActionNode,
    AgentNode,
    AssistantMessage,
    CheckpointNode,
    Choice,
    ComputeNode,
    HumanDecisionNode,
    Node,
    NodeCallback,
    NotifyKind,
    NotifyNode,
    OnTimeout,
    ShellNode,
    SleepNode,
    TextSpec,
    Validator,
    WaitEventNode,
    action,
    agent,
    assistant_message,
    checkpoint,
    choice,
    compute,
    decision,
    env_problem,
    human_decision,
    notify,
    settings_route,
    shell,
    sleep,
    wait_event,
)
from pi_workflows.authoring.retries import (
    MAX_DELAY_SECONDS,
    AttemptFailed,
    RetryPolicy,
    class_name,
    class_names,
    retry,
)
from pi_workflows.authoring.routing import (
    Case,
    CaseValue,
    Edge,
    FieldPath,
    PathScope,
    Route,
    Switch,
    case_key,
    edge,
    parse_path,
    switch,
)
from pi_workflows.authoring.validation import CHOICE_PATTERN, NAME_PATTERN, RESERVED_NODE_IDS
from pi_workflows.authoring.values import (
    CANCELLED,
    JsonObject,
    JsonValue,
    Outcome,
    json_problem,
    minutes,
    seconds,
)
from pi_workflows.authoring.workflow import DEFAULT_MAX_STEPS, Workflow

__all__ = [
    # the workflow
    "Workflow",
    "DEFAULT_MAX_STEPS",
    # node constructors
    "compute",
    "settings_route",
    "action",
    "shell",
    "notify",
    "agent",
    "assistant_message",
    "decision",
    "checkpoint",
    "human_decision",
    "choice",
    "sleep",
    "wait_event",
    "subworkflow",
    "fan_out",
    "MAX_ITEMS",
    "MAX_DEPTH",
    # retries
    "retry",
    "RetryPolicy",
    "MAX_DELAY_SECONDS",
    "AttemptFailed",
    "class_name",
    "class_names",
    # routing
    "edge",
    "switch",
    # effects
    "idempotent_effect",
    "manual_effect",
    "Effect",
    "EffectKind",
    # durations
    "minutes",
    "seconds",
    # errors
    "Rejected",
    "WorkflowDefinitionError",
    "NodeCancelledError",
    # contexts
    "NodeContext",
    "ActionContext",
    "CancellationSignal",
    "ChildRun",
    "invoke",
    "evaluate",
    # node classes
    "Node",
    "NodeKind",
    "ComputeNode",
    "ActionNode",
    "ShellNode",
    "NotifyNode",
    "NotifyKind",
    "AgentNode",
    "AssistantMessage",
    "CheckpointNode",
    "HumanDecisionNode",
    "SleepNode",
    "WaitEventNode",
    "SubworkflowNode",
    "FanOutNode",
    "WorkflowLike",
    "Choice",
    "OnTimeout",
    "AGENT_DEFAULT_TIMEOUT",
    "EVENT_NAME_PATTERN_TEXT",
    "NodeCallback",
    "ActionCallback",
    "Validator",
    "TextSpec",
    "Contract",
    "env_problem",
    # route classes and paths
    "Route",
    "Edge",
    "Switch",
    "Case",
    "CaseValue",
    "FieldPath",
    "PathScope",
    "parse_path",
    "case_key",
    # values and names
    "JsonValue",
    "JsonObject",
    "Outcome",
    "CANCELLED",
    "json_problem",
    "NAME_PATTERN",
    "CHOICE_PATTERN",
    "RESERVED_NODE_IDS",
]
