"""Hypothesis strategies and settings shared by the protocol tests."""

from __future__ import annotations

import math
import random
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

# No example database on disk (tests write only under tmp_path), no per-example deadline.
SETTINGS = settings(database=None, deadline=None, max_examples=200)

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
float_free_scalars = st.none() | st.booleans() | st.integers() | st.text()


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5)


json_values = st.recursive(scalars, _containers, max_leaves=40)
float_free_json_values = st.recursive(float_free_scalars, _containers, max_leaves=40)


def reorder(value: Any, rnd: random.Random) -> Any:
    """Return an equal value whose dicts (at every depth) list their keys in a shuffled order."""
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {key: reorder(value[key], rnd) for key in keys}
    if isinstance(value, list):
        return [reorder(item, rnd) for item in value]
    return value


def same(left: Any, right: Any) -> bool:
    """Exact equality: like ==, but 1, 1.0 and True differ, and so do 0.0 and -0.0.

    Key order is ignored, as JSON objects are unordered.
    """
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(map(same, left, right))
    if isinstance(left, float):
        return left == right and math.copysign(1.0, left) == math.copysign(1.0, right)
    return bool(left == right)
