"""Canonical JSON: stable bytes, key-order independence, and strict refusal of non-JSON."""

from __future__ import annotations

import collections
import datetime
import enum
import hashlib
import json
import random
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_workflows.protocol import (
    MAX_JSON_DEPTH,
    NotJsonError,
    canonical_json,
    fingerprint,
    sha256_hex,
)

from .strategies import SETTINGS, float_free_json_values, json_values, reorder, same


class _Color(enum.IntEnum):
    RED = 1


def _nested_lists(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@SETTINGS
@given(json_values)
def test_canonical_json_decodes_back_to_the_same_value(value: Any) -> None:
    """Decoding the canonical bytes gives back exactly the value, types included."""
    assert same(msgspec.json.decode(canonical_json(value)), value)


@SETTINGS
@given(json_values, st.randoms(use_true_random=False))
def test_key_order_does_not_change_canonical_bytes(value: Any, rnd: random.Random) -> None:
    """The same value with its object keys inserted in another order has identical bytes."""
    assert canonical_json(reorder(value, rnd)) == canonical_json(value)


@SETTINGS
@given(json_values)
def test_canonical_json_is_a_fixed_point(value: Any) -> None:
    """Canonicalising the decoded canonical form yields the same bytes again."""
    data = canonical_json(value)
    assert canonical_json(msgspec.json.decode(data)) == data


@SETTINGS
@given(float_free_json_values)
def test_canonical_json_matches_sorted_compact_stdlib_json_without_floats(value: Any) -> None:
    """Without floats, the bytes equal stdlib json with sorted keys, compact, UTF-8."""
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_json(value) == expected.encode("utf-8")


def test_canonical_json_sorts_keys_by_code_point_and_is_compact() -> None:
    """Keys are sorted by code point at every level, with no spaces and raw UTF-8."""
    value = {"b": 1, "a": {"z": [1.0, None, True], "é": "é"}, "\U0001f600": 2, "\uffff": 3}
    expected = '{"a":{"z":[1.0,null,true],"é":"é"},"b":1,"\uffff":3,"\U0001f600":2}'
    assert canonical_json(value) == expected.encode("utf-8")


def test_int_and_float_with_equal_values_have_different_bytes() -> None:
    """`1` and `1.0` are different JSON values and so have different canonical bytes."""
    assert canonical_json(1) == b"1"
    assert canonical_json(1.0) == b"1.0"
    assert fingerprint({"n": 1}) != fingerprint({"n": 1.0})


@SETTINGS
@given(json_values, st.randoms(use_true_random=False))
def test_fingerprint_ignores_key_order(value: Any, rnd: random.Random) -> None:
    """Two values that differ only in key order have the same fingerprint."""
    assert fingerprint(reorder(value, rnd)) == fingerprint(value)


def test_fingerprint_is_the_sha256_of_the_canonical_bytes() -> None:
    """The fingerprint is the lowercase sha256 hex digest of the canonical JSON."""
    value = {"b": [1, 2], "a": "x"}
    assert fingerprint(value) == hashlib.sha256(b'{"a":"x","b":[1,2]}').hexdigest()
    assert fingerprint({"b": [1, 2], "a": "x"}) == fingerprint({"a": "x", "b": [1, 2]})


def test_sha256_hex_matches_the_standard_test_vector() -> None:
    """sha256_hex of b"abc" is the FIPS 180-2 test vector."""
    assert sha256_hex(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


@pytest.mark.parametrize(
    ("value", "path", "fragment"),
    [
        ({"items": [1, 2, (3,)]}, "$.items[2]", "tuple is not a JSON value"),
        ({"a": {1: "x"}}, "$.a", "object key 1 (int) is not a str"),
        ({"a": {"b": {1, 2}}}, "$.a.b", "set is not a JSON value"),
        ([b"raw"], "$[0]", "bytes is not a JSON value"),
        ({"when": datetime.date(2024, 1, 1)}, "$.when", "datetime.date is not a JSON value"),
        ({"color": _Color.RED}, "$.color", "is not a JSON value"),
        ({"x": collections.OrderedDict()}, "$.x", "collections.OrderedDict is not a JSON"),
        ({"a b": [object()]}, '$["a b"][0]', "object is not a JSON value"),
        (("top",), "$", "tuple is not a JSON value"),
    ],
)
def test_non_json_type_is_rejected_with_its_path(value: Any, path: str, fragment: str) -> None:
    """A value of a non-JSON type (or a subclass) is refused, naming where it sits."""
    with pytest.raises(NotJsonError) as caught:
        canonical_json(value)
    assert caught.value.path == path
    assert str(caught.value).startswith(f"{path}: ")
    assert fragment in caught.value.reason


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinity_are_rejected_with_their_path(bad: float) -> None:
    """Non-finite floats are refused instead of being written as null."""
    with pytest.raises(NotJsonError) as caught:
        fingerprint({"metrics": {"ratio": [0.5, bad]}})
    assert caught.value.path == "$.metrics.ratio[1]"
    assert "not allowed in JSON" in caught.value.reason


@pytest.mark.parametrize(
    ("value", "path"),
    [({"text": "ok\ud800"}, "$.text"), ({"k\udfff": 1}, '$["k\\udfff"]'), ("\ud800", "$")],
)
def test_lone_surrogate_is_rejected_with_its_path(value: Any, path: str) -> None:
    """A string that is not valid Unicode (a lone surrogate) is refused, key or value."""
    with pytest.raises(NotJsonError) as caught:
        canonical_json(value)
    assert caught.value.path == path
    assert "lone surrogate" in caught.value.reason


def test_the_first_problem_in_document_order_is_reported() -> None:
    """With several problems, the error names the first one in document order."""
    with pytest.raises(NotJsonError) as caught:
        canonical_json({"a": [1, {"b": float("nan")}], "c": (1,)})
    assert caught.value.path == "$.a[1].b"


def test_nesting_up_to_the_limit_is_accepted_and_deeper_is_rejected() -> None:
    """Exactly MAX_JSON_DEPTH levels of containers encode; one more level is refused."""
    assert canonical_json(_nested_lists(MAX_JSON_DEPTH)).startswith(b"[[")
    with pytest.raises(NotJsonError) as caught:
        canonical_json(_nested_lists(MAX_JSON_DEPTH + 1))
    assert caught.value.path == "$" + "[0]" * MAX_JSON_DEPTH
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in caught.value.reason
    assert len(str(caught.value)) < 400


def test_rejection_is_both_a_type_error_and_a_value_error() -> None:
    """Callers may catch a refusal as TypeError or as ValueError."""
    with pytest.raises(TypeError):
        canonical_json({"a": (1,)})
    with pytest.raises(ValueError, match=r"\$\.a"):
        canonical_json({"a": float("nan")})
