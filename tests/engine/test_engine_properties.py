"""Property tests: random valid graphs and node results against the engine's invariants."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from pi_workflows.authoring import (
    CaseValue,
    HumanDecisionNode,
    Node,
    Outcome,
    Route,
    Switch,
    Workflow,
    choice,
    compute,
    edge,
    human_decision,
    switch,
)
from pi_workflows.engine import (
    Complete,
    Fail,
    GoTo,
    NodeResult,
    RunState,
    TimeOut,
    advance,
    first_node,
)


@dataclass(frozen=True)
class Scenario:
    """A validated workflow and a supply of results to feed it."""

    workflow: Workflow
    results: tuple[NodeResult, ...]


def _prune(
    start: str, nodes: dict[str, Node], routes: dict[str, Route], max_steps: int
) -> Workflow:
    """Keep only what ``start`` reaches, so the drawn graph passes validation."""
    seen, frontier = {start}, [start]
    while frontier:
        route = routes.get(frontier.pop())
        for target in route.targets() if route is not None else ():
            if target not in seen:
                seen.add(target)
                frontier.append(target)
    kept_nodes = {k: v for k, v in nodes.items() if k in seen}
    kept_routes = [r for k, r in routes.items() if k in seen]
    return Workflow("prop", start, kept_nodes, kept_routes, max_steps)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """A random valid graph (computes and decisions, every route shape) and results."""
    count = draw(st.integers(min_value=1, max_value=7))
    ids = [f"n{i}" for i in range(count)]
    target = st.sampled_from(ids)
    nodes: dict[str, Node] = {}
    routes: dict[str, Route] = {}
    for node_id in ids:
        if draw(st.integers(0, 3)) == 0:
            picks = draw(st.integers(min_value=1, max_value=3))
            nodes[node_id] = human_decision("?", [choice(f"c{i}") for i in range(picks)])
        else:
            nodes[node_id] = compute(lambda ctx: None)
        shape = draw(st.sampled_from(["none", "edge", "output", "outcome"]))
        node = nodes[node_id]
        if shape == "edge":
            routes[node_id] = edge(node_id, draw(target))
        elif shape == "output" and isinstance(node, HumanDecisionNode):
            cases: dict[CaseValue, str] = {c: draw(target) for c in node.choice_ids}
            routes[node_id] = switch(node_id, "$.choice", cases)
        elif shape == "output":
            values = draw(st.sets(st.integers(0, 3), min_size=1, max_size=4))
            cases = {v: draw(target) for v in sorted(values)}
            default = draw(st.one_of(st.none(), target))
            routes[node_id] = switch(node_id, "$.v", cases, default=default)
        elif shape == "outcome":
            keys = draw(st.sets(st.sampled_from([o.value for o in Outcome]), min_size=1))
            cases = {k: draw(target) for k in sorted(keys)}
            routes[node_id] = switch(node_id, "$result.outcome", cases)
    workflow = _prune("n0", nodes, routes, draw(st.integers(min_value=1, max_value=25)))
    result = st.one_of(
        st.builds(
            lambda v, c, missing: NodeResult.ok({} if missing else {"v": v, "choice": f"c{c}"}),
            st.integers(0, 4),
            st.integers(0, 3),
            st.booleans(),
        ),
        st.builds(NodeResult.failed, st.just("boom")),
        st.builds(NodeResult.timed_out, st.just("late")),
    )
    supply = draw(st.lists(result, min_size=workflow.max_steps, max_size=workflow.max_steps))
    return Scenario(workflow, tuple(supply))


@settings(max_examples=300, deadline=None, database=None)
@given(scenarios())
def test_runs_stay_in_the_graph_and_end_within_max_steps(scenario: Scenario) -> None:
    """Every GoTo names a node, the run ends with one terminal transition, and it
    executes at most ``max_steps`` nodes."""
    workflow = scenario.workflow
    state = RunState.initial()
    transition = first_node(workflow)
    executed = 0
    supply = iter(scenario.results)
    while isinstance(transition, GoTo):
        assert transition.node_id in workflow.nodes
        assert executed < workflow.max_steps
        node_id = transition.node_id
        result = next(supply)
        step = advance(workflow, state, node_id, result)
        executed += 1
        assert step == advance(workflow, state, node_id, result)  # pure and deterministic
        assert step.state.steps == executed == sum(step.state.visits.values())
        state, transition = step.state, step.transition
        _check_route_rules(workflow, node_id, result, transition)
    assert transition.terminal
    assert isinstance(transition, Complete | Fail | TimeOut)
    assert executed <= workflow.max_steps


def _check_route_rules(
    workflow: Workflow, node_id: str, result: NodeResult, transition: object
) -> None:
    route = workflow.outgoing(node_id)
    if isinstance(transition, Complete):
        assert result.outcome is Outcome.OK
        assert route is None
        assert transition.output == result.output
    if isinstance(transition, GoTo) and result.outcome is not Outcome.OK:
        assert isinstance(route, Switch)
        assert route.path.is_outcome
        assert route.target_for(result.outcome.value) == transition.node_id
    if isinstance(transition, TimeOut):
        assert result.outcome is Outcome.TIMED_OUT


@settings(max_examples=200, deadline=None, database=None)
@given(scenarios(), st.data())
def test_a_spent_step_budget_ends_the_run_whatever_the_result(
    scenario: Scenario, data: st.DataObject
) -> None:
    """Once ``max_steps`` nodes have executed, no result can continue the run."""
    workflow = scenario.workflow
    node_id = data.draw(st.sampled_from(sorted(workflow.nodes)))
    spent = RunState(steps=workflow.max_steps - 1)
    for result in scenario.results[:5]:
        transition = advance(workflow, spent, node_id, result).transition
        assert not isinstance(transition, GoTo)
