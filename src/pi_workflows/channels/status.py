"""The channel process's word on each channel (`ok`, `failing` with why), kept in
`<state dir>/channels/status.json` for `channel list` and `run show`.

Runs in the channel process only (its one writer); written when a state changes.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from pi_workflows.channels.state import write_status

__all__ = ["StatusBoard"]

log = logging.getLogger(__name__)


class StatusBoard:
    """Each channel's state, written whole when one changes."""

    def __init__(self, home: Path, names: list[str]) -> None:
        self.home = home
        self.states: dict[str, dict[str, Any]] = {
            n: {"state": "starting", "detail": "", "at": int(time.time() * 1000)} for n in names
        }
        self._write()

    def set(self, name: str, state: str, detail: str = "") -> None:
        """Record `name`'s state (written only when it changed)."""
        current = self.states.get(name, {})
        if current.get("state") == state and current.get("detail") == detail:
            return
        self.states[name] = {"state": state, "detail": detail, "at": int(time.time() * 1000)}
        if state == "failing":
            log.warning("channel %s is failing: %s", name, detail)
        self._write()

    def _write(self) -> None:
        try:
            write_status(self.home, self.states)
        except OSError as exc:
            log.warning("cannot write the channel status: %s", exc)
