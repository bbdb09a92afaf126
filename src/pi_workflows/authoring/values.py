"""JSON values, node outcomes and durations shared by every layer.

Owns the vocabulary that workflow authors see in ``ctx`` and in ``$result`` switches: what a
JSON value is (and ``json_problem``, the one check of it), the three routable node
outcomes, and how durations are written. Pure functions only; no I/O.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import TypeAlias

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
"""A JSON value as Python builds it: ``None``, ``bool``, ``int``, finite ``float``, ``str``,
``list`` and ``dict`` with ``str`` keys. Node outputs, run input and answers are JSON values."""

JsonObject: TypeAlias = "dict[str, JsonValue]"


class Outcome(StrEnum):
    """The routable outcome of one node execution (``$result.outcome``).

    A cancelled node has no outcome here: cancellation ends the run and is never routed.
    """

    OK = "ok"  # the node produced an accepted output
    FAILED = "failed"  # the callback raised, the command exited non-zero, or the output was bad
    TIMED_OUT = "timed_out"  # the node's deadline passed before it produced an output


CANCELLED = "cancelled"
"""The run-level word for cancellation; rejected as a ``$result.outcome`` case at load."""


def seconds(value: float) -> float:
    """A duration of ``value`` seconds, for node timeouts (``timeout=seconds(30)``)."""
    return _duration(value, 1.0, "seconds")


def minutes(value: float) -> float:
    """A duration of ``value`` minutes, in seconds (``timeout=minutes(10)`` is 600.0)."""
    return _duration(value, 60.0, "minutes")


def _duration(value: float, scale: float, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{unit}() takes a number, got {type(value).__name__}")
    result = float(value) * scale
    if not math.isfinite(result) or result <= 0:
        raise ValueError(f"{unit}() takes a positive finite number, got {value!r}")
    return result


MAX_JSON_DEPTH = 256
"""Most levels of nested containers a JSON value may have (``[]`` is 1, ``[[]]`` is 2)."""


def json_problem(value: object) -> str | None:
    """Describe the first part of ``value`` that is not plain JSON, or ``None`` if it is.

    Plain JSON means exactly ``dict`` (with ``str`` keys), ``list``, ``str``, ``int``,
    ``float``, ``bool`` and ``None``; subclasses (an enum member, an ``OrderedDict``) and
    tuples are refused rather than converted, because a converted value would come back
    different after a restart. NaN and infinities, strings with lone surrogates and nesting
    deeper than ``MAX_JSON_DEPTH`` (which also catches cycles) are refused too. The
    description names the location as a path (``$.items[2]``) and the Python type. This is
    the same rule as the protocol's canonical JSON, so a value accepted here can be stored.
    """
    stack: list[tuple[object, str, int]] = [(value, "$", 0)]
    while stack:
        item, where, depth = stack.pop()
        kind = type(item)
        if item is None or kind is bool or kind is int:
            continue
        if isinstance(item, str) and kind is str:
            if not _valid_unicode(item):
                return f"{where} is a string with a lone surrogate (not valid Unicode)"
            continue
        if isinstance(item, float) and kind is float:
            if not math.isfinite(item):
                return f"{where} is {item!r}, which JSON cannot represent"
            continue
        if kind is not list and kind is not dict:
            hint = " (use a list)" if isinstance(item, tuple) else ""
            name = _type_name(item)
            article = "an" if name[:1].lower() in "aeiou" else "a"
            return f"{where} is {article} {name}{hint}, not a JSON value"
        if depth + 1 > MAX_JSON_DEPTH:
            where = _shorten(where)
            return f"{where} is nested deeper than {MAX_JSON_DEPTH} levels (or contains a cycle)"
        children: list[tuple[object, str, int]] = []
        if isinstance(item, dict):
            for key, child in item.items():
                if type(key) is not str:
                    kind_name = _type_name(key)
                    return f"{where} has the key {key!r} of type {kind_name}; keys must be str"
                if not _valid_unicode(key):
                    return f"{where} has a key with a lone surrogate (not valid Unicode)"
                children.append((child, f"{where}.{key}", depth + 1))
        elif isinstance(item, list):
            children.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item))
        stack.extend(reversed(children))
    return None


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _type_name(value: object) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def _shorten(path: str, limit: int = 120) -> str:
    """Keep a very long (deeply nested) path readable in a one-line message."""
    if len(path) <= limit:
        return path
    half = limit // 2
    return f"{path[:half]}...{path[-half:]}"
