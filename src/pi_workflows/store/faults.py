"""Named fault points for crash tests: the store can die exactly between two statements.

A fault point is armed by the environment variable ``PI_WORKFLOWS_FAULTS``, a comma list of
``NAME=ACTION`` where ACTION is ``exit`` (the process ends at once with status 137, like
SIGKILL: no cleanup, no commit), ``raise`` (``InjectedFault`` is raised; ``raise:N`` only
the first N times the point is reached) or ``flag`` (``hit``
does nothing; the caller asks ``flagged`` and performs the fault itself, e.g. the server
killing a runner child at an exact point). Tests may also arm points in-process with
``arm``. When nothing is armed a fault point costs one dict lookup. Production code never
arms a fault point.
"""

from __future__ import annotations

import os

EXIT_STATUS = 137


class InjectedFault(Exception):  # noqa: N818 - it is a fault, not an error of the code
    """Raised at an armed fault point whose action is ``raise``."""

    def __init__(self, point: str) -> None:
        self.point = point
        super().__init__(f"injected fault at {point}")


def _parse(spec: str) -> dict[str, str]:
    armed: dict[str, str] = {}
    for item in spec.split(","):
        name, _, action = item.strip().partition("=")
        if name:
            armed[name] = action or "exit"
    return armed


_armed: dict[str, str] = _parse(os.environ.get("PI_WORKFLOWS_FAULTS", ""))


def arm(point: str, action: str = "raise") -> None:
    """Arm ``point`` in this process (tests only)."""
    if action.split(":", 1)[0] not in {"raise", "exit", "flag"}:
        raise ValueError(f"unknown fault action {action!r}; use 'raise', 'exit' or 'flag'")
    _armed[point] = action


def disarm_all() -> None:
    """Disarm every fault point in this process (tests only)."""
    _armed.clear()


def hit(point: str) -> None:
    """Reach the fault point ``point``: die or raise if it is armed, else do nothing."""
    if not _armed:
        return
    action = _armed.get(point)
    if action is None:
        return
    if action == "exit":
        os._exit(EXIT_STATUS)
    if action == "raise":
        raise InjectedFault(point)
    if action.startswith("raise:"):
        left = int(action.split(":", 1)[1])
        if left > 0:
            _armed[point] = f"raise:{left - 1}"
            raise InjectedFault(point)


def flagged(point: str) -> bool:
    """True when ``point`` is armed with ``flag`` (the caller performs the fault)."""
    return bool(_armed) and _armed.get(point) == "flag"
