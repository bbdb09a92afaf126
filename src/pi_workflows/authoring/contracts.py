"""Typed contracts: the JSON Schema a run's input, an agent step's output or a checkpoint's
answer must match, and the text that tells the model or the person what that is.

Owns turning what an author passes (``Workflow(input=...)``, ``agent(output=...)``,
``checkpoint(answer=...)``: a Pydantic model class or a JSON Schema dict) into a
``Contract``, checking at load that its schema is a JSON Schema (``schema_problem``), and the
readable text a schema generates (``Contract.text``). A Pydantic model is recognised by its
methods, never by importing pydantic (the author's own dependency); ``jsonschema`` is
imported only by ``schema_problem``, so a workflow without a schema never loads it. Never
checks a value against a schema: the runner (``runner/contracts.py``) and the server
(``protocol/json_schema.py``) do.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Final, cast

from pi_workflows.authoring.values import JsonObject, JsonValue, json_problem

SCHEMA_NOTE: Final = "It must match this JSON Schema: "
"""How the schema is introduced in an expected output (followed by its compact JSON)."""

MAX_FIELDS: Final = 20
"""The most fields of an object schema the generated text lists one by one."""

MODEL_METHODS: Final = ("model_json_schema", "model_validate", "model_dump")
"""What makes a class a Pydantic (v2) model for a contract."""


@dataclass(frozen=True)
class Contract:
    """A typed contract: a JSON Schema, and the Pydantic model it was made from (if any).

    ``problem`` is set (and ``schema`` empty) when what the author passed is not a schema;
    the ``Workflow`` reports it at load, naming the node. A valid contract's ``schema`` is
    plain JSON (it travels in the definition snapshot the server stores).
    """

    schema: JsonObject
    model: type | None = None
    problem: str | None = None

    def __hash__(self) -> int:
        """By the schema's canonical text, so a node holding a contract stays hashable."""
        return hash((json.dumps(self.schema, sort_keys=True), self.model, self.problem))

    @property
    def note(self) -> str:
        """The line that gives the schema itself: ``SCHEMA_NOTE`` and its compact JSON."""
        return SCHEMA_NOTE + json.dumps(self.schema, ensure_ascii=False, separators=(",", ":"))

    @property
    def text(self) -> str:
        """The expected-output text this contract generates: a readable summary, then the
        schema (``note``)."""
        return f"{summary(self.schema)}\n{self.note}"


def is_model(value: object) -> bool:
    """True when ``value`` is a Pydantic model class (it has ``MODEL_METHODS``)."""
    return isinstance(value, type) and all(
        callable(getattr(value, name, None)) for name in MODEL_METHODS
    )


def contract(given: object, what: str) -> Contract | None:
    """The contract of ``given`` (``None`` for none): a model's ``model_json_schema()``, or a
    copy of a JSON Schema dict. Never raises: anything else is a contract whose ``problem``
    names ``what`` (``"output"``, ``"answer"``, ``"input"``)."""
    if given is None:
        return None
    if is_model(given):
        model = cast(type, given)
        try:
            schema = cast(Any, model).model_json_schema()
        except Exception as exc:  # any failure is the author's load error, reported at load
            problem = f"{type(exc).__name__}: {exc}".splitlines()[0]
            return Contract({}, model, f"{what}={model.__name__} has no JSON Schema ({problem})")
        return _checked(schema, what, model)
    if isinstance(given, dict):
        return _checked(given, what, None)
    got = f"the class {given.__name__}" if isinstance(given, type) else type(given).__name__
    problem = f"{what} must be a Pydantic model class or a JSON Schema dict, got {got}"
    return Contract({}, None, problem)


def _checked(schema: object, what: str, model: type | None) -> Contract:
    problem = json_problem(schema)
    if problem is not None:
        return Contract({}, model, f"the {what} schema is not JSON: {problem}")
    return Contract(cast(JsonObject, copy.deepcopy(schema)), model)


def schema_problem(schema: JsonObject) -> str | None:
    """Why ``schema`` is not a JSON Schema (a phrase such as ``is not a valid JSON Schema:
    ...``), or ``None``: it is checked against the
    meta-schema of the draft its ``$schema`` names (Draft 2020-12 when it names none, as
    Pydantic's schemas do). Imports ``jsonschema`` on first use."""
    from jsonschema import Draft202012Validator, SchemaError  # noqa: PLC0415 - lazy, see above
    from jsonschema.validators import validator_for  # noqa: PLC0415

    checker: Any = Draft202012Validator
    if "$schema" in schema:
        checker = validator_for(schema, default=cast(Any, None))
        if checker is None:
            named = json.dumps(schema["$schema"])
            return f"names $schema {named}, which is not a JSON Schema draft"
    try:
        checker.check_schema(schema)
    except SchemaError as exc:
        where = "".join(f"[{json.dumps(part)}]" for part in exc.absolute_path)
        return f"is not a valid JSON Schema: schema{where}: {exc.message}"[:300]
    return None


# --- the generated text ------------------------------------------------------------------


def summary(schema: JsonObject) -> str:
    """A short readable description of what ``schema`` accepts: its type, and for an
    object each field (type, required, description), at most ``MAX_FIELDS`` of them."""
    defs = _defs(schema)
    title = schema.get("title")
    named = f" {json.dumps(title)}" if isinstance(title, str) and title else ""
    described = schema.get("description")
    about = f" ({_one_line(described)})" if isinstance(described, str) and described else ""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return f"A JSON value{named}{about}: {_type_text(schema, defs)}."
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    lines = [f"A JSON object{named}{about} with these fields:"]
    for name, field in list(properties.items())[:MAX_FIELDS]:
        spec = field if isinstance(field, dict) else {}
        what = _type_text(spec, defs) + (", required" if name in needed else "")
        note = spec.get("description")
        lines.append(
            f"- {name} ({what})" + (f": {_one_line(note)}" if isinstance(note, str) else "")
        )
    if len(properties) > MAX_FIELDS:
        lines.append(f"- ... and {len(properties) - MAX_FIELDS} more (see the schema)")
    if schema.get("additionalProperties") is False:
        lines.append("No other fields are allowed.")
    return "\n".join(lines)


def _defs(schema: JsonObject) -> dict[str, JsonValue]:
    found = schema.get("$defs", schema.get("definitions"))
    return found if isinstance(found, dict) else {}


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _type_text(spec: dict[str, JsonValue], defs: dict[str, JsonValue], depth: int = 0) -> str:
    """``string``, ``integer | null``, ``array of Step``, ``one of "a", "b"``, ..."""
    if depth > 3:
        return "JSON"
    ref = spec.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        target = defs.get(name)
        if isinstance(target, dict) and "enum" in target:
            return _type_text(target, defs, depth + 1)
        return f"{name} object" if isinstance(target, dict) else name
    if "const" in spec:
        return json.dumps(spec["const"], ensure_ascii=False)
    enum = spec.get("enum")
    if isinstance(enum, list) and enum:
        shown = ", ".join(json.dumps(v, ensure_ascii=False) for v in enum[:8])
        return "one of " + shown + (", ..." if len(enum) > 8 else "")
    for key in ("anyOf", "oneOf"):
        options = spec.get(key)
        if isinstance(options, list) and options:
            return " | ".join(
                _type_text(o if isinstance(o, dict) else {}, defs, depth + 1) for o in options
            )
    kind = spec.get("type")
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    if kind == "array":
        items = spec.get("items")
        if isinstance(items, dict) and items:
            return f"array of {_type_text(items, defs, depth + 1)}"
        return "array"
    if isinstance(kind, str):
        return kind
    return "any JSON value"


__all__ = ["MODEL_METHODS", "SCHEMA_NOTE", "Contract", "contract", "is_model", "schema_problem"]
