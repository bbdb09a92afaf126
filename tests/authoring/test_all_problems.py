"""The graph check reports every problem of a definition at once, each at the line of the
node or edge it concerns; where a node was written never changes what it is."""

from __future__ import annotations

import textwrap

import pytest

from pi_workflows.authoring import Workflow, WorkflowDefinitionError, compute, edge
from pi_workflows.engine import definition_digest, snapshot

pytestmark = pytest.mark.timeout(30)

FILE = "/projects/app/.pi/workflows/broken.workflow.py"

# Three distinct problems: a retry on an agent step (line 6), a node no route reaches
# (line 7) and an edge to a node that does not exist (line 11).
BROKEN = textwrap.dedent(
    """\
    from pi_workflows import Workflow, agent, compute, edge, retry

    workflow = Workflow(
        "broken", start="ask",
        nodes={
            "ask": agent("Say hi", "a greeting", retry=retry(attempts=2)),
            "lost": compute(lambda ctx: 1),
            "a": compute(lambda ctx: 1),
        },
        edges=[edge("ask", "a"),
               edge("a", "nowhere")],
    )
    """
)


def _problems_of(source: str, file: str = FILE) -> WorkflowDefinitionError:
    """Run ``source`` as the workflow file ``file`` would run; the error it raises."""
    code = compile(source, file, "exec")
    with pytest.raises(WorkflowDefinitionError) as caught:
        exec(code, {"__name__": "_pi_workflows_source_1_broken"})
    return caught.value


def test_every_problem_is_reported_at_the_line_of_its_node_or_edge() -> None:
    """Three distinct problems come back together, each with the file and line of the
    helper call it concerns, in the order the checks found them."""
    error = _problems_of(BROKEN)
    found = [(p.file, p.line, p.node, p.problem) for p in error.problems]
    assert found == [
        (
            FILE, 6, "ask",
            "agent nodes cannot declare retry: a step is asked again through validate"
            " (raise Rejected)",
        ),
        (FILE, 11, "a", "edge to unknown node 'nowhere'"),
        (FILE, 7, "lost", "unreachable from the start node 'ask'"),
    ]  # fmt: skip
    assert error is error.problems[0]
    assert str(error) == (
        "workflow 'broken', node 'ask': agent nodes cannot declare retry: a step is asked"
        " again through validate (raise Rejected)"
    )


def test_the_first_problem_is_the_one_a_single_problem_check_raised() -> None:
    """The raised error is still the first problem in check order, with the same one-line
    text as when it was the only one; the others follow in ``problems``."""
    source = BROKEN.replace(", retry=retry(attempts=2)", "")
    error = _problems_of(source)
    assert str(error) == "workflow 'broken', node 'a': edge to unknown node 'nowhere'"
    assert [p.line for p in error.problems] == [11, 7]


def test_graph_level_problems_are_placed_at_the_workflow_call() -> None:
    """A bad ``max_steps`` and an unknown start have no node or edge: they are at the line
    of ``Workflow(...)``, and an unknown start does not also make every node unreachable."""
    source = textwrap.dedent(
        """\
        from pi_workflows import Workflow, compute

        workflow = Workflow(
            "w", start="missing", max_steps=0,
            nodes={"a": compute(lambda ctx: 1)},
        )
        """
    )
    error = _problems_of(source)
    assert [(p.line, p.problem) for p in error.problems] == [
        (3, "max_steps must be a positive integer, got 0"),
        (3, "unknown start node 'missing'"),
    ]


def test_a_definition_with_no_usable_nodes_reports_only_that() -> None:
    """When ``nodes`` is not a mapping, nothing else is checked: one mistake, one problem."""
    with pytest.raises(WorkflowDefinitionError) as caught:
        Workflow("w", "a", [compute(lambda ctx: 1)], [edge("a", "b")])  # type: ignore[arg-type]
    assert [p.problem for p in caught.value.problems] == [
        "nodes must be a non-empty mapping of node id -> node"
    ]


def test_every_problem_of_one_switch_and_of_several_edges_is_listed() -> None:
    """A second outgoing edge, an edge from an unknown node and a switch to two unknown
    targets are four problems, each at its own line."""
    source = textwrap.dedent(
        """\
        from pi_workflows import Workflow, compute, edge, switch

        workflow = Workflow("w", "a", {
            "a": compute(lambda ctx: 1),
            "b": compute(lambda ctx: 1),
        }, [
            edge("a", "b"),
            edge("a", "b"),
            edge("ghost", "a"),
            switch("b", on="$.x", cases={1: "n1", 2: "n2"}),
        ])
        """
    )
    error = _problems_of(source)
    assert [(p.line, p.problem) for p in error.problems] == [
        (8, "more than one outgoing edge; use one switch(...) to branch"),
        (9, "edge from unknown node 'ghost'"),
        (10, "edge to unknown node 'n1'"),
        (10, "edge to unknown node 'n2'"),
    ]


def test_where_a_node_was_written_changes_neither_equality_nor_the_digest() -> None:
    """The same workflow written at other lines has equal nodes and the same definition
    digest: a line is kept beside the node, never in it."""
    first = Workflow("w", "a", {"a": compute(len)}, [])
    second = Workflow(
        "w",
        "a",
        {"a": compute(len)},
        [],
    )
    assert first.nodes["a"] == second.nodes["a"]
    assert definition_digest(snapshot(first)) == definition_digest(snapshot(second))


def test_a_helper_called_through_the_authors_own_function_is_placed_there() -> None:
    """A node built inside the author's helper function is placed at the line in that
    function that called the node helper (the innermost frame outside the package)."""
    source = textwrap.dedent(
        """\
        from pi_workflows import Workflow, agent, retry

        def step(text):
            return agent(text, "anything", retry=retry())

        workflow = Workflow("w", "a", {"a": step("hi")}, [])
        """
    )
    (problem,) = _problems_of(source).problems
    assert (problem.file, problem.line) == (FILE, 4)
