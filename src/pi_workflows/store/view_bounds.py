"""Bounded view forms: cutting texts, bodies and lists so a pushed view fits one frame.

Owns the byte bounds of the views the server pushes (``session.view``, ``run.view``,
``runs.view``) and the pure functions that apply them: a text cut at a UTF-8 character
boundary with ``textBytes`` and ``textTruncated``, a message body kept to its scalar fields,
the encoded size of a JSON value, and the slices ``workflowMessage.get`` answers. Reads and
writes no table; every function is deterministic, so an unchanged view stays equal and is
not pushed again.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from pi_workflows.protocol import MAX_FRAME_BYTES

SESSION_TEXT_BYTES: Final = 64 * 1024
"""Largest text (UTF-8 bytes) a session view carries inline; a longer one is cut."""

SESSION_MESSAGES_BYTES: Final = 512 * 1024
"""Encoded bytes of the ``messages`` one session view lists at most (never fewer than one)."""

BODY_BYTES: Final = 32 * 1024
"""Largest encoded message body a view carries; a larger one keeps its scalar fields."""

RUN_VIEW_TEXT_BYTES: Final = 4 * 1024
"""Largest message text (UTF-8 bytes) a pushed run view carries inline."""

RUN_VIEW_REQUEST_BYTES: Final = 64 * 1024
"""Largest encoded ``waitingOn.request`` a pushed run view carries inline."""

PUSH_BYTES: Final = MAX_FRAME_BYTES - 128 * 1024
"""Encoded bytes of one pushed view at most, leaving room for the event envelope."""

SLICE_BYTES: Final = 128 * 1024
"""UTF-8 bytes of text one ``workflowMessage.get`` answer carries at most: even a text made
only of characters JSON escapes six times over stays well inside a frame."""

_ENCODER: Final = msgspec.json.Encoder()


def encoded_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (as it travels in a frame)."""
    return len(_ENCODER.encode(value))


def _boundary(data: bytes, end: int) -> int:
    """The largest UTF-8 character boundary of ``data`` at or before ``end``."""
    end = min(end, len(data))
    while 0 < end < len(data) and data[end] & 0xC0 == 0x80:
        end -= 1
    return end


def bounded_text(text: str, limit: int) -> dict[str, Any]:
    """``{text, textBytes, textTruncated}``: ``text`` cut to its first ``limit`` UTF-8
    bytes (at a character boundary) when longer; ``textBytes`` is the whole text's size."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return {"text": text, "textBytes": len(data), "textTruncated": False}
    cut = data[: _boundary(data, limit)].decode("utf-8")
    return {"text": cut, "textBytes": len(data), "textTruncated": True}


def cut(text: str | None, limit: int) -> str | None:
    """``text`` cut to at most ``limit`` characters (no marker; for short fields)."""
    if text is None or len(text) <= limit:
        return text
    return text[:limit]


def bounded_body(body: Any, limit: int = BODY_BYTES) -> Any:
    """A message body as a view carries it: whole when its JSON is at most ``limit`` bytes,
    else its scalar fields plus ``omittedBytes`` (the size of what was left out)."""
    if not isinstance(body, dict):
        return body
    size = encoded_size(body)
    if size <= limit:
        return body
    kept = {k: v for k, v in body.items() if v is None or isinstance(v, bool | int | float)}
    kept.update(
        {k: v for k, v in body.items() if isinstance(v, str) and len(v) <= 256 and k not in kept}
    )
    kept["omittedBytes"] = size
    return kept


def text_slice(text: str, offset: int, limit: int = SLICE_BYTES) -> dict[str, Any]:
    """``{textBytes, offset, text, next}``: at most ``limit`` UTF-8 bytes of ``text`` from
    byte ``offset``, ending at a character boundary; ``next`` is the following slice's
    offset, or None after the last. Raises ``ValueError`` for an offset past the end or
    inside a character."""
    data = text.encode("utf-8")
    if offset < 0 or offset > len(data):
        raise ValueError(f"offset {offset} is outside the text's {len(data)} bytes")
    if offset < len(data) and data[offset] & 0xC0 == 0x80:
        raise ValueError(f"offset {offset} is inside a character; use 0 or a 'next' offset")
    end = _boundary(data, offset + limit)
    if end <= offset < len(data):  # a limit smaller than one character: take the character
        end = offset + 1
        while end < len(data) and data[end] & 0xC0 == 0x80:
            end += 1
    return {
        "textBytes": len(data),
        "offset": offset,
        "text": data[offset:end].decode("utf-8"),
        "next": end if end < len(data) else None,
    }
