"""JSON columns: values go in as canonical JSON text and come out as plain values."""

from __future__ import annotations

import json
from typing import Any

from pi_workflows.protocol.canonical import canonical_json


def dumps(value: Any) -> str:
    """Encode a JSON value as canonical JSON text (raises on a non-JSON value)."""
    return canonical_json(value).decode("utf-8")


def loads(text: str | None) -> Any:
    """Decode a JSON column; ``None`` stays ``None``."""
    return None if text is None else json.loads(text)
