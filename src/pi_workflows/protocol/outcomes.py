"""Answer outcomes and the safe error shape shared by the client and the runner channels.

Owns the one `Outcome` enum (the wire spellings of every answer) and `ErrorInfo`, the only
way an error crosses the wire: a stable code plus one bounded, printable line. It never puts
payloads, tracebacks or secrets in a message; callers pass text through `safe_message`.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Final

import msgspec

from pi_workflows.protocol.fields import MAX_NAME_CHARS, NAME_PATTERN, Name

__all__ = ["MAX_ERROR_MESSAGE_CHARS", "ErrorInfo", "Outcome", "safe_message"]

MAX_ERROR_MESSAGE_CHARS: Final = 500
"""Longest `ErrorInfo.message`, in characters."""

_NAME: Final = re.compile(NAME_PATTERN)


class Outcome(enum.StrEnum):
    """How the server answered a request or a runner message (its wire value is the value)."""

    ACCEPTED = "accepted"
    """The change committed now, together with its receipt."""
    ADOPTED = "adopted"
    """A retry of a change that had already committed; the stored receipt is returned."""
    REJECTED = "rejected"
    """The request is invalid in the current state; nothing changed."""
    CONFLICT = "conflict"
    """Stale expected revision, or an idempotency key reused with a different payload."""
    NOT_FOUND = "notFound"
    """The run (or other target) does not exist."""
    CLAIM_LOST = "claimLost"
    """The sender's claim, generation or runner epoch is no longer current; stop writing."""
    UNAVAILABLE = "unavailable"
    """The server cannot serve this now (shutting down, at capacity); retry later."""

    @property
    def ok(self) -> bool:
        """True for the outcomes that mean the change is committed (accepted, adopted)."""
        return self in (Outcome.ACCEPTED, Outcome.ADOPTED)


def safe_message(text: str, limit: int = MAX_ERROR_MESSAGE_CHARS) -> str:
    """Return `text` as one printable line of at most `limit` characters.

    Runs of whitespace (newlines included) become one space, other control characters become
    spaces, and an over-long result is cut and ends with an ellipsis.
    """
    text = text[: limit * 4]  # never scan megabytes to produce 500 characters
    if not text.isprintable():
        text = "".join(char if char.isprintable() else " " for char in text)
    line = " ".join(text.split())
    if len(line) > limit:
        line = line[: limit - 1].rstrip() + "…"
    return line


class ErrorInfo(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """A wire error: a stable machine code and a safe one-line message for people.

    Constructing one sanitises `message` with `safe_message` and checks that `code` is a
    dotted camelCase name (raises ValueError otherwise); decoding one enforces both bounds.
    """

    code: Name
    """Stable, documented, machine-readable reason, e.g. `staleRevision`."""
    message: Annotated[
        str, msgspec.Meta(max_length=MAX_ERROR_MESSAGE_CHARS, pattern=r"\A[^\r\n]*\Z")
    ]
    """One line for a person; never a payload dump or a secret."""

    def __post_init__(self) -> None:
        if len(self.code) > MAX_NAME_CHARS or not _NAME.match(self.code):
            shown = safe_message(self.code, 80)
            raise ValueError(f"error code {shown!r} is not a dotted camelCase name")
        safe = safe_message(self.message)
        if safe != self.message:
            msgspec.structs.force_setattr(self, "message", safe)
