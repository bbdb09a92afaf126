"""Typed contracts at load: `Workflow(input=)`, `agent(output=)`, `checkpoint(answer=)` with a
Pydantic model or a JSON Schema dict, the expected output they generate, and the load
errors of a schema that is none."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from pi_workflows.authoring import (
    Workflow,
    WorkflowDefinitionError,
    agent,
    assistant_message,
    checkpoint,
    compute,
    edge,
    switch,
)
from pi_workflows.authoring.contracts import SCHEMA_NOTE, contract, schema_problem

pytestmark = pytest.mark.timeout(60)


class Step(BaseModel):
    path: str
    line: int


class Plan(BaseModel):
    """A plan of edits."""

    title: str = Field(description="What the plan is called")
    steps: list[Step]
    kind: Literal["fix", "refactor"] = "fix"
    note: str | None = None


ITEMS = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"type": "integer"}}},
    "required": ["items"],
}


def _one(node: Any, *, input: Any = None) -> Workflow:
    return Workflow("typed", start="a", nodes={"a": node}, input=input)


def test_a_model_output_carries_its_json_schema_and_generates_the_expected_output() -> None:
    """`agent(prompt, output=Model)`: the contract holds the model and its JSON Schema, and
    the expected output lists each field (type, required, description) then the schema."""
    node = agent("Plan the edits", output=Plan)
    assert node.output is not None
    assert node.output.model is Plan
    assert node.output.schema == Plan.model_json_schema()
    expected = node.expected_output
    assert isinstance(expected, str)
    assert expected.startswith('A JSON object "Plan" (A plan of edits.) with these fields:')
    assert "- title (string, required): What the plan is called" in expected
    assert "- steps (array of Step object, required)" in expected
    assert '- kind (one of "fix", "refactor")' in expected
    assert "- note (string | null)" in expected
    schema_line = expected.splitlines()[-1]
    assert schema_line.startswith(SCHEMA_NOTE)
    assert json.loads(schema_line.removeprefix(SCHEMA_NOTE)) == Plan.model_json_schema()
    _one(node)  # and it loads


def test_a_given_expected_output_is_kept_and_ends_with_the_schema() -> None:
    """With both, the author's text comes first and the schema line follows it."""
    node = agent("Count", expected_output='{"items": [1, 2]}', output=ITEMS)
    assert node.expected_output == f'{{"items": [1, 2]}}\n{SCHEMA_NOTE}' + json.dumps(
        ITEMS, separators=(",", ":")
    )


def test_a_schema_dict_is_copied_so_later_changes_do_not_reach_the_workflow() -> None:
    """The contract holds a copy of a JSON Schema dict."""
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    node = checkpoint("Which?", answer=schema)
    schema["properties"]["a"]["type"] = "integer"
    assert node.answer is not None
    assert node.answer.schema == {"type": "object", "properties": {"a": {"type": "string"}}}
    assert node.answer.model is None


def test_existing_signatures_stay_valid() -> None:
    """Positional `agent(prompt, expected_output, validate, timeout, allowed_tools)` and
    `checkpoint(request, validate=...)` build the same nodes as before, without contracts."""
    node = agent("Go", "anything", None, 30.0, ["read"])
    assert (node.expected_output, node.timeout, node.allowed_tools) == ("anything", 30.0, ("read",))
    assert node.output is None
    assert checkpoint("Go?", validate=None).answer is None
    assert Workflow("w", "a", {"a": compute(lambda ctx: 1)}, (), 5).input_contract is None


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (
            lambda: agent("x", output=42),
            "node 'a': output must be a Pydantic model class or a JSON Schema dict, got int",
        ),
        (
            lambda: agent("x", output=int),
            "output must be a Pydantic model class or a JSON Schema dict, got the class int",
        ),
        (
            lambda: checkpoint("x", answer={"type": "nope"}),
            "node 'a': the answer schema is not a valid JSON Schema: schema[\"type\"]: 'nope'",
        ),
        (
            lambda: checkpoint("x", answer={"$schema": "https://example.com/s", "type": "object"}),
            'the answer schema names $schema "https://example.com/s", which is not a JSON'
            " Schema draft",
        ),
        (
            lambda: agent("x", output={"type": "object", "default": float("nan")}),
            "node 'a': the output schema is not JSON: $.default is nan",
        ),
        (
            lambda: agent("x", assistant_message(), output=ITEMS),
            "output= is not allowed with expected_output=assistant_message()",
        ),
        (lambda: agent("x"), "or give output=SCHEMA to generate it"),
    ],
)
def test_a_schema_that_is_none_is_a_load_error_naming_the_node(make: Any, problem: str) -> None:
    """Not a dict or a model class, an invalid JSON Schema, an unknown draft, a schema that
    is not JSON, a schema on a reply step, or no expected output at all: the workflow does
    not load, and the error names the node."""
    with pytest.raises(WorkflowDefinitionError) as raised:
        _one(make())
    assert raised.value.node == "a"
    assert problem in str(raised.value)


def test_a_model_without_a_json_schema_is_a_load_error() -> None:
    """A model whose `model_json_schema()` raises is reported at load with the reason."""

    class Odd(BaseModel):
        model_config = {"arbitrary_types_allowed": True}
        handle: object = Field(default_factory=object)
        raw: type = int

    with pytest.raises(WorkflowDefinitionError) as raised:
        _one(agent("x", output=Odd))
    assert "output=Odd has no JSON Schema (" in str(raised.value)


def test_a_bad_input_schema_is_a_load_error_of_the_workflow() -> None:
    """`Workflow(input=...)` with no schema names the workflow and no node."""
    with pytest.raises(WorkflowDefinitionError) as raised:
        _one(compute(lambda ctx: 1), input="a string")
    assert raised.value.node is None
    assert str(raised.value) == (
        "workflow 'typed': input must be a Pydantic model class or a JSON Schema dict, got str"
    )
    workflow = _one(compute(lambda ctx: 1), input=Plan)
    assert workflow.input_contract is not None
    assert workflow.input_contract.schema == Plan.model_json_schema()


def test_a_draft_named_by_its_schema_key_is_checked_with_that_draft() -> None:
    """`$schema` of draft 7 is accepted and checked with draft 7's meta-schema."""
    seven = "http://json-schema.org/draft-07/schema#"
    assert schema_problem({"$schema": seven, "type": "object"}) is None
    assert schema_problem({"$schema": seven, "type": 3}) is not None


def test_a_contract_never_raises_for_what_it_cannot_use() -> None:
    """`contract()` turns anything unusable into a problem and `None` into no contract."""
    assert contract(None, "output") is None
    made = contract([1], "output")
    assert made is not None
    assert made.problem == "output must be a Pydantic model class or a JSON Schema dict, got list"


def test_loading_a_schema_less_workflow_imports_neither_jsonschema_nor_pydantic() -> None:
    """Building workflows without contracts loads no JSON Schema library (and our package
    never imports pydantic itself)."""
    probe = (
        "import sys\n"
        "from pi_workflows import Workflow, agent, checkpoint, compute, edge\n"
        "Workflow('w', start='a', nodes={'a': agent('x', 'y'), 'b': checkpoint('q?')},"
        " edges=[edge('a', 'b')])\n"
        "import pi_workflows.engine, pi_workflows.sources, pi_workflows.runner.waits\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jsonschema', 'pydantic')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_edges_after_a_typed_node_are_checked_as_before() -> None:
    """A typed agent routes like any agent: its edge leads to its target, an edge to an
    unknown node and a second outgoing edge are refused at load naming the node, and a
    switch on its output's field routes by that field's value."""
    workflow = Workflow(
        "typed",
        start="a",
        nodes={"a": agent("x", output=Plan), "b": compute(lambda ctx: 1)},
        edges=[edge("a", "b")],
    )
    assert workflow.outgoing("a") == edge("a", "b")
    with pytest.raises(WorkflowDefinitionError, match=r"'a'.*'nowhere'|'nowhere'.*'a'"):
        Workflow("typed", start="a", nodes={"a": agent("x", output=Plan)},
                 edges=[edge("a", "nowhere")])  # fmt: skip
    with pytest.raises(WorkflowDefinitionError, match="'a'"):
        Workflow(
            "typed",
            start="a",
            nodes={"a": agent("x", output=Plan), "b": compute(lambda ctx: 1),
                   "c": compute(lambda ctx: 2)},
            edges=[edge("a", "b"), edge("a", "c")],
        )  # fmt: skip
    routed = Workflow(
        "typed",
        start="a",
        nodes={"a": agent("x", output=Plan), "fix": compute(lambda ctx: 1),
               "refactor": compute(lambda ctx: 2)},
        edges=[switch("a", on="$.kind", cases={"fix": "fix", "refactor": "refactor"})],
    )  # fmt: skip
    switch_out = routed.outgoing("a")
    assert switch_out is not None
    assert switch_out.targets() == ("fix", "refactor")
    assert switch_out.target_for("refactor") == "refactor"


def test_nodes_with_contracts_stay_hashable_and_comparable() -> None:
    """A typed node hashes and compares like any frozen node (its schema is a dict)."""
    first, second = agent("x", output=Plan), agent("x", output=Plan)
    assert first == second
    assert hash(first) == hash(second)
    assert len({checkpoint("q", answer=ITEMS), checkpoint("q", answer=dict(ITEMS))}) == 1
