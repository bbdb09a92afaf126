"""pi-workflows: a durable workflow runtime for AI-agent workflows.

The package root re-exports the public authoring API (see ``docs/authoring.md``).
Everything else lives in subpackages with a layer table in ``DESIGN.md`` section 3.
"""

from pi_workflows.authoring import (
    ActionContext,
    NodeContext,
    Outcome,
    Rejected,
    Workflow,
    WorkflowDefinitionError,
    action,
    agent,
    assistant_message,
    checkpoint,
    choice,
    compute,
    decision,
    edge,
    human_decision,
    idempotent_effect,
    manual_effect,
    minutes,
    notify,
    seconds,
    shell,
    switch,
)

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # the workflow and its nodes
    "Workflow",
    "compute",
    "action",
    "shell",
    "notify",
    "agent",
    "assistant_message",
    "decision",
    "checkpoint",
    "human_decision",
    "choice",
    # routing
    "edge",
    "switch",
    # effects
    "idempotent_effect",
    "manual_effect",
    # durations
    "minutes",
    "seconds",
    # what callbacks see and raise
    "NodeContext",
    "ActionContext",
    "Outcome",
    "Rejected",
    "WorkflowDefinitionError",
]
