"""`runner.contracts.check`: a submitted output or answer against a node's typed contract,
with a Pydantic model (its own validation, the accepted value dumped as JSON) or a JSON
Schema dict."""

from __future__ import annotations

from datetime import date

import pytest
from pydantic import BaseModel, field_validator

from pi_workflows.authoring.contracts import contract
from pi_workflows.runner.contracts import Accepted, Refused, check

pytestmark = pytest.mark.timeout(60)


class Step(BaseModel):
    path: str
    line: int


class Plan(BaseModel):
    steps: list[Step]
    due: date
    note: str | None = None

    @field_validator("steps")
    @classmethod
    def not_empty(cls, steps: list[Step]) -> list[Step]:
        if not steps:
            raise ValueError("a plan has at least one step")
        return steps


def test_a_model_accepts_its_json_and_gives_back_the_dumped_value() -> None:
    """The accepted value is `model_dump(mode="json")`: defaults filled in, dates as text."""
    made = contract(Plan, "output")
    assert made is not None
    checked = check(made, {"steps": [{"path": "a.py", "line": 3}], "due": "2030-01-02"}, "output")
    assert checked == Accepted(
        {"steps": [{"path": "a.py", "line": 3}], "due": "2030-01-02", "note": None}
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (
            {"steps": [{"path": "a", "line": "x"}], "due": "2030-01-02"},
            "output.steps[0].line: Input should be a valid integer, unable to parse string as"
            " an integer (got 'x')",
        ),
        ({"steps": [{"path": "a", "line": 1}]}, "output.due: Field required"),
        (
            {"steps": [], "due": "2030-01-02"},
            "output.steps: Value error, a plan has at least one step (got [])",
        ),
        ("plan", "output: Input should be a valid dictionary or instance of Plan (got 'plan')"),
    ],
)
def test_a_model_refuses_with_the_path_and_reason_of_the_first_problem(
    value: object, problem: str
) -> None:
    """A wrong type, a missing field, a model validator's own error, a wrong shape: one
    line with the path, pydantic's message and what was given."""
    made = contract(Plan, "output")
    assert made is not None
    assert check(made, value, "output") == Refused(problem)  # type: ignore[arg-type]


def test_several_problems_say_how_many_more_there_are() -> None:
    """The first problem is named and the rest counted."""
    made = contract(Plan, "output")
    assert made is not None
    refused = check(made, {"steps": [{"path": 1, "line": "x"}]}, "answer")
    assert isinstance(refused, Refused)
    assert refused.problem.startswith("answer.steps[0].path: Input should be a valid string")
    assert refused.problem.endswith("; 2 more problem(s)")


def test_a_schema_dict_checks_with_json_schema_and_keeps_the_value() -> None:
    """A JSON Schema contract accepts the value as submitted, or names the wrong field."""
    made = contract({"type": "object", "properties": {"ok": {"type": "boolean"}}}, "answer")
    assert made is not None
    assert check(made, {"ok": True}, "answer") == Accepted({"ok": True})
    assert check(made, {"ok": "yes"}, "answer") == Refused(
        "answer.ok: 'yes' is not of type 'boolean'"
    )
