"""Identifiers: time-ordered, random, URL-safe strings with a readable prefix."""

from __future__ import annotations

import secrets
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _b32(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """Return ``PREFIX_`` + 10 time characters (ms) + 16 random characters (80 bits)."""
    millis = time.time_ns() // 1_000_000
    return f"{prefix}_{_b32(millis, 10)}{_b32(secrets.randbits(80), 16)}"
