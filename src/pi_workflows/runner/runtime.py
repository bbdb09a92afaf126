"""What executing one node needs, and what executing it produces.

Runs in the runner child; never opens the database. ``Runtime`` bundles the channel, the
loaded workflow and the child's supervision objects; ``Attempt`` is one committed node
attempt; ``Finished``, ``Waited`` and ``Parked`` are the ways a node execution ends. Also
builds the
read-only ``NodeContext`` a callback receives and the helpers that turn a callback outcome
into a ``NodeResult`` the same way for every node kind.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeAlias

from pi_workflows.authoring import (
    CancellationSignal,
    JsonObject,
    JsonValue,
    Node,
    NodeContext,
    Workflow,
)
from pi_workflows.engine import NodeResult, RunState, timeout_result
from pi_workflows.runner import requests
from pi_workflows.runner.callbacks import CallOutcome, Raised, Returned, TimedOut, log_exception
from pi_workflows.runner.channel import Channel
from pi_workflows.runner.envelope import ActiveAttempt, AttemptReply
from pi_workflows.runner.errors import describe_exception
from pi_workflows.runner.shell import ProcessGroups
from pi_workflows.runner.termination import Termination


@dataclass(frozen=True)
class Runtime:
    """Everything shared by the node executions of one runner generation."""

    channel: Channel
    workflow: Workflow
    run_id: str
    round: int
    input: JsonValue
    termination: Termination
    groups: ProcessGroups
    validate_seconds: float | None = None  # a wait_event validate's bound (the server's)
    # Node id -> the spec its child runs start from (``sources.LoadedWorkflow.child_specs``).
    child_specs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    project_dir: str | None = None  # where child workflow names are looked up
    depth: int = 0  # how deep this run nests in its tree (a root is 0)
    fire_at: int | None = None  # epoch ms of the schedule fire that started the run
    trace_id: str = ""  # the run's trace id, 32 hex digits (``runner/tracing.py``)
    evidence_dir: str | None = None  # where effect outcomes wait for the server (evidence.py)
    cancel_reason: str | None = None  # set while the run's cleanup node runs (ctx.cancel_reason)


@dataclass(frozen=True)
class Attempt:
    """One committed node attempt (from ``node.start``, ``nextAttempt`` or ``active``)."""

    @classmethod
    def of(cls, reply: AttemptWire) -> Attempt:
        """The attempt a server reply (``AttemptReply`` or ``ActiveAttempt``) names."""
        return cls(
            reply.attempt_id,
            reply.node_id,
            reply.visit,
            reply.attempt_no,
            reply.try_no,
            reply.settings_change or 0,
            reply.settings,
        )

    attempt_id: str
    node_id: str
    visit: int
    attempt_no: int = 1
    try_no: int = 1
    # The run's settings as this attempt started with them (``ctx.settings``; a
    # ``settings_route`` attempt evaluated again gets the newer ones).
    settings_change: int = 0
    settings: JsonValue = None


@dataclass(frozen=True)
class Finished:
    """The node produced a result; ``message`` is a notify node's ``{kind, body}``;
    ``submission_id`` the validated submission the result accepts, ``signal_id`` the event
    a ``wait_event`` node consumes (each in the same commit)."""

    result: NodeResult
    message: JsonObject | None = None
    submission_id: str | None = None
    signal_id: str | None = None


@dataclass(frozen=True)
class Waited:
    """The node's interactive request (``request_id``) or durable wait committed; the child
    exits now."""

    request_id: str | None = None


@dataclass(frozen=True)
class Parked:
    """The run was parked (an uncertain manual effect); the child exits now."""

    reason: str


Execution: TypeAlias = Finished | Waited | Parked
AttemptWire: TypeAlias = AttemptReply | ActiveAttempt


def node_context(
    rt: Runtime, state: RunState, attempt: Attempt, cancel: CancellationSignal
) -> NodeContext:
    """The read-only ``ctx`` of ``attempt`` over the run state before it."""
    send = requests.signaller(rt.channel, attempt.attempt_id, cancel)
    return NodeContext(
        workflow=rt.workflow.name,
        run_id=rt.run_id,
        node_id=attempt.node_id,
        attempt_id=attempt.attempt_id,
        visit=attempt.visit,
        input=rt.input,
        outputs=MappingProxyType(dict(state.outputs)),
        results=MappingProxyType({k: MappingProxyType(dict(v)) for k, v in state.results.items()}),
        cancellation=cancel,
        trace_id=rt.trace_id,
        settings=copy.deepcopy(attempt.settings),
        settings_change=attempt.settings_change,
        cancel_reason=rt.cancel_reason,
        publish=requests.publisher(rt.channel, attempt.attempt_id, cancel),
        signal=send,
        children=requests.children_lister(rt.channel, cancel, send),
        fire_at=None
        if rt.fire_at is None
        else dt.datetime.fromtimestamp(rt.fire_at / 1000, tz=dt.UTC),
    )


def failure(outcome: Raised | TimedOut, node_id: str, node: Node, label: str) -> NodeResult:
    """The result of a callback that raised (one line: type and message) or timed out."""
    if isinstance(outcome, TimedOut):
        return timeout_result(node_id, node)
    log_exception(label, outcome.error)
    return NodeResult.failed(describe_exception(outcome.error), cause=outcome.error)


def value_or_failure(
    outcome: CallOutcome, node_id: str, node: Node, label: str
) -> tuple[object, NodeResult | None]:
    """``(value, None)`` for a returned value, else ``(None, failed or timed-out result)``."""
    if isinstance(outcome, Returned):
        return outcome.value, None
    return None, failure(outcome, node_id, node, label)
