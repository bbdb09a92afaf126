"""``check_json`` and the canonical bytes the engine hashes."""

from __future__ import annotations

import pytest

from pi_workflows.engine import NotJsonError, canonical_json, check_json, preview


def test_check_json_returns_plain_json_unchanged() -> None:
    """A plain JSON value passes through as the same object."""
    value = {"a": [1, 2.5, None, True, "é"]}
    assert check_json(value, "the run input") is value


def test_check_json_names_whose_value_and_where_inside() -> None:
    """The error says whose value it is and the path of the problem."""
    with pytest.raises(NotJsonError) as caught:
        check_json({"when": object()}, "output of node 'collect'")
    assert caught.value.where == "output of node 'collect'"
    assert str(caught.value) == (
        "output of node 'collect' is not JSON: $.when is an object, not a JSON value"
    )
    assert isinstance(caught.value, TypeError)
    assert isinstance(caught.value, ValueError)


def test_canonical_json_sorts_keys_compactly_in_utf8() -> None:
    """Keys are sorted, separators compact, non-ASCII kept as UTF-8."""
    assert canonical_json({"b": 1, "a": {"d": [1.0], "c": "é"}}) == (
        '{"a":{"c":"é","d":[1.0]},"b":1}'.encode()
    )


def test_canonical_json_matches_the_protocol_bytes() -> None:
    """The engine and the protocol produce the same canonical bytes (one digest form)."""
    from pi_workflows.protocol import canonical_json as protocol_canonical_json

    value = {"z": [1, 1.5, -0.0, 1e16, None, True], "a": "ü\u2028\x01", "m": {"k": []}}
    assert canonical_json(value) == protocol_canonical_json(value)


def test_canonical_json_refuses_non_json() -> None:
    """Values that are not plain JSON are refused, never converted."""
    with pytest.raises(NotJsonError):
        canonical_json({"a": (1, 2)})


def test_preview_is_short_and_one_line() -> None:
    """Error previews are JSON, truncated to a bounded length."""
    assert preview("maybe") == '"maybe"'
    assert len(preview("x" * 1000)) == 120
    assert preview({1, 2}) == "<set>"
