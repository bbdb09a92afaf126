"""Errors of the wire layer: bad frames, bad messages, and values that are not plain JSON.

Every message here is one safe line (bounded, no payload dumps), so a server may log it or
send it back to the offending peer as it is. This module imports nothing internal.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """A peer sent bytes that are not a valid message of the protocol it claims to speak.

    Raised by the decoders (`decode_request`, `decode_server_message`, `decode_runner_message`,
    `decode_server_to_runner`) for malformed JSON, a wrong JSON type, an unknown or missing
    envelope field, a wrong `schema` string, a bound exceeded, or a message sent in the wrong
    direction; and, through its subclasses, by the framing layer. The connection that produced
    it is no longer trustworthy: close that one connection and keep serving the others.

    Attributes:
        message: the safe one-line description (also `str(error)`).
        path: the JSON path of the offending field (`$`, `$.expectedRevision`) when the
            decoder knows it, else None.
    """

    code = "protocolError"
    """Stable wire code for this error family (an `ErrorInfo.code`)."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


# The name (no `Error` suffix) is the one the protocol brief and its callers use.
class FrameTooLarge(ProtocolError):  # noqa: N818
    """A frame (one line including its newline) is longer than the frame cap.

    Raised by `read_frame` and `FrameReader.read_frame` as soon as more than the cap has arrived
    without a newline, without buffering the rest of the line, and by `encode_frame` when a
    message to send would exceed the cap. Unlike `FrameError`, the bytes so far were well
    formed; there were just too many of them. After a read raises it, the stream is positioned
    inside the oversized line: close the connection.

    Attributes:
        limit: the cap in bytes that was exceeded.
    """

    code = "frameTooLarge"

    def __init__(self, limit: int) -> None:
        super().__init__(f"frame exceeds {limit} bytes including its newline")
        self.limit = limit


class FrameError(ProtocolError):
    """The byte stream cannot be cut into frames.

    Raised when the peer closes the stream in the middle of a line (a truncated last frame,
    `partial_bytes` long), and by a `FrameReader` asked to read again after an earlier framing
    error. A clean end of stream between frames is not an error: the readers return None.

    Attributes:
        partial_bytes: how many bytes of the unfinished frame had arrived (0 if not applicable).
    """

    code = "frameError"

    def __init__(self, message: str, *, partial_bytes: int = 0) -> None:
        super().__init__(message)
        self.partial_bytes = partial_bytes


class NotJsonError(TypeError, ValueError):
    """A value given to `canonical_json` or `fingerprint` is not plain JSON.

    Plain JSON means exactly: dict with str keys, list, str, int, float, bool and None, with
    finite floats, valid Unicode strings and at most `MAX_JSON_DEPTH` levels of nesting.
    Subclasses (an IntEnum, an OrderedDict), tuples, sets, bytes and everything else are
    refused rather than silently converted. It is both a TypeError and a ValueError so callers
    may catch whichever fits; it is not a `ProtocolError` because the value did not
    necessarily come from a peer.

    Attributes:
        path: where the offending value sits, as a JSON path (`$.items[2]`, `$["a b"]`).
        reason: what is wrong with it, without the path.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{_shorten(path)}: {reason}")
        self.path = path
        self.reason = reason


def _shorten(path: str, limit: int = 200) -> str:
    """Keep a very long (deeply nested) path readable in a one-line message."""
    if len(path) <= limit:
        return path
    half = limit // 2
    return f"{path[:half]}…{path[-half:]}"
