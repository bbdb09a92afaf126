"""The pure graph engine: routing, outcomes, step limits, snapshots and step-contract text.

Imports only ``pi_workflows.authoring``. Everything here is pure and synchronous: no I/O, no
clock, no randomness, no threads. The runner executes node callbacks itself and calls the
engine only to turn what happened into a ``NodeResult`` and to decide the next step.

Modules: ``transitions`` (``advance``, ``next_transition`` and the ``Transition`` union),
``state`` (``NodeResult``, ``RunState``), ``outcomes`` (result helpers per node kind, effect
keys), ``snapshot`` (definition snapshot and digest), ``contract`` (agent step contract),
``json_values`` (JSON checks and canonical bytes), ``errors``.
"""

from pi_workflows.engine.contract import SUBMIT_ACTION, WORKFLOW_TOOL, agent_prompt, step_contract
from pi_workflows.engine.errors import NodeValueError, NotJsonError, UnknownNodeError
from pi_workflows.engine.json_values import canonical_json, check_json, preview
from pi_workflows.engine.outcomes import (
    DECIDED_BY_PERSON,
    DECIDED_BY_TIMEOUT,
    checkpoint_request,
    decision_result,
    notify_result,
    require_text,
    result_from_output,
    shell_result,
    timeout_result,
)
from pi_workflows.engine.snapshot import SNAPSHOT_SCHEMA, definition_digest, snapshot
from pi_workflows.engine.state import NodeResult, RunState
from pi_workflows.engine.transitions import (
    Complete,
    Fail,
    FailReason,
    GoTo,
    Step,
    TimeOut,
    Transition,
    advance,
    first_node,
    next_transition,
)

__all__ = [
    # deciding the next step
    "advance",
    "next_transition",
    "first_node",
    "Step",
    "Transition",
    "GoTo",
    "Complete",
    "Fail",
    "TimeOut",
    "FailReason",
    # run state and results
    "RunState",
    "NodeResult",
    "result_from_output",
    "shell_result",
    "decision_result",
    "timeout_result",
    "notify_result",
    "checkpoint_request",
    "require_text",
    "DECIDED_BY_PERSON",
    "DECIDED_BY_TIMEOUT",
    # JSON
    "check_json",
    "canonical_json",
    "preview",
    # snapshot
    "snapshot",
    "definition_digest",
    "SNAPSHOT_SCHEMA",
    # step contract
    "step_contract",
    "agent_prompt",
    "WORKFLOW_TOOL",
    "SUBMIT_ACTION",
    # errors
    "NotJsonError",
    "UnknownNodeError",
    "NodeValueError",
]
