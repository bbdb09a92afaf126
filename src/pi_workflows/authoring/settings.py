"""Live settings: the typed document a run carries and people (or the model) change.

Owns turning ``Workflow(settings=..., settings_changed_by=...)`` into a ``SettingsDecl``:
the settings contract (a Pydantic model class or a JSON Schema dict, as for the other typed
contracts), the defaults every run starts with, and who may change them. Defaults come from
the model (``model_validate({})``, then ``model_dump(mode="json")``) or from the schema's
``default`` keywords; they must match the schema, so a run's first settings are always
valid. Never applies a change: the server does (``store/settings.py``), checking the
schema the definition snapshot carries, since it runs no workflow code.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, cast

from pi_workflows.authoring.contracts import Contract, contract, schema_problem
from pi_workflows.authoring.values import JsonObject, JsonValue, json_problem

CHANGERS: Final = ("person", "model")
"""Who may change a run's settings: a person (the CLI, the Python client, ``/workflow
change-settings``, the web page) and, when the workflow allows it, the model (the Pi
``workflow`` tool's ``change-settings`` action)."""

MAX_SETTINGS_BYTES: Final = 16 * 1024
"""The largest settings document, in bytes of canonical JSON (defaults and every change)."""


@dataclass(frozen=True)
class SettingsDecl:
    """A workflow's settings: its contract, its defaults and who may change them.

    ``problem`` is set when the declaration cannot be used; ``Workflow`` reports it at load.
    """

    contract: Contract
    defaults: JsonValue
    changed_by: tuple[str, ...]
    problem: str | None = None


def declare(given: object, changed_by: object) -> SettingsDecl | None:
    """The settings declaration of ``Workflow(settings=given, settings_changed_by=...)``;
    ``None`` when ``given`` is ``None``. Never raises: a problem is kept for the load check."""
    who, who_problem = _changers(changed_by)
    if given is None:
        if who_problem is None and who != ("person",):
            return SettingsDecl(
                Contract({}), None, who, "settings_changed_by needs settings=... to change"
            )
        return None
    typed = contract(given, "settings")
    assert typed is not None
    if typed.problem is not None:
        return SettingsDecl(typed, None, who, typed.problem)
    problem = schema_problem(typed.schema)
    if problem is not None:
        return SettingsDecl(typed, None, who, f"the settings schema {problem}")
    if who_problem is not None:
        return SettingsDecl(typed, None, who, who_problem)
    defaults, problem = _defaults(typed)
    if problem is not None:
        return SettingsDecl(typed, None, who, problem)
    return SettingsDecl(typed, defaults, who)


def _changers(given: object) -> tuple[tuple[str, ...], str | None]:
    names: Iterable[object] = (given,) if isinstance(given, str) else cast(Any, given)
    try:
        listed = list(names)
    except TypeError:
        return ("person",), "settings_changed_by must be 'person', 'model' or a list of them"
    bad = [name for name in listed if name not in CHANGERS]
    if bad:
        return ("person",), (
            f"settings_changed_by names {bad[0]!r}; use 'person', 'model' or a list of them"
        )
    return tuple(sorted({str(name) for name in listed})), None


def _defaults(typed: Contract) -> tuple[JsonValue, str | None]:
    """The defaults of ``typed`` and, when they cannot serve, why."""
    if typed.model is not None:
        model: Any = typed.model
        try:
            value = model.model_validate({}).model_dump(mode="json")
        except Exception as exc:  # the author's model: any failure is a load problem
            first = f"{type(exc).__name__}: {exc}".splitlines()[0]
            return None, (
                f"settings={model.__name__} must give every field a default (the defaults"
                f" are every run's first settings): {first}"
            )
    else:
        value = schema_defaults(typed.schema)
    problem = json_problem(value)
    if problem is not None:
        return None, f"the settings defaults are not JSON: {problem}"
    size = len(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    if size > MAX_SETTINGS_BYTES:
        return None, (
            f"the settings defaults are {size} bytes of JSON; the limit is {MAX_SETTINGS_BYTES}"
        )
    mismatch = defaults_problem(typed.schema, value)
    if mismatch is not None:
        return None, (
            f"the settings defaults do not match the settings schema ({mismatch}): give every"
            " required field a default"
        )
    return cast(JsonValue, value), None


def schema_defaults(schema: JsonObject) -> JsonValue:
    """The document a JSON Schema's ``default`` keywords make: the schema's own ``default``
    when it has one, else, for an object schema, each property's default (nested object
    properties filled the same way); ``{}`` when it names none."""
    return _filled(schema, schema, 0)


def _filled(spec: JsonObject, root: JsonObject, depth: int) -> JsonValue:
    if "default" in spec:
        return copy.deepcopy(spec["default"])
    ref = spec.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/") and depth < 16:
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        if isinstance(target, dict):
            return _filled(target, root, depth + 1)
    properties = spec.get("properties")
    if not isinstance(properties, dict):
        return {} if depth == 0 else None
    document: JsonObject = {}
    for name, field in properties.items():
        if not isinstance(field, dict):
            continue
        value = _filled(field, root, depth + 1)
        if value is not None or "default" in field:
            document[name] = value
    return document if document or depth == 0 else None


def defaults_problem(schema: JsonObject, value: object) -> str | None:
    """Where ``value`` breaks ``schema`` (one line), or ``None``. Imports ``jsonschema``."""
    from jsonschema import Draft202012Validator  # noqa: PLC0415 - lazy, as in contracts
    from jsonschema.exceptions import best_match  # noqa: PLC0415
    from jsonschema.validators import validator_for  # noqa: PLC0415

    checker: Any = Draft202012Validator
    if "$schema" in schema:
        checker = validator_for(schema, default=Draft202012Validator)
    error = best_match(checker(schema).iter_errors(value))
    if error is None:
        return None
    where = "".join(f"[{json.dumps(part)}]" for part in error.absolute_path)
    return f"settings{where}: {error.message}"[:300]


__all__ = ["CHANGERS", "MAX_SETTINGS_BYTES", "SettingsDecl", "declare", "schema_defaults"]
