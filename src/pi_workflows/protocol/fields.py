"""Bounded field types shared by every protocol message, and the bounds themselves.

Owns the size and shape limits a decoder enforces on identifiers, names and counters, so the
store and the clients can quote the same numbers. msgspec checks these constraints when it
decodes; it does not check them when a struct is constructed in Python.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

import msgspec

__all__ = [
    "AUDIENCE_PATTERN",
    "MAX_ID_CHARS",
    "MAX_NAME_CHARS",
    "NAME_PATTERN",
    "SIGNAL_NAME_PATTERN",
    "Count",
    "Id",
    "Name",
    "Revision",
]

MAX_ID_CHARS: Final = 200
"""Longest request, client, run, message id or idempotency key, in characters."""

MAX_NAME_CHARS: Final = 64
"""Longest operation, event, runner-message kind or error code, in characters."""

NAME_PATTERN: Final = r"\A[a-z][A-Za-z0-9]*(?:\.[a-z][A-Za-z0-9]*)*\Z"
r"""Shape of operations, kinds, event names and error codes: dotted camelCase words, such as
`run.start`, `workflowMessage.report`, `claimLost`. Anchored with `\A`/`\Z` because msgspec
searches the pattern and `$` would also match before a trailing newline."""

SIGNAL_NAME_PATTERN: Final = r"\A[A-Za-z][A-Za-z0-9_.:-]{0,127}\Z"
"""What a run event's name may be (``run.signal``, ``wait_event``): 1-128 letters, digits
and ``_.:-``, starting with a letter (the same rule as ``authoring.EVENT_NAME_PATTERN``)."""

AUDIENCE_PATTERN: Final = re.compile(r"[a-z][a-z0-9_-]{0,39}")
"""An audience's name (``human_decision(audience=...)``, ``pi-workflows audience set``; use
``fullmatch``): the same rule as ``authoring.validation.AUDIENCE_PATTERN``."""

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS)]
"""A non-empty opaque identifier of at most `MAX_ID_CHARS` characters."""

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS, pattern=NAME_PATTERN)]
"""A dotted camelCase name of at most `MAX_NAME_CHARS` characters."""

Revision = Annotated[int, msgspec.Meta(ge=0)]
"""A run revision: a non-negative counter that every committed change increases."""

Count = Annotated[int, msgspec.Meta(ge=0)]
"""A non-negative counter: a generation, an epoch."""
