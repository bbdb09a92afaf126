"""Checking a JSON value against a typed contract's JSON Schema: the first problem, on one
line, with the path of the wrong field (``input.items[2].path: 'x' is not of type
'integer'``).

Shared by the server (a run's input at ``run.start``) and the runner (an agent step's
output, a checkpoint's answer, a child run's input). The schema was checked when the
workflow loaded (``authoring/contracts.py``); it is Draft 2020-12 unless its ``$schema``
names another draft. ``format`` is an annotation, as the draft says, not an assertion.
``jsonschema`` is imported on the first check, never at import, so a process that meets no
schema never loads it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

MAX_PROBLEM_CHARS: Final = 300
"""The longest problem text (a message quoting a large value is cut with ``...``)."""

_NAME: Final = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")


def json_path(root: str, parts: Iterable[str | int]) -> str:
    """``root`` followed by each key (``.name``, or ``["odd key"]``) and index (``[2]``)."""
    path = root
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            path += f"[{part}]"
        elif isinstance(part, str) and _NAME.match(part):
            path += f".{part}"
        else:
            path += f"[{json.dumps(str(part), ensure_ascii=False)}]"
    return path


def bounded(text: str) -> str:
    """``text`` on one line, at most ``MAX_PROBLEM_CHARS`` characters."""
    line = " ".join(text.split())
    if len(line) > MAX_PROBLEM_CHARS:
        line = line[: MAX_PROBLEM_CHARS - 3] + "..."
    return line


def value_problem(schema: Mapping[str, Any], value: object, root: str) -> str | None:
    """The first place ``value`` breaks ``schema`` as ``PATH: reason`` (``root`` names the
    value: ``input``, ``output``, ``answer``), or ``None`` when it matches. Of several
    problems the library's best match is named: the one highest in the value, a specific
    one before a vague one."""
    from jsonschema import Draft202012Validator  # noqa: PLC0415 - lazy, see the docstring
    from jsonschema.exceptions import best_match  # noqa: PLC0415
    from jsonschema.validators import validator_for  # noqa: PLC0415

    checker: Any = Draft202012Validator
    if "$schema" in schema:
        checker = validator_for(schema, default=Draft202012Validator)
    error = best_match(checker(schema).iter_errors(value))
    if error is None:
        return None
    return bounded(f"{json_path(root, error.absolute_path)}: {error.message}")


__all__ = ["MAX_PROBLEM_CHARS", "bounded", "json_path", "value_problem"]
