"""Where each node, edge and switch of a workflow was written: the file and line of the call.

The node and route helpers (``compute``, ``agent``, ``edge``, ``switch``, ...) call
``remember`` on what they build: it walks out of this package's own frames to the author's
call and keeps ``(file, line)`` on the object as a private attribute, outside the dataclass
fields, so equality, the definition snapshot and its digest never see it (moving a node to
another line changes nothing a run relies on). ``defer`` keeps a problem a helper found
for the ``Workflow`` check to report with every other one, at that line, instead of
raising at once. Nothing here reads a file; a frame walk costs a few attribute reads.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Final, TypeVar

T = TypeVar("T")

_AT: Final = "_pi_workflows_defined_at"
_PROBLEMS: Final = "_pi_workflows_problems"
_OWN_PACKAGE: Final = "pi_workflows.authoring"

Location = tuple[str, int]
"""``(file, line)`` of the call that built a node, an edge or a workflow."""


def caller_location() -> Location | None:
    """The file and line of the innermost frame outside ``pi_workflows.authoring``: the
    author's call of a helper (or of ``Workflow(...)``), or None without one."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if not (isinstance(name, str) and name.startswith(_OWN_PACKAGE)):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None


def remember(built: T) -> T:
    """Keep the author's call location on ``built`` (a frozen dataclass) and return it."""
    object.__setattr__(built, _AT, caller_location())
    return built


def defined_at(built: object) -> Location | None:
    """Where ``built`` was written, when a helper remembered it."""
    found = getattr(built, _AT, None)
    return found if isinstance(found, tuple) else None


def defer(built: T, problem: str) -> T:
    """Keep ``problem`` on ``built`` for the ``Workflow`` check to report; return it."""
    object.__setattr__(built, _PROBLEMS, (*deferred(built), problem))
    return built


def deferred(built: object) -> tuple[str, ...]:
    """The problems a helper kept on ``built`` (empty for most)."""
    found = getattr(built, _PROBLEMS, ())
    return found if isinstance(found, tuple) else ()
