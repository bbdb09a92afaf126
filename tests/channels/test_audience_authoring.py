"""`human_decision(..., audience=...)` and `notify(..., audience=...)`: checked names, kept in
the workflow's recorded definition."""

from __future__ import annotations

import pytest

from pi_workflows import Workflow, choice, edge, human_decision, notify
from pi_workflows.authoring import WorkflowDefinitionError
from pi_workflows.engine.snapshot import snapshot as definition_snapshot

pytestmark = pytest.mark.timeout(30)


def _workflow(audience: object) -> Workflow:
    return Workflow(
        "asks",
        start="ask",
        nodes={
            "ask": human_decision("Go?", [choice("yes"), choice("no")], audience=audience),  # type: ignore[arg-type]
            "tell": notify("told", audience=audience),  # type: ignore[arg-type]
        },
        edges=[edge("ask", "tell")],
    )


def test_an_audience_is_recorded_in_the_definition() -> None:
    """The definition snapshot names each node's audience (an upgrade sees it change)."""
    nodes = definition_snapshot(_workflow("operator"))["nodes"]
    assert nodes["ask"]["audience"] == "operator"
    assert nodes["tell"]["audience"] == "operator"
    plain = definition_snapshot(_workflow(None))["nodes"]
    assert "audience" not in plain["ask"]


@pytest.mark.parametrize("audience", ["Operator", "has space", "", "x" * 41, 7])
def test_a_bad_audience_name_is_a_definition_error(audience: object) -> None:
    """An audience that is no audience name fails the workflow's check, naming the rule."""
    with pytest.raises(WorkflowDefinitionError, match="audience must be an audience name"):
        _workflow(audience)
