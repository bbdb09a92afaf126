"""pi-workflows: a durable workflow runtime for AI-agent workflows.

The package root re-exports the public authoring API (see ``docs/authoring.md``).
Everything else lives in subpackages with a layer table in ``DESIGN.md`` section 3.

The re-exports are resolved on first use (PEP 562): importing any subpackage (the CLI, the
client, the server) runs this module, and none of them needs the authoring API, whose
imports cost tens of milliseconds at every process start.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pi_workflows.authoring import (
        ActionContext,
        AttemptFailed,
        ChildRun,
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
        fan_out,
        human_decision,
        idempotent_effect,
        manual_effect,
        minutes,
        notify,
        retry,
        seconds,
        settings_route,
        shell,
        sleep,
        subworkflow,
        switch,
        wait_event,
    )

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # the workflow and its nodes
    "Workflow",
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
    "retry",
    "subworkflow",
    "fan_out",
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
    "ChildRun",
    "Outcome",
    "Rejected",
    "AttemptFailed",
    "WorkflowDefinitionError",
]


def __getattr__(name: str) -> Any:
    """Resolve a public authoring name on first use (then it is a plain module global)."""
    if name in __all__ and name != "__version__":
        from pi_workflows import authoring  # noqa: PLC0415 - lazy on purpose, see above

        value = getattr(authoring, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pi_workflows' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
