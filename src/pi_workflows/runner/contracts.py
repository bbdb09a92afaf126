"""Checking a value against a node's typed contract, before the author's ``validate``.

Runs in the runner child; never opens the database. ``check`` takes an agent step's
submitted output or a checkpoint's answer and returns the value to continue with, or the
one-line problem the model or person is sent back with (the path of the first wrong field
and why). A Pydantic model checks with the model itself (``model_validate``; the accepted
value is ``model_dump(mode="json")``); a JSON Schema dict with ``protocol.json_schema``.
Nothing from pydantic is imported: the model's own methods are called, and its validation
error is read by its documented ``errors()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pi_workflows.authoring import Contract, JsonValue, json_problem
from pi_workflows.protocol.json_schema import bounded, json_path, value_problem
from pi_workflows.runner.errors import describe_exception


@dataclass(frozen=True)
class Accepted:
    """The value matched the contract: continue with ``value`` (plain JSON)."""

    value: JsonValue


@dataclass(frozen=True)
class Refused:
    """The value did not match: ``problem`` is the one line to send back."""

    problem: str


def check(contract: Contract, value: JsonValue, root: str) -> Accepted | Refused:
    """Check ``value`` (``root`` names it: ``output``, ``answer``) against ``contract``."""
    if contract.model is None:
        problem = value_problem(contract.schema, value, root)
        return Accepted(value) if problem is None else Refused(problem)
    model: Any = contract.model
    try:
        instance = model.model_validate(value)
    except Exception as exc:  # pydantic's ValidationError, or a validator that raised
        return Refused(_model_problem(exc, root))
    try:
        dumped = instance.model_dump(mode="json")
    except Exception as exc:  # the model cannot be written back as JSON
        return Refused(bounded(f"{root}: the model could not dump it as JSON: {exc}"))
    problem = json_problem(dumped)
    if problem is not None:
        return Refused(bounded(f"{root}: the model's JSON is not plain JSON: {problem}"))
    return Accepted(dumped)


def _model_problem(exc: Exception, root: str) -> str:
    """The first error of a pydantic ``ValidationError`` as ``PATH: message (got VALUE)``;
    any other exception by its type and message."""
    errors = getattr(exc, "errors", None)
    found: object = None
    if callable(errors):
        try:
            found = errors(include_url=False)
        except Exception:  # not pydantic's errors(): describe the exception instead
            found = None
    if not isinstance(found, list) or not found or not isinstance(found[0], dict):
        return bounded(f"{root}: {describe_exception(exc)}")
    first = found[0]
    location = first.get("loc")
    parts = [p for p in location if isinstance(p, str | int)] if isinstance(location, tuple) else []
    message = str(first.get("msg", "invalid"))
    got = ""
    if first.get("type") != "missing" and "input" in first:
        got = f" (got {_short(first['input'])})"
    more = f"; {len(found) - 1} more problem(s)" if len(found) > 1 else ""
    return bounded(f"{json_path(root, parts)}: {message}{got}{more}")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["Accepted", "Refused", "check"]
