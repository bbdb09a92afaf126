"""Load-time graph validation: every error names the workflow and the node."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from pi_workflows.authoring import (
    Node,
    Route,
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
    shell,
    switch,
)
from pi_workflows.engine.snapshot import snapshot


def _noop(ctx: object) -> None:
    return None


def _build(
    nodes: Mapping[str, Node],
    edges: Sequence[Route] = (),
    *,
    start: str = "a",
    max_steps: Any = 100,
) -> Workflow:
    return Workflow("flow", start, nodes, edges, max_steps)


def _error(make: Callable[[], object]) -> WorkflowDefinitionError:
    with pytest.raises(WorkflowDefinitionError) as caught:
        make()
    return caught.value


def _decide() -> Node:
    return human_decision("Go?", [choice("yes"), choice("no")])


def test_the_design_example_validates() -> None:
    """The DESIGN.md section 4 example builds without errors."""
    workflow = Workflow(
        "triage",
        start="collect",
        max_steps=40,
        nodes={
            "collect": compute(lambda ctx: {"items": ctx.input}),
            "classify": agent(
                prompt=lambda ctx: "Classify",
                expected_output='{"route": "fix" or "ignore"}',
                validate=lambda output, ctx: None,
                timeout=minutes(10),
            ),
            "approve": human_decision(
                title=lambda ctx: "Apply the fix?",
                choices=[choice("yes", "Apply"), choice("no", "Skip")],
                on_timeout=(minutes(30), "no"),
            ),
            "apply": action(_noop, effect=manual_effect("apply-fix")),
            "log": shell(lambda ctx: ["git", "log"], effect=idempotent_effect("git-read")),
            "ask": checkpoint(lambda ctx: {"question": "Anything else?"}),
            "done": notify(lambda ctx: "Triage finished", kind="final"),
        },
        edges=[
            edge("collect", "classify"),
            switch("classify", on="$.route", cases={"fix": "approve", "ignore": "done"}),
            switch("approve", on="$.choice", cases={"yes": "apply", "no": "done"}),
            switch("apply", on="$result.outcome", cases={"ok": "log", "failed": "ask"}),
            edge("log", "done"),
            edge("ask", "done"),
        ],
    )
    assert workflow.name == "triage"
    assert workflow.start == "collect"
    assert workflow.max_steps == 40
    assert list(workflow.nodes) == ["collect", "classify", "approve", "apply", "log", "ask", "done"]
    assert workflow.outgoing("done") is None
    assert workflow.outgoing("collect") == edge("collect", "classify")


def test_workflow_is_read_only() -> None:
    """Nodes cannot be added to a built workflow."""
    workflow = _build({"a": compute(_noop)})
    with pytest.raises(TypeError):
        workflow.nodes["b"] = compute(_noop)  # type: ignore[index]


def test_unknown_start_names_workflow_and_start() -> None:
    """A start that is not a node is refused, naming it."""
    error = _error(lambda: _build({"a": compute(_noop)}, start="begin"))
    assert (error.workflow, error.node) == ("flow", "begin")
    assert str(error) == "workflow 'flow', node 'begin': unknown start node 'begin'"


def test_unknown_edge_target_names_the_source_node() -> None:
    """An edge to a missing node is refused, naming the source node and the target."""
    error = _error(lambda: _build({"a": compute(_noop)}, [edge("a", "b")]))
    assert error.node == "a"
    assert "unknown node 'b'" in str(error)
    assert str(error).startswith("workflow 'flow', node 'a':")


def test_unknown_switch_target_is_refused() -> None:
    """A switch case or default pointing nowhere is refused."""
    nodes = {"a": compute(_noop), "b": compute(_noop)}
    error = _error(lambda: _build(nodes, [switch("a", "$.x", {1: "b"}, default="zz")]))
    assert "unknown node 'zz'" in str(error)


def test_edge_from_unknown_node_is_refused() -> None:
    """An edge whose source is not a node is refused, naming that source."""
    error = _error(lambda: _build({"a": compute(_noop)}, [edge("ghost", "a")]))
    assert error.node == "ghost"
    assert "unknown node 'ghost'" in str(error)


def test_more_than_one_outgoing_edge_is_refused() -> None:
    """Two routes out of one node are refused; a switch is the way to branch."""
    nodes = {"a": compute(_noop), "b": compute(_noop), "c": compute(_noop)}
    error = _error(lambda: _build(nodes, [edge("a", "b"), edge("a", "c")]))
    assert error.node == "a"
    assert "more than one outgoing edge" in str(error)


def test_unreachable_node_is_refused() -> None:
    """A node no route leads to is refused, naming it."""
    nodes = {"a": compute(_noop), "b": compute(_noop), "island": compute(_noop)}
    error = _error(lambda: _build(nodes, [edge("a", "b")]))
    assert error.node == "island"
    assert "unreachable from the start node 'a'" in str(error)


def test_switch_after_human_decision_must_cover_every_choice() -> None:
    """A ``$.choice`` switch missing a declared choice is refused, naming the choice."""
    nodes = {"a": _decide(), "b": compute(_noop)}
    error = _error(lambda: _build(nodes, [switch("a", "$.choice", {"yes": "b"})]))
    assert error.node == "a"
    assert "does not cover every choice: missing 'no'" in str(error)


def test_switch_after_human_decision_refuses_undeclared_choices() -> None:
    """A case for a choice that does not exist (a typo) is refused."""
    nodes = {"a": _decide(), "b": compute(_noop)}
    cases = {"yes": "b", "no": "b", "noo": "b"}
    error = _error(lambda: _build(nodes, [switch("a", "$.choice", cases)]))
    assert "case 'noo', which is not a declared choice" in str(error)


def test_default_covers_the_remaining_choices() -> None:
    """A ``default`` counts as covering the choices without a case."""
    nodes = {"a": _decide(), "b": compute(_noop), "c": compute(_noop)}
    workflow = _build(nodes, [switch("a", "$.choice", {"yes": "b"}, default="c")])
    assert workflow.outgoing("a") is not None


def test_switch_after_decision_must_cover_every_route() -> None:
    """A ``decision`` node's route switch must cover every declared route."""
    nodes = {"a": decision("Pick", ["left", "right"]), "b": compute(_noop)}
    error = _error(lambda: _build(nodes, [switch("a", "$.route", {"left": "b"})]))
    assert "does not cover every route: missing 'right'" in str(error)


@pytest.mark.parametrize("node_id", ["input", "result", "results", "outputs", "run", "workflow"])
def test_reserved_node_ids_are_refused(node_id: str) -> None:
    """Ids the runtime uses for its own records are refused, naming the id."""
    error = _error(lambda: _build({node_id: compute(_noop)}, start=node_id))
    assert error.node == node_id
    assert "is reserved" in str(error)


@pytest.mark.parametrize("node_id", ["", "1st", "has space", "$x", "a.b", "x" * 65, "_hidden"])
def test_malformed_node_ids_are_refused(node_id: str) -> None:
    """A node id must be 1-64 letters, digits, '_' or '-', starting with a letter."""
    error = _error(lambda: _build({node_id: compute(_noop)}, start=node_id))
    assert "is malformed" in str(error)


def test_validate_on_an_assistant_message_agent_is_refused() -> None:
    """A reply cannot be rejected, so ``validate`` with ``assistant_message()`` is refused."""
    node = agent("p", assistant_message(), validate=lambda output, ctx: None)
    error = _error(lambda: _build({"a": node}))
    assert error.node == "a"
    assert "validate is not allowed with expected_output=assistant_message()" in str(error)


def test_switch_on_a_field_of_a_reply_is_refused() -> None:
    """An assistant-message output is text, so ``$.field`` switches on it are refused."""
    nodes = {"a": agent("p", assistant_message()), "b": compute(_noop)}
    error = _error(lambda: _build(nodes, [switch("a", "$.route", {"x": "b"})]))
    assert "reply text" in str(error)


@pytest.mark.parametrize(
    "node",
    [
        action(_noop),
        shell(["true"]),
        action(_noop, effect="manual"),  # type: ignore[arg-type]
    ],
)
def test_actions_and_shell_nodes_need_an_effect(node: Node) -> None:
    """An action or shell node without an effect declaration is refused with guidance."""
    error = _error(lambda: _build({"a": node}))
    assert error.node == "a"
    assert "needs an effect declaration" in str(error)
    assert "idempotent_effect" in str(error)
    assert "manual_effect" in str(error)


def test_shell_command_must_be_an_argument_list() -> None:
    """A shell string is refused: commands are argument lists, never shell text."""
    node = shell("ls -l | wc", effect=idempotent_effect("read"))  # type: ignore[arg-type]
    error = _error(lambda: _build({"a": node}))
    assert "not a shell string" in str(error)
    empty = shell([], effect=idempotent_effect("read"))
    assert "non-empty list" in str(_error(lambda: _build({"a": empty})))


@pytest.mark.parametrize("timeout", [0, -5, float("inf"), True, "10"])
def test_timeouts_must_be_positive_seconds(timeout: Any) -> None:
    """A zero, negative, infinite or non-numeric timeout is refused, naming the node."""
    error = _error(lambda: _build({"a": compute(_noop, timeout=timeout)}))
    assert error.node == "a"
    assert "timeout must be a positive number of seconds" in str(error)


def test_on_timeout_must_pick_a_declared_choice() -> None:
    """The timeout default must be one of the declared choices."""
    node = human_decision("t", [choice("yes"), choice("no")], on_timeout=(60.0, "maybe"))
    error = _error(lambda: _build({"a": node}))
    assert "on_timeout picks 'maybe', which is not a declared choice (yes, no)" in str(error)


def test_choices_must_be_unique_and_non_empty() -> None:
    """Duplicate choice ids and an empty choice list are refused."""
    twice = human_decision("t", [choice("yes"), choice("yes")])
    assert "declared twice" in str(_error(lambda: _build({"a": twice})))
    none = human_decision("t", [])
    assert "at least one choice" in str(_error(lambda: _build({"a": none})))


def test_outcome_switch_cannot_route_cancelled() -> None:
    """``cancelled`` is never routed, so a case for it is refused with the reason."""
    nodes = {"a": compute(_noop), "b": compute(_noop)}
    cases = {"ok": "b", "cancelled": "b"}
    error = _error(lambda: _build(nodes, [switch("a", "$result.outcome", cases)]))
    assert "cannot route 'cancelled'" in str(error)


def test_outcome_switch_cases_are_outcomes() -> None:
    """A ``$result.outcome`` case must be ok, failed or timed_out."""
    nodes = {"a": compute(_noop), "b": compute(_noop)}
    error = _error(lambda: _build(nodes, [switch("a", "$result.outcome", {"error": "b"})]))
    assert "outcomes are 'ok', 'failed' and 'timed_out'" in str(error)


@pytest.mark.parametrize("path", ["route", "$", "$..x", "$.a b", "$result", "$results.x"])
def test_malformed_switch_paths_are_refused(path: str) -> None:
    """A switch path must be ``$``, ``$.field...`` or ``$result.field...``."""
    nodes = {"a": compute(_noop), "b": compute(_noop)}
    if path == "$":
        assert _build(nodes, [switch("a", path, {1: "b"})]).outgoing("a") is not None
        return
    error = _error(lambda: _build(nodes, [switch("a", path, {1: "b"})]))
    assert error.node == "a"
    assert "switch path" in str(error) or "needs a field" in str(error)


def test_switch_case_values_must_be_json_scalars() -> None:
    """A float or tuple case value is refused."""
    nodes = {"a": compute(_noop), "b": compute(_noop)}
    error = _error(lambda: _build(nodes, [switch("a", "$.x", {1.5: "b"})]))  # type: ignore[dict-item]
    assert "is not a string, integer, boolean or null" in str(error)


def test_switch_without_cases_or_default_is_refused() -> None:
    """A switch must be able to go somewhere."""
    nodes = {"a": compute(_noop)}
    error = _error(lambda: _build(nodes, [switch("a", "$.x", {})]))
    assert "has no cases" in str(error)


@pytest.mark.parametrize("max_steps", [0, -1, True, 2.5, "10"])
def test_max_steps_must_be_a_positive_integer(max_steps: Any) -> None:
    """``max_steps`` must be a positive int; the error names the workflow."""
    error = _error(lambda: _build({"a": compute(_noop)}, max_steps=max_steps))
    assert error.workflow == "flow"
    assert error.node is None
    assert "max_steps must be a positive integer" in str(error)


@pytest.mark.parametrize("name", ["", "has space", "9lives", "x" * 65])
def test_malformed_workflow_names_are_refused(name: str) -> None:
    """The workflow name must be usable as a command name."""
    with pytest.raises(WorkflowDefinitionError, match="workflow name"):
        Workflow(name, "a", {"a": compute(_noop)})


def test_non_node_values_are_refused_naming_the_node() -> None:
    """A plain function in ``nodes`` is refused with a hint about the constructors."""
    error = _error(lambda: _build({"a": _noop}))  # type: ignore[dict-item]
    assert error.node == "a"
    assert "compute()" in str(error)


def test_edges_must_be_built_with_edge_or_switch() -> None:
    """A tuple in ``edges`` is refused."""
    nodes = {"a": compute(_noop), "b": compute(_noop)}
    error = _error(lambda: _build(nodes, [("a", "b")]))  # type: ignore[list-item]
    assert "edge(...) or switch(...)" in str(error)


def test_checkpoint_request_must_ask_a_question() -> None:
    """A static request is a question string or an object with a ``question``."""
    assert _build({"a": checkpoint({"question": "Why?", "hint": "short"})})
    error = _error(lambda: _build({"a": checkpoint({"ask": "Why?"})}))
    assert '"question"' in str(error)


def test_a_checkpoint_for_the_person_says_so_in_its_snapshot_and_takes_only_a_bool() -> None:
    """``for_person=True`` is kept (and only then named in the definition snapshot, so other
    checkpoints' snapshots are unchanged); anything but a bool is refused naming the node."""
    built = _build({"a": checkpoint("Why?", for_person=True)})
    nodes = snapshot(built)["nodes"]
    assert isinstance(nodes, dict)
    assert nodes["a"]["forPerson"] is True
    plain = snapshot(_build({"a": checkpoint("Why?")}))["nodes"]
    assert isinstance(plain, dict)
    assert "forPerson" not in plain["a"]
    error = _error(lambda: _build({"a": checkpoint("Why?", for_person="yes")}))  # type: ignore[arg-type]
    assert "for_person must be True or False, got 'yes'" in str(error)


def test_agent_expected_output_must_describe_something() -> None:
    """An empty expected output is refused."""
    error = _error(lambda: _build({"a": agent("p", "  ")}))
    assert "expected_output must be a non-empty description" in str(error)


def test_notify_message_must_be_text_or_callback() -> None:
    """An empty notify message is refused."""
    error = _error(lambda: _build({"a": notify("")}))
    assert "message must be a non-empty string or a callback" in str(error)


def test_first_error_is_deterministic() -> None:
    """With several problems, the same (first) one is always reported."""
    nodes = {"a": compute(_noop), "b": action(_noop), "c": compute(_noop)}
    messages = {str(_error(lambda: _build(nodes, [edge("a", "zz")]))) for _ in range(3)}
    assert messages == {
        "workflow 'flow', node 'b': an action needs an effect declaration: pass "
        "effect=idempotent_effect(TYPE) if a retry is safe, or effect=manual_effect(TYPE) "
        "if it is not"
    }
