"""A workflow's run deadline and cleanup node as authors declare them: carried in the
definition snapshot only when declared, and refused at load when they are not usable."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from pi_workflows import (
    Workflow,
    WorkflowDefinitionError,
    checkpoint,
    compute,
    edge,
    minutes,
    retry,
)
from pi_workflows.engine.snapshot import snapshot

NODES = {"a": compute(lambda ctx: {})}


def test_a_deadline_is_a_timedelta_or_seconds_and_reaches_the_snapshot() -> None:
    """``timedelta(hours=2)`` and ``minutes(120)`` are the same deadline; the snapshot
    carries it as whole milliseconds; a workflow without one keeps its old snapshot."""
    by_delta = Workflow("w", start="a", nodes=NODES, deadline=timedelta(hours=2))
    by_seconds = Workflow("w", start="a", nodes=NODES, deadline=minutes(120))
    plain = Workflow("w", start="a", nodes=NODES)
    assert by_delta.deadline == by_seconds.deadline == 7200.0
    assert snapshot(by_delta)["deadlineMs"] == 7_200_000
    assert snapshot(by_delta) == snapshot(by_seconds)
    assert plain.deadline is None
    assert "deadlineMs" not in snapshot(plain)


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True, "2h",
                                 timedelta(days=400), timedelta(0)])  # fmt: skip
def test_a_bad_deadline_is_refused_at_load(bad: object) -> None:
    """Zero, negative, infinite, over 366 days or not a duration: refused, naming the
    workflow and saying what a deadline must be."""
    with pytest.raises(WorkflowDefinitionError, match=r"deadline must be a timedelta"):
        Workflow("w", start="a", nodes=NODES, deadline=bad)


def test_a_cleanup_node_is_outside_the_graph_and_gets_a_default_timeout() -> None:
    """``on_cancel`` names a node no edge reaches; it is kept (not refused as unreachable),
    named in the snapshot, and bounded by 60 s when it declares no timeout."""
    tidy = compute(lambda ctx: {"tidy": True})
    workflow = Workflow("w", start="a", nodes={**NODES, "tidy": tidy}, on_cancel="tidy")
    assert workflow.on_cancel == "tidy"
    assert workflow.node("tidy").timeout == 60.0
    assert snapshot(workflow)["onCancel"] == "tidy"
    assert snapshot(workflow)["nodes"]["tidy"]["timeoutMs"] == 60_000
    assert "onCancel" not in snapshot(Workflow("w", start="a", nodes=NODES))


@pytest.mark.parametrize(
    ("on_cancel", "nodes", "edges", "problem"),
    [
        ("nope", {}, [], "on_cancel must name a node of the workflow"),
        (3, {}, [], "on_cancel must name a node of the workflow"),
        ("ask", {"ask": checkpoint("ok?")}, [], "must be a compute, action or shell node"),
        ("tidy", {"tidy": compute(lambda ctx: {}, retry=retry())}, [], "cannot declare retry"),
        ("tidy", {"tidy": compute(lambda ctx: {})}, [edge("a", "tidy")], "no edge may lead"),
        ("tidy", {"tidy": compute(lambda ctx: {})}, [edge("tidy", "a")], "no edge may lead"),
    ],
)
def test_a_bad_cleanup_node_is_refused_at_load(
    on_cancel: object, nodes: dict[str, Any], edges: list[Any], problem: str
) -> None:
    """An unknown name, a node that waits, a retry policy or an edge to or from it: each
    refused when the workflow loads, saying what a cleanup node must be."""
    with pytest.raises(WorkflowDefinitionError, match=problem):
        Workflow("w", start="a", nodes={**NODES, **nodes}, edges=edges, on_cancel=on_cancel)
