"""``max_steps``: executed nodes are counted across the whole run and bound it."""

from __future__ import annotations

import itertools

from pi_workflows.authoring import Workflow, compute, edge, switch
from pi_workflows.engine import (
    Complete,
    Fail,
    FailReason,
    GoTo,
    NodeResult,
    RunState,
    Transition,
    advance,
    first_node,
)


def _chain(length: int, max_steps: int) -> Workflow:
    names = [f"n{i}" for i in range(length)]
    nodes = {name: compute(lambda ctx: None) for name in names}
    edges = [edge(a, b) for a, b in itertools.pairwise(names)]
    return Workflow("chain", "n0", nodes, edges, max_steps)


def _run_all_ok(workflow: Workflow) -> tuple[list[str], Transition]:
    state, transition = RunState.initial(), first_node(workflow)
    executed: list[str] = []
    assert isinstance(transition, GoTo)
    while isinstance(transition, GoTo):
        executed.append(transition.node_id)
        step = advance(workflow, state, transition.node_id, NodeResult.ok({"again": True}))
        state, transition = step.state, step.transition
    return executed, transition


def test_run_may_execute_exactly_max_steps_nodes() -> None:
    """A chain of ``max_steps`` nodes completes: the limit is inclusive."""
    executed, transition = _run_all_ok(_chain(3, max_steps=3))
    assert executed == ["n0", "n1", "n2"]
    assert isinstance(transition, Complete)


def test_transition_past_max_steps_fails_the_run_naming_the_node() -> None:
    """Starting node ``max_steps + 1`` fails the run with ``maxStepsExceeded``."""
    executed, transition = _run_all_ok(_chain(4, max_steps=3))
    assert executed == ["n0", "n1", "n2"]
    assert isinstance(transition, Fail)
    assert transition.reason is FailReason.MAX_STEPS_EXCEEDED
    assert transition.node_id == "n2"
    assert "workflow 'chain' reached max_steps=3 after node 'n2'" in transition.error


def test_max_steps_counts_every_visit_of_a_loop() -> None:
    """A self-loop stops after ``max_steps`` executions of the same node."""
    workflow = Workflow(
        "loop",
        "spin",
        {"spin": compute(lambda ctx: None), "out": compute(lambda ctx: None)},
        [switch("spin", "$.again", {True: "spin", False: "out"})],
        max_steps=5,
    )
    executed, transition = _run_all_ok(workflow)
    assert executed == ["spin"] * 5
    assert isinstance(transition, Fail)
    assert transition.reason is FailReason.MAX_STEPS_EXCEEDED


def test_failure_routes_count_against_max_steps_too() -> None:
    """A ``$result.outcome`` retry loop is bounded like any other."""
    workflow = Workflow(
        "retry",
        "try",
        {"try": compute(lambda ctx: None), "ok": compute(lambda ctx: None)},
        [switch("try", "$result.outcome", {"failed": "try", "ok": "ok"})],
        max_steps=2,
    )
    first = advance(workflow, RunState.initial(), "try", NodeResult.failed("flaky"))
    assert first.transition == GoTo("try")
    second = advance(workflow, first.state, "try", NodeResult.failed("flaky"))
    assert isinstance(second.transition, Fail)
    assert second.transition.reason is FailReason.MAX_STEPS_EXCEEDED


def test_state_already_past_the_limit_never_continues() -> None:
    """Even a completing node fails the run once the count exceeds ``max_steps``."""
    workflow = _chain(1, max_steps=1)
    beyond = RunState(steps=1)
    step = advance(workflow, beyond, "n0", NodeResult.ok(1))
    assert isinstance(step.transition, Fail)
    assert step.transition.reason is FailReason.MAX_STEPS_EXCEEDED
    assert step.state.steps == 2


def test_default_limit_is_one_hundred_steps() -> None:
    """Without ``max_steps`` a workflow allows 100 node executions."""
    assert Workflow("w", "a", {"a": compute(lambda ctx: None)}).max_steps == 100
