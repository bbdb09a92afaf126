"""`protocol.json_schema`: the first problem of a value against a JSON Schema, on one line
with the path of the wrong field."""

from __future__ import annotations

import pytest

from pi_workflows.protocol.json_schema import MAX_PROBLEM_CHARS, json_path, value_problem

pytestmark = pytest.mark.timeout(60)

ITEMS = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"path": {"type": "integer"}},
                "required": ["path"],
            },
        }
    },
    "required": ["items"],
}


def test_a_wrong_field_is_named_by_its_path() -> None:
    """The brief's example: the third item's `path` is a string."""
    value = {"items": [{"path": 1}, {"path": 2}, {"path": "x"}]}
    assert (
        value_problem(ITEMS, value, "input") == "input.items[2].path: 'x' is not of type 'integer'"
    )


def test_a_missing_field_is_named_at_its_object() -> None:
    """A missing required key is reported at the object that lacks it."""
    assert value_problem(ITEMS, {"items": [{}]}, "output") == (
        "output.items[0]: 'path' is a required property"
    )


def test_a_matching_value_has_no_problem() -> None:
    """`None` when the value matches."""
    assert value_problem(ITEMS, {"items": [{"path": 3}]}, "input") is None


def test_keys_that_are_not_names_are_quoted() -> None:
    """Odd keys and indexes render unambiguously."""
    assert json_path("answer", ["a b", 0, "ok", "x.y"]) == 'answer["a b"][0].ok["x.y"]'


def test_a_problem_quoting_a_large_value_stays_one_bounded_line() -> None:
    """A message that quotes a large or multi-line value is cut to one short line."""
    problem = value_problem({"type": "integer"}, {"text": "line\n" * 500}, "input")
    assert problem is not None
    assert "\n" not in problem
    assert len(problem) <= MAX_PROBLEM_CHARS
    assert problem.startswith("input: {")
    assert problem.endswith("...")


def test_a_draft_named_by_the_schema_is_used() -> None:
    """Draft 4's boolean `exclusiveMaximum` is understood when `$schema` names draft 4."""
    four = {"$schema": "http://json-schema.org/draft-04/schema#", "maximum": 3,
            "exclusiveMaximum": True}  # fmt: skip
    assert value_problem(four, 3, "input") is not None
    assert value_problem(four, 2, "input") is None
