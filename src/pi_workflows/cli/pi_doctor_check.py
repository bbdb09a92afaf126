"""The outcome of one `pi-workflows pi doctor` check (`Check`), shared by the modules that
make them (`pi_doctor`, `pi_doctor_reach`). Pure data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Check"]


@dataclass(frozen=True)
class Check:
    """The outcome of one check."""

    name: str
    """`pi`, `node`, `extension`, `model`, `endpoint` or `tools`."""
    ok: bool
    detail: str
    """What was found, in one line."""
    fix: str | None = None
    """For a failure or a warning: what to do, in one line."""
    warning: bool = False
    """Passed (`ok`), but something will not work until the fix is done; the exit stays 0."""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "warning": self.warning,
            "detail": self.detail,
            "fix": self.fix,
        }
