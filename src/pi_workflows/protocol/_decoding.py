"""Turn msgspec's decoding failures into one safe `ProtocolError` (private helper).

Shared by the client-protocol and runner-protocol decoders so both report bad input the same
way: one bounded line, the JSON path when msgspec knows it, never the offending payload.
"""

from __future__ import annotations

import re
from typing import Final, TypeVar

import msgspec

from pi_workflows.protocol.errors import ProtocolError
from pi_workflows.protocol.outcomes import safe_message

T = TypeVar("T")

Buffer = bytes | bytearray | memoryview
"""What the decoders accept: the bytes of one frame, with or without its newline."""

_AT_PATH: Final = re.compile(r" - at `(\$[^`]*)`\Z")


def decode(decoder: msgspec.json.Decoder[T], data: Buffer, *, what: str) -> T:
    """Decode one frame with a prebuilt decoder or raise `ProtocolError` describing `what`."""
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        detail = str(exc)
        match = _AT_PATH.search(detail)
        path = match.group(1) if match else "$"
        raise ProtocolError(safe_message(f"invalid {what}: {detail}"), path=path) from exc
    except msgspec.DecodeError as exc:
        raise ProtocolError(safe_message(f"{what} is not valid JSON: {exc}")) from exc
    except RecursionError as exc:
        raise ProtocolError(f"{what} is nested too deeply") from exc


def wrong_direction(expected: str, message: msgspec.Struct, *, what: str) -> ProtocolError:
    """The error for a well-formed message of the wrong kind for this side of the channel."""
    tag = type(message).__struct_config__.tag
    return ProtocolError(
        safe_message(f"invalid {what}: expected {expected}, got a {tag!r} message"),
        path="$.type",
    )
