"""JSON checks and the canonical byte form the engine hashes.

Owns ``check_json`` (the gate every output, answer and input passes before it becomes run
state) and ``canonical_json`` (sorted keys, compact separators, UTF-8, the same bytes as
the protocol's canonical JSON so the server can re-check a digest). Never converts a
value: anything that is not plain JSON is refused with its location.
"""

from __future__ import annotations

import json
from typing import Final, cast

import msgspec

from pi_workflows.authoring import JsonValue, json_problem
from pi_workflows.engine.errors import NotJsonError

_ENCODER: Final = msgspec.json.Encoder(order="sorted")
_PREVIEW_LIMIT: Final = 120


def check_json(value: object, where: str) -> JsonValue:
    """Return ``value`` unchanged if it is plain JSON, else raise ``NotJsonError``.

    ``where`` names whose value it is, for the message: ``"output of node 'collect'"``.
    """
    problem = json_problem(value)
    if problem is not None:
        raise NotJsonError(where, problem)
    return cast(JsonValue, value)


def canonical_json(value: object) -> bytes:
    """The canonical bytes of a plain JSON value: sorted keys, no spaces, UTF-8.

    Raises ``NotJsonError`` if the value is not plain JSON. Identical in every process and
    under every hash seed.
    """
    check_json(value, "value")
    return _ENCODER.encode(value)


def preview(value: object) -> str:
    """A short one-line JSON rendering of ``value`` for error messages."""
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        text = f"<{type(value).__name__}>"
    if len(text) > _PREVIEW_LIMIT:
        text = text[: _PREVIEW_LIMIT - 3] + "..."
    return text
