"""The checkpoint answer form: fields from the answer schema, the JSON value read back."""

from __future__ import annotations

import pytest

from pi_workflows.web.forms import FormError, fields_for, value_from

SCHEMA = {
    "type": "object",
    "properties": {
        "count": {"type": "integer", "minimum": 1},
        "ratio": {"type": "number"},
        "note": {"type": "string", "description": "anything else"},
        "urgent": {"type": "boolean"},
        "level": {"enum": ["low", "high", 3]},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["count"],
}


def test_an_object_schema_gets_one_field_per_property_of_its_kind() -> None:
    """Each simple property becomes its own input; an array falls back to JSON."""
    fields = {f.property: f for f in fields_for(SCHEMA)}
    assert {name: f.kind for name, f in fields.items()} == {
        "count": "integer", "ratio": "number", "note": "text", "urgent": "boolean",
        "level": "select", "tags": "json",
    }  # fmt: skip
    assert fields["count"].required
    assert not fields["note"].required
    assert fields["note"].description == "anything else"
    assert fields["level"].options == [('"low"', "low"), ('"high"', "high"), ("3", "3")]


def test_the_form_reads_back_typed_values_and_leaves_out_empty_optional_ones() -> None:
    """Numbers are numbers, a checkbox is a boolean, an enum keeps its JSON type."""
    fields = fields_for(SCHEMA)
    typed = {
        "field.count": "3", "field.ratio": "0.5", "field.note": "", "field.urgent": "true",
        "field.level": "3", "field.tags": '["a", "b"]',
    }  # fmt: skip
    assert value_from(fields, typed) == {
        "count": 3,
        "ratio": 0.5,
        "urgent": True,
        "level": 3,
        "tags": ["a", "b"],
    }
    assert value_from(fields, {"field.count": "1", "field.urgent": "false"}) == {
        "count": 1,
        "urgent": False,
    }


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ({"field.count": "two"}, "count must be a whole number"),
        ({"field.count": "1", "field.ratio": "x"}, "ratio must be a number"),
        ({"field.count": "1", "field.tags": "[1,"}, "tags is not JSON"),
    ],
)
def test_text_that_is_not_the_fields_kind_is_refused_before_anything_is_sent(
    typed: dict[str, str], message: str
) -> None:
    """The form's own refusals name the field (the schema itself is the server's check)."""
    with pytest.raises(FormError, match=message):
        value_from(fields_for(SCHEMA), typed)


def test_no_schema_is_one_json_answer_and_a_simple_schema_one_field() -> None:
    """Without a schema the answer is JSON text; a string schema is a text field."""
    loose = fields_for(None)
    assert [(f.name, f.kind) for f in loose] == [("value", "json")]
    assert value_from(loose, {"value": '{"ok": true}'}) == {"ok": True}
    with pytest.raises(FormError, match="a text is written in quotes"):
        value_from(loose, {"value": "ship it"})
    text = fields_for({"type": "string"})
    assert value_from(text, {"value": "ship it"}) == "ship it"
