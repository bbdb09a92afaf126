"""``subworkflow`` and ``fan_out``: what they accept, what they refuse with one line, and how
their nodes appear in a workflow's snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest

from pi_workflows import Workflow, compute, edge, fan_out, subworkflow
from pi_workflows.authoring import MAX_ITEMS, FanOutNode, NodeKind, SubworkflowNode
from pi_workflows.authoring.composition import Rate, parse_rate
from pi_workflows.engine import snapshot
from pi_workflows.sources import WorkflowLoadError, load, resolve

LEAF = Workflow("leaf", start="a", nodes={"a": compute(lambda ctx: 1)})


def test_a_name_or_a_workflow_object_names_the_child() -> None:
    by_name = subworkflow("leaf", input=lambda ctx: {"x": 1})
    by_object = fan_out(LEAF, items=lambda ctx: [1, 2], concurrency=2, fail_fast=True)
    assert isinstance(by_name, SubworkflowNode)
    assert (by_name.kind, by_name.workflow, by_name.detached) == (
        NodeKind.SUBWORKFLOW,
        "leaf",
        False,
    )
    assert isinstance(by_object, FanOutNode)
    assert by_object.workflow is LEAF
    assert (by_object.concurrency, by_object.fail_fast) == (2, True)
    assert MAX_ITEMS == 1000


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: fan_out("leaf", items=lambda ctx: [], concurrency=0),
         "fan_out concurrency must be an integer from 1 to 1000, got 0"),
        (lambda: fan_out("leaf", items=lambda ctx: [], concurrency=True),
         "fan_out concurrency must be an integer from 1 to 1000, got True"),
        (lambda: fan_out("leaf", items=[1, 2]),
         "fan_out items must be a callback items(ctx), got [1, 2]"),
        (lambda: fan_out("leaf", items=lambda ctx: [], input={"a": 1}),
         "fan_out input must be a callback input(ctx, item), got {'a': 1}"),
        (lambda: fan_out("leaf", items=lambda ctx: [], fail_fast="yes"),
         "fan_out fail_fast must be True or False, got 'yes'"),
        (lambda: fan_out("leaf", items=lambda ctx: [], rate="10/day"),
         "fan_out rate must be 'N/s', 'N/min' or 'N/h' with N from 1 to 10000"),
        (lambda: fan_out("leaf", items=lambda ctx: [], rate="0/s"), "got '0/s'"),
        (lambda: fan_out("leaf", items=lambda ctx: [], rate="10001/h"), "got '10001/h'"),
        (lambda: fan_out("leaf", items=lambda ctx: [], rate=10), "got 10"),
        (lambda: subworkflow("  "), "the child workflow must be a workflow name"),
        (lambda: subworkflow(42), "the child workflow must be a workflow name"),
        (lambda: subworkflow("leaf", input=5),
         "subworkflow input must be a callback input(ctx), got 5"),
        (lambda: subworkflow("leaf", detached=1),
         "subworkflow detached must be True or False, got 1"),
    ],
)  # fmt: skip
def test_bad_arguments_are_refused_with_one_line(build: object, message: str) -> None:
    with pytest.raises((TypeError, ValueError)) as raised:
        build()  # type: ignore[operator]
    text = str(raised.value)
    assert message in text
    assert "\n" not in text


def test_a_workflow_file_with_a_bad_concurrency_fails_to_load_with_its_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bad.workflow.py"
    path.write_text(
        "from pi_workflows import Workflow, fan_out\n"
        "workflow = Workflow('bad', start='each',\n"
        "    nodes={'each': fan_out('bad', items=lambda ctx: [], concurrency=-1)})\n"
    )
    with pytest.raises(WorkflowLoadError) as raised:
        load(resolve(str(path), None))
    text = str(raised.value)
    assert text.startswith(f"{path}:3:")
    assert "concurrency must be an integer from 1 to 1000, got -1" in text
    assert "\n" not in text


def test_a_child_workflow_object_not_bound_at_a_module_top_level_is_a_load_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "loose.workflow.py"
    path.write_text(
        "from pi_workflows import Workflow, compute, subworkflow\n"
        "def make():\n"
        "    return Workflow('inner', start='a', nodes={'a': compute(lambda ctx: 1)})\n"
        "workflow = Workflow('loose', start='one', nodes={'one': subworkflow(make())})\n"
    )
    with pytest.raises(WorkflowLoadError, match="is not bound to a module-level name"):
        load(resolve(str(path), None))


def test_a_file_may_import_the_workflow_it_fans_out_to(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text(
        "from pi_workflows import Workflow, compute\n"
        "child = Workflow('child', start='a', nodes={'a': compute(lambda ctx: 1)})\n"
    )
    path = tmp_path / "parent.workflow.py"
    path.write_text(
        "from pi_workflows import Workflow, fan_out\n"
        "from helper import child\n"
        "workflow = Workflow('parent', start='each',\n"
        "    nodes={'each': fan_out(child, items=lambda ctx: [1])})\n"
    )
    loaded = load(resolve(str(path), None))
    assert loaded.child_specs == {"each": f"{tmp_path / 'helper.py'}::child"}
    assert str(tmp_path / "helper.py") in loaded.mounted
    node = loaded.snapshot["nodes"]["each"]
    assert node["kind"] == "fan_out"


def test_a_rate_is_parsed_into_starts_per_period_and_recorded_in_the_snapshot() -> None:
    """``rate="10/min"`` (spaces allowed) is 10 starts per 60,000 ms; the snapshot records
    the rate only when one is set, so a fan_out without one snapshots as before."""
    assert parse_rate("10/min") == Rate(10, 60_000, "10/min")
    assert parse_rate(" 2 / s ") == Rate(2, 1_000, "2/s")
    assert parse_rate("100/h") == Rate(100, 3_600_000, "100/h")
    paced = fan_out("leaf", items=lambda ctx: [], rate="3/s")
    plain = fan_out("leaf", items=lambda ctx: [])
    nodes = snapshot(Workflow("w", "a", {"a": paced, "b": plain}, [edge("a", "b")]))["nodes"]
    assert isinstance(nodes, dict)
    assert nodes["a"]["rate"] == "3/s"
    assert "rate" not in nodes["b"]
