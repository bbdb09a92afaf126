"""The graph interpreter: given one node result, decide where the run goes next.

Pure and synchronous: no I/O, no clock, no randomness. The runner executes a node, builds a
``NodeResult``, and calls ``advance`` (or ``next_transition``) with the run's durable state
from before that result; it persists the returned state and follows the transition.

Routing rules (DESIGN.md section 4):

- ``ok`` and no outgoing route: the run completes with the node's output.
- ``ok`` and an ``edge``: go to its target.
- ``ok`` and a ``switch``: read the value at the path (``$.x`` in the output, ``$result.x``
  in the result record); a matching case wins, else the default, else the run fails
  naming the value and the node. A missing value fails the run naming the path.
- ``failed`` / ``timed_out``: continue only through a ``$result.outcome`` switch with a case
  for that outcome; otherwise the run fails / times out with the node's error. Defaults
  never apply.
- Every executed node counts one step; a transition that would start step
  ``max_steps + 1`` fails the run instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, Final, TypeAlias

from pi_workflows.authoring import (
    Edge,
    FieldPath,
    JsonValue,
    Outcome,
    PathScope,
    Switch,
    Workflow,
)
from pi_workflows.engine.errors import UnknownNodeError
from pi_workflows.engine.json_values import preview
from pi_workflows.engine.state import NodeResult, RunState


class FailReason(StrEnum):
    """Why a run failed; a stable code for records and clients."""

    NODE_FAILED = "nodeFailed"  # a node failed and no $result.outcome case routed it
    UNMATCHED_CASE = "unmatchedCase"  # a switch value matched no case and there is no default
    MISSING_FIELD = "missingField"  # a switch path had no value in the output or record
    MAX_STEPS_EXCEEDED = "maxStepsExceeded"  # the run would execute more than max_steps nodes


@dataclass(frozen=True)
class GoTo:
    """Run ``node_id`` next."""

    node_id: str
    terminal: ClassVar[bool] = False


@dataclass(frozen=True)
class Complete:
    """The run completed; ``output`` is the output of ``node_id``, its last node."""

    output: JsonValue
    node_id: str
    terminal: ClassVar[bool] = True


@dataclass(frozen=True)
class Fail:
    """The run failed at ``node_id`` for ``reason``; ``error`` is one line naming the node."""

    error: str
    node_id: str
    reason: FailReason
    terminal: ClassVar[bool] = True


@dataclass(frozen=True)
class TimeOut:
    """The run timed out: ``node_id`` timed out and nothing routed its timeout."""

    error: str
    node_id: str
    terminal: ClassVar[bool] = True


Transition: TypeAlias = GoTo | Complete | Fail | TimeOut
"""What happens after one node result. Only ``GoTo`` continues the run."""


@dataclass(frozen=True)
class Step:
    """The state after recording one node result, and the transition that follows it."""

    state: RunState
    transition: Transition


class _Missing:
    """Marks a switch path with no value (distinct from a JSON ``null``)."""


_MISSING: Final = _Missing()


def advance(workflow: Workflow, state: RunState, node_id: str, result: NodeResult) -> Step:
    """Record ``result`` for ``node_id`` on top of ``state`` and decide the next transition.

    ``state`` is the durable state from before this result. Raises ``UnknownNodeError`` if
    the workflow has no such node; every run outcome is a transition, never an exception.
    """
    if node_id not in workflow.nodes:
        raise UnknownNodeError(workflow.name, node_id)
    after = state.record(node_id, result)
    transition = _route(workflow, node_id, result)
    if after.steps > workflow.max_steps or (
        isinstance(transition, GoTo) and after.steps >= workflow.max_steps
    ):
        transition = Fail(
            f"workflow {workflow.name!r} reached max_steps={workflow.max_steps} after node "
            f"{node_id!r}; raise max_steps or check the loop",
            node_id,
            FailReason.MAX_STEPS_EXCEEDED,
        )
    return Step(after, transition)


def next_transition(
    workflow: Workflow, state: RunState, node_id: str, result: NodeResult
) -> Transition:
    """The transition after ``node_id`` produced ``result``; see ``advance``."""
    return advance(workflow, state, node_id, result).transition


def first_node(workflow: Workflow) -> GoTo:
    """The transition that starts a run: go to the start node."""
    return GoTo(workflow.start)


def _route(workflow: Workflow, node_id: str, result: NodeResult) -> Transition:
    route = workflow.outgoing(node_id)
    if result.outcome is not Outcome.OK:
        if isinstance(route, Switch):
            target = route.outcome_target(result.outcome.value)
            if target is not None:
                return GoTo(target)
        return _unrouted(node_id, result)
    if route is None:
        return Complete(result.output, node_id)
    if isinstance(route, Edge):
        return GoTo(route.target)
    path = route.path
    value = _resolve(path, result.output, result.record())
    if isinstance(value, _Missing):
        where = "output" if path.scope is PathScope.OUTPUT else "result record"
        return Fail(
            f"switch on {route.on} after node {node_id!r}: the {where} has no value at {route.on}",
            node_id,
            FailReason.MISSING_FIELD,
        )
    target = route.target_for(value)
    if target is None:
        target = route.default
    if target is None:
        cases = ", ".join(preview(case.value) for case in route.cases)
        return Fail(
            f"switch on {route.on} after node {node_id!r} has no case for {preview(value)} "
            f"(cases: {cases})",
            node_id,
            FailReason.UNMATCHED_CASE,
        )
    return GoTo(target)


def _unrouted(node_id: str, result: NodeResult) -> Fail | TimeOut:
    if result.outcome is Outcome.TIMED_OUT:
        return TimeOut(f"node {node_id!r} timed out: {result.error}", node_id)
    return Fail(f"node {node_id!r} failed: {result.error}", node_id, FailReason.NODE_FAILED)


def _resolve(path: FieldPath, output: JsonValue, record: JsonValue) -> JsonValue | _Missing:
    """The value at ``path`` in ``output`` (``$...``) or ``record`` (``$result...``).

    All-digit segments index lists. Returns a private marker, not ``None``, when there is no
    value there, so a JSON ``null`` can still be matched by a ``None`` case.
    """
    current: JsonValue = output if path.scope is PathScope.OUTPUT else record
    for segment in path.segments:
        if isinstance(current, dict) and segment in current:
            current = current[segment]
        elif isinstance(current, list) and segment.isdigit() and int(segment) < len(current):
            current = current[int(segment)]
        else:
            return _MISSING
    return current
