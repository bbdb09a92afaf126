"""The checkpoint answer form: fields built from the answer's JSON Schema, and the JSON
value read back from what the person typed.

Pure. A typed checkpoint's `answerSchema` with an object of simple properties becomes one
field per property (text, number, whole number, yes/no, a choice of an `enum`); a simple
schema (a string, a number, an enum) one field; anything else (no schema, nested objects,
arrays) one JSON text area. The value read back is checked only for what a form cannot
carry (a number that is not a number, JSON that does not parse): the schema itself and
the workflow's `validate` are checked by the server's runner, exactly as for
`pi-workflows checkpoint answer`, so the page shows the same messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["Field", "FormError", "fields_for", "value_from"]

MAX_ANSWER_CHARS: Final = 256 * 1024
"""The longest answer text the page takes (the server's bound on an answer)."""

_SIMPLE: Final = {"string": "text", "integer": "integer", "number": "number", "boolean": "boolean"}


class FormError(ValueError):
    """What the person typed cannot be made into a JSON value; `field` names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Field:
    """One input of the answer form."""

    name: str
    """The form field's name: `value` for a whole answer, `field.<property>` otherwise."""
    label: str
    kind: str
    """`text`, `integer`, `number`, `boolean`, `select` or `json`."""
    required: bool = False
    description: str | None = None
    options: list[tuple[str, str]] = field(default_factory=list)
    """For `select`: (the option's JSON, its label)."""
    property: str | None = None
    """The object property it fills; None for the whole answer."""


def _kind(schema: Mapping[str, Any]) -> str | None:
    if isinstance(schema.get("enum"), list) and all(
        isinstance(v, str | int | float | bool) or v is None for v in schema["enum"]
    ):
        return "select"
    kind = schema.get("type")
    return _SIMPLE.get(kind) if isinstance(kind, str) else None


def _field(
    name: str, label: str, schema: Mapping[str, Any], *, required: bool, prop: str | None
) -> Field:
    kind = _kind(schema) or "json"
    description = schema.get("description") if isinstance(schema.get("description"), str) else None
    options = [(json.dumps(v), str(v)) for v in schema["enum"]] if kind == "select" else []
    title = schema.get("title") if isinstance(schema.get("title"), str) else None
    return Field(
        name=name,
        label=title or label,
        kind=kind,
        required=required,
        description=description,
        options=options,
        property=prop,
    )


def fields_for(schema: Any) -> list[Field]:
    """The form's fields for `schema` (None or unusable: one JSON text area)."""
    if not isinstance(schema, Mapping):
        return [Field("value", "Answer (JSON)", "json", required=True)]
    properties = schema.get("properties")
    if schema.get("type") == "object" and isinstance(properties, Mapping) and properties:
        required: list[Any] = schema["required"] if isinstance(schema.get("required"), list) else []
        return [
            _field(
                f"field.{name}", str(name), sub if isinstance(sub, Mapping) else {},
                required=name in required, prop=str(name),
            )
            for name, sub in properties.items()
        ]  # fmt: skip
    if _kind(schema) is not None:
        return [_field("value", "Answer", schema, required=True, prop=None)]
    return [Field("value", "Answer (JSON)", "json", required=True)]


def value_from(fields: list[Field], form: Mapping[str, str]) -> Any:
    """The JSON value of a submitted form; `FormError` for text that is not a number or
    not JSON. An empty optional field is left out of the object."""
    whole = [f for f in fields if f.property is None]
    if whole:
        return _read(whole[0], form.get(whole[0].name, ""), absent_is_none=False)
    answer: dict[str, Any] = {}
    for item in fields:
        text = form.get(item.name, "")
        if item.kind == "boolean":
            answer[str(item.property)] = text == "true"
            continue
        if text == "" and not item.required:
            continue
        answer[str(item.property)] = _read(item, text, absent_is_none=False)
    return answer


def _read(item: Field, text: str, *, absent_is_none: bool) -> Any:
    if len(text) > MAX_ANSWER_CHARS:
        raise FormError(item.name, f"{item.label} is over {MAX_ANSWER_CHARS // 1024} KiB")
    match item.kind:
        case "text":
            return text
        case "boolean":
            return text == "true"
        case "integer":
            try:
                return int(text.strip())
            except ValueError:
                raise FormError(item.name, f"{item.label} must be a whole number") from None
        case "number":
            try:
                number = float(text.strip())
            except ValueError:
                raise FormError(item.name, f"{item.label} must be a number") from None
            return int(number) if number.is_integer() and "." not in text else number
        case "select":
            try:
                return json.loads(text)
            except ValueError:
                raise FormError(item.name, f"{item.label}: choose one of the options") from None
    if text.strip() == "" and absent_is_none:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise FormError(
            item.name,
            f"{item.label} is not JSON ({exc.args[0].split(':')[0]}); a text is"
            ' written in quotes, e.g. "ship it"',
        ) from None
