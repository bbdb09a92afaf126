"""Routing rules of the engine: edges, switches, outcomes and the recorded run state."""

from __future__ import annotations

import pytest

from pi_workflows.authoring import (
    CaseValue,
    Route,
    Workflow,
    WorkflowDefinitionError,
    agent,
    assistant_message,
    compute,
    edge,
    switch,
)
from pi_workflows.engine import (
    Complete,
    Fail,
    FailReason,
    GoTo,
    NodeResult,
    RunState,
    TimeOut,
    UnknownNodeError,
    advance,
    first_node,
    next_transition,
)


def _flow(*routes: Route, extra: tuple[str, ...] = ("b", "c", "d")) -> Workflow:
    nodes = {name: compute(lambda ctx: None) for name in ("a", *extra)}
    targets = {t for r in routes for t in r.targets()}
    nodes = {k: v for k, v in nodes.items() if k == "a" or k in targets}
    return Workflow("flow", "a", nodes, routes)


def _after_a(workflow: Workflow, result: NodeResult) -> object:
    return next_transition(workflow, RunState.initial(), "a", result)


def test_run_starts_at_the_start_node() -> None:
    """The first transition of every run goes to ``start``."""
    assert first_node(_flow(edge("a", "b"))) == GoTo("a")


def test_node_without_outgoing_edge_completes_the_run_with_its_output() -> None:
    """An ok result with no route ends the run with that output."""
    workflow = Workflow("flow", "a", {"a": compute(lambda ctx: None)})
    assert _after_a(workflow, NodeResult.ok({"done": True})) == Complete({"done": True}, "a")


def test_plain_edge_goes_to_its_target_on_success() -> None:
    """An ok result follows a plain edge."""
    assert _after_a(_flow(edge("a", "b")), NodeResult.ok(1)) == GoTo("b")


def test_switch_on_output_field_takes_the_matching_case() -> None:
    """``$.route`` reads the accepted output and picks the case with that value."""
    workflow = _flow(switch("a", "$.route", {"fix": "b", "ignore": "c"}))
    assert _after_a(workflow, NodeResult.ok({"route": "ignore"})) == GoTo("c")


def test_switch_keeps_booleans_and_numbers_apart() -> None:
    """``True`` never matches a ``1`` case and ``1`` never matches a ``True`` case."""
    on_bool = _flow(switch("a", "$.v", {True: "b", False: "c"}))
    assert _after_a(on_bool, NodeResult.ok({"v": True})) == GoTo("b")
    assert isinstance(_after_a(on_bool, NodeResult.ok({"v": 1})), Fail)
    on_int = _flow(switch("a", "$.v", {1: "b", 0: "c"}))
    assert _after_a(on_int, NodeResult.ok({"v": 0})) == GoTo("c")
    assert isinstance(_after_a(on_int, NodeResult.ok({"v": True})), Fail)


def test_switch_matches_numbers_by_value_and_null_by_none() -> None:
    """A float output equal to an integer case matches; ``None`` matches JSON null."""
    cases: dict[CaseValue, str] = {1: "b", None: "c"}
    workflow = _flow(switch("a", "$.v", cases))
    assert _after_a(workflow, NodeResult.ok({"v": 1.0})) == GoTo("b")
    assert _after_a(workflow, NodeResult.ok({"v": None})) == GoTo("c")


def test_switch_reads_nested_fields_and_list_indexes() -> None:
    """``$.a.b.1`` walks objects by key and lists by index."""
    workflow = _flow(switch("a", "$.a.b.1", {"y": "b"}))
    assert _after_a(workflow, NodeResult.ok({"a": {"b": ["x", "y"]}})) == GoTo("b")


def test_switch_on_dollar_reads_the_whole_output() -> None:
    """``$`` matches the output itself, e.g. an assistant reply's text."""
    nodes = {"a": agent("p", assistant_message()), "b": compute(lambda ctx: None)}
    workflow = Workflow("flow", "a", nodes, [switch("a", "$", {"yes": "b"})])
    assert _after_a(workflow, NodeResult.ok("yes")) == GoTo("b")


def test_switch_default_takes_an_unmatched_ok_value() -> None:
    """A value with no case goes to ``default`` when there is one."""
    workflow = _flow(switch("a", "$.n", {1: "b"}, default="c"))
    assert _after_a(workflow, NodeResult.ok({"n": 7})) == GoTo("c")


def test_unmatched_switch_case_fails_run_naming_value_and_node() -> None:
    """A value no case matches (and no default) fails the run naming both."""
    workflow = _flow(switch("a", "$.route", {"fix": "b", "ignore": "c"}))
    transition = _after_a(workflow, NodeResult.ok({"route": "maybe"}))
    assert isinstance(transition, Fail)
    assert transition.reason is FailReason.UNMATCHED_CASE
    assert transition.node_id == "a"
    assert transition.error == (
        'switch on $.route after node \'a\' has no case for "maybe" (cases: "fix", "ignore")'
    )


def test_missing_switch_field_fails_run_naming_path_and_node() -> None:
    """An output without the switched field fails the run, even with a default."""
    workflow = _flow(switch("a", "$.route", {"fix": "b"}, default="c"))
    transition = _after_a(workflow, NodeResult.ok({"other": 1}))
    assert isinstance(transition, Fail)
    assert transition.reason is FailReason.MISSING_FIELD
    assert "after node 'a'" in transition.error
    assert "no value at $.route" in transition.error


def test_null_field_is_a_value_not_a_missing_field() -> None:
    """A JSON null at the path is matched like any value."""
    workflow = _flow(switch("a", "$.v", {None: "b"}))
    assert _after_a(workflow, NodeResult.ok({"v": None})) == GoTo("b")


def test_failed_node_without_outcome_switch_fails_the_run_with_its_error() -> None:
    """A failure on a plain edge ends the run as failed, carrying the node's error."""
    transition = _after_a(_flow(edge("a", "b")), NodeResult.failed("boom"))
    assert transition == Fail("node 'a' failed: boom", "a", FailReason.NODE_FAILED)


def test_failed_last_node_fails_the_run() -> None:
    """A failure at a node without routes fails the run (it never completes)."""
    workflow = Workflow("flow", "a", {"a": compute(lambda ctx: None)})
    assert isinstance(_after_a(workflow, NodeResult.failed("boom")), Fail)


def test_timed_out_node_without_route_times_out_the_run() -> None:
    """A timeout nothing routes ends the run as timed out."""
    transition = _after_a(_flow(edge("a", "b")), NodeResult.timed_out("no answer in 10 minutes"))
    assert transition == TimeOut("node 'a' timed out: no answer in 10 minutes", "a")


def test_failure_routes_through_result_outcome_switch() -> None:
    """``$result.outcome`` with a ``failed`` case continues the run after a failure."""
    workflow = _flow(switch("a", "$result.outcome", {"ok": "b", "failed": "c"}))
    assert _after_a(workflow, NodeResult.failed("boom")) == GoTo("c")
    assert _after_a(workflow, NodeResult.ok(None)) == GoTo("b")


def test_timeout_routes_through_result_outcome_switch() -> None:
    """A ``timed_out`` case continues the run after a timeout."""
    workflow = _flow(switch("a", "$result.outcome", {"ok": "b", "timed_out": "d"}))
    assert _after_a(workflow, NodeResult.timed_out()) == GoTo("d")


def test_outcome_switch_without_a_case_for_the_outcome_ends_the_run_with_it() -> None:
    """A failure with only an ``ok`` case fails; a timeout with only ``failed`` times out."""
    workflow = _flow(switch("a", "$result.outcome", {"ok": "b", "failed": "c"}))
    assert isinstance(_after_a(workflow, NodeResult.timed_out()), TimeOut)
    only_ok = _flow(switch("a", "$result.outcome", {"ok": "b"}))
    assert isinstance(_after_a(only_ok, NodeResult.failed("x")), Fail)


def test_default_never_routes_a_failure() -> None:
    """Defaults apply to ok values only; a failure still ends the run."""
    workflow = _flow(switch("a", "$result.outcome", {"ok": "b"}, default="c"))
    assert isinstance(_after_a(workflow, NodeResult.failed("x")), Fail)
    output_switch = _flow(switch("a", "$.x", {1: "b"}, default="c"))
    assert isinstance(_after_a(output_switch, NodeResult.failed("x")), Fail)


def test_failure_is_not_routed_by_an_output_or_other_result_switch() -> None:
    """Only ``$result.outcome`` routes failures; ``$.x`` or ``$result.error`` do not."""
    on_output = _flow(switch("a", "$.x", {1: "b"}))
    assert isinstance(_after_a(on_output, NodeResult.failed("x")), Fail)
    on_error = _flow(switch("a", "$result.error", {"x": "b"}))
    assert isinstance(_after_a(on_error, NodeResult.failed("x")), Fail)


def test_result_switch_reads_the_result_record_of_an_ok_node() -> None:
    """``$result.error`` of an ok result is null and can be matched."""
    workflow = _flow(switch("a", "$result.error", {None: "b"}))
    assert _after_a(workflow, NodeResult.ok(1)) == GoTo("b")


def test_advance_records_outputs_results_visits_and_steps() -> None:
    """The returned state holds the output, the result record and the counts."""
    workflow = _flow(edge("a", "b"))
    step = advance(workflow, RunState.initial(), "a", NodeResult.ok({"x": 1}))
    assert step.transition == GoTo("b")
    assert step.state.outputs == {"a": {"x": 1}}
    assert step.state.results == {"a": {"outcome": "ok", "error": None}}
    assert step.state.visits == {"a": 1}
    assert step.state.steps == 1
    assert step.state.visit_of("a") == 2
    assert step.state.visit_of("b") == 1


def test_failed_visit_removes_the_stale_output() -> None:
    """After a failed visit ``outputs`` no longer holds an older visit's output."""
    workflow = _flow(switch("a", "$result.outcome", {"ok": "a", "failed": "b"}))
    first = advance(workflow, RunState.initial(), "a", NodeResult.ok({"x": 1}))
    second = advance(workflow, first.state, "a", NodeResult.failed("bad", {"code": 2}))
    assert "a" not in second.state.outputs
    assert second.state.results["a"] == {
        "outcome": "failed",
        "error": "bad",
        "details": {"code": 2},
    }
    assert second.state.visits["a"] == 2


def test_input_state_is_not_mutated() -> None:
    """``advance`` returns a new state and leaves the old one unchanged."""
    workflow = _flow(edge("a", "b"))
    before = RunState.initial()
    advance(workflow, before, "a", NodeResult.ok(1))
    assert before == RunState.initial()
    assert before.steps == 0


def test_unknown_node_is_a_caller_error_not_a_transition() -> None:
    """Naming a node the workflow lacks raises ``UnknownNodeError``."""
    with pytest.raises(UnknownNodeError, match="workflow 'flow' has no node 'zz'"):
        advance(_flow(edge("a", "b")), RunState.initial(), "zz", NodeResult.ok(1))


def test_transitions_say_whether_they_end_the_run() -> None:
    """Only ``GoTo`` continues; the other transitions are terminal."""
    assert GoTo("a").terminal is False
    assert Complete(1, "a").terminal is True
    assert Fail("e", "a", FailReason.NODE_FAILED).terminal is True
    assert TimeOut("e", "a").terminal is True


def test_a_value_switch_routes_outcomes_given_as_failed_and_timed_out() -> None:
    """One switch routes by value when the node succeeds and by outcome when it does not."""
    workflow = _flow(switch("a", "$.healthy", {True: "b", False: "c"}, failed="d", timed_out="c"))
    assert _after_a(workflow, NodeResult.ok({"healthy": True})) == GoTo("b")
    assert _after_a(workflow, NodeResult.ok({"healthy": False})) == GoTo("c")
    assert _after_a(workflow, NodeResult.failed("probe broke")) == GoTo("d")
    assert _after_a(workflow, NodeResult.timed_out("too slow")) == GoTo("c")
    only_failed = _flow(switch("a", "$.healthy", {True: "b"}, failed="d"))
    assert isinstance(_after_a(only_failed, NodeResult.timed_out("late")), TimeOut)


def test_an_outcome_switch_cannot_route_one_outcome_both_ways() -> None:
    """A ``"failed"`` case and ``failed=`` on one ``$result.outcome`` switch is refused."""
    with pytest.raises(WorkflowDefinitionError, match="routes 'failed' twice"):
        _flow(switch("a", "$result.outcome", {"ok": "b", "failed": "c"}, failed="d"))
    routed = _flow(switch("a", "$result.outcome", {"ok": "b"}, failed="d", timed_out="c"))
    assert _after_a(routed, NodeResult.failed("x")) == GoTo("d")
    assert _after_a(routed, NodeResult.timed_out("x")) == GoTo("c")


def test_outcome_routes_appear_in_the_snapshot_only_when_given() -> None:
    """Switches without them keep the snapshot (and digest) they had."""
    from pi_workflows.engine import definition_digest, snapshot

    plain = snapshot(_flow(switch("a", "$.v", {1: "b"})))
    assert set(plain["edges"][0]) == {"from", "on", "cases", "default"}
    routed = snapshot(_flow(switch("a", "$.v", {1: "b"}, failed="c", timed_out="d")))
    assert (routed["edges"][0]["failed"], routed["edges"][0]["timedOut"]) == ("c", "d")
    assert definition_digest(plain) != definition_digest(routed)
