"""Canonical JSON bytes and content fingerprints for plain JSON values.

Owns the one byte form used wherever two values must compare equal by content: idempotency
payload fingerprints, input hashes, definition digests. The same value always yields the same
bytes: object keys sorted by code point, compact separators, UTF-8 with no escaping beyond
what JSON requires, floats in shortest round-trip form (`1.0`, `1e16`). An int and a float
are different values (`1` and `1.0` differ), as are `0.0` and `-0.0`.

It never converts: a value that is not plain JSON raises `NotJsonError` naming its path. It
never does I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Final

import msgspec

from pi_workflows.protocol.errors import NotJsonError

__all__ = ["MAX_JSON_DEPTH", "canonical_json", "fingerprint", "sha256_hex"]

MAX_JSON_DEPTH: Final = 256
"""Most levels of nested containers a value may have (`[]` is 1, `[[]]` is 2). Deeper values
are refused, well before the encoder (which recurses) could reach the interpreter's limit."""

_ENCODER: Final = msgspec.json.Encoder(order="sorted")
_LEAF_TYPES: Final = frozenset({str, int, bool, type(None)})
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def canonical_json(value: object) -> bytes:
    """Return the canonical JSON bytes of a plain JSON value.

    Raises:
        NotJsonError: the value (or something inside it) is not plain JSON; the error names
            the path, e.g. `$.items[2]`.
    """
    if not _is_plain_json(value):
        raise _first_problem(value)
    try:
        return _ENCODER.encode(value)
    except UnicodeEncodeError:
        # A lone surrogate in a key or string: the fast check does not look inside strings.
        raise _first_problem(value, check_strings=True) from None


def fingerprint(value: object) -> str:
    """Return the sha256 hex digest of `canonical_json(value)`; equal values, equal digests."""
    return sha256_hex(canonical_json(value))


def sha256_hex(data: bytes | bytearray) -> str:
    """Return the lowercase sha256 hex digest of raw bytes."""
    import hashlib  # noqa: PLC0415 - OpenSSL's binding: a CLI that only reads never pays it

    return hashlib.sha256(data).hexdigest()


def _is_plain_json(value: object) -> bool:
    """Fast check (no paths): exact JSON types, str keys, finite floats, bounded depth.

    Strings are not checked for lone surrogates here; the encoder refuses those.
    """
    leaf_types = _LEAF_TYPES
    isfinite = math.isfinite
    if type(value) is float:
        return isfinite(value)
    if type(value) is not dict and type(value) is not list:
        return type(value) in leaf_types
    stack: list[tuple[dict[object, object] | list[object], int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return False
        items: Iterable[object]
        if type(container) is dict:
            for key in container:
                if type(key) is not str:
                    return False
            items = container.values()
        else:
            items = container
        for item in items:
            kind = type(item)
            if kind in leaf_types:
                continue
            if type(item) is float:
                if isfinite(item):
                    continue
                return False
            if type(item) is dict or type(item) is list:
                stack.append((item, depth + 1))
                continue
            return False
    return True


def _first_problem(value: object, *, check_strings: bool = False) -> NotJsonError:
    """Walk the value in document order and describe the first thing that is not plain JSON.

    An object's keys are all checked before its values. Slow (it builds paths); only called
    once the fast check or the encoder has failed.
    """
    stack: list[tuple[object, str, int]] = [(value, "$", 0)]
    while stack:
        item, path, depth = stack.pop()
        if type(item) is str:
            if check_strings and not _is_valid_unicode(item):
                return NotJsonError(path, "string contains a lone surrogate (not valid Unicode)")
        elif type(item) is float:
            if not math.isfinite(item):
                return NotJsonError(path, f"float {item!r} is not allowed in JSON")
        elif type(item) is dict or type(item) is list:
            if depth + 1 > MAX_JSON_DEPTH:
                return NotJsonError(path, f"nested deeper than {MAX_JSON_DEPTH} levels")
            children: list[tuple[object, str, int]] = []
            if type(item) is dict:
                for key, child in item.items():
                    if type(key) is not str:
                        return NotJsonError(path, f"object key {_describe(key)} is not a str")
                    child_path = _key_path(path, key)
                    if check_strings and not _is_valid_unicode(key):
                        return NotJsonError(
                            child_path, "object key contains a lone surrogate (not valid Unicode)"
                        )
                    children.append((child, child_path, depth + 1))
            else:
                for index, child in enumerate(item):
                    children.append((child, f"{path}[{index}]", depth + 1))
            stack.extend(reversed(children))
        elif type(item) not in _LEAF_TYPES:
            return NotJsonError(
                path,
                f"{_describe(item)} is not a JSON value "
                "(expected dict, list, str, int, float, bool or None)",
            )
    # The fast check and the walk disagree; should not happen, but never pass silently.
    return NotJsonError("$", "value cannot be encoded as canonical JSON")


def _is_valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _key_path(path: str, key: str) -> str:
    if _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}"
    shown = key if len(key) <= 50 else key[:50] + "…"
    return f"{path}[{json.dumps(shown)}]"


def _describe(value: object) -> str:
    """Name a value's type (and a short repr for keys) without dumping its content."""
    kind = type(value)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    if isinstance(value, int | float | bool) or value is None:
        return f"{value!r} ({name})"
    return name
