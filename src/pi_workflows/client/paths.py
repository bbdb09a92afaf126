"""Where a client finds the server: the state directory, its socket and its log.

Owns the client's copy of the state-directory rule. The store has the same rule in
`pi_workflows/store/paths.py`; the client may not import the store (import-linter forbids
it), so the rule is written twice and `tests/client/test_paths.py` checks that both agree.
Change both together. This module never creates, opens or connects to anything.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

__all__ = [
    "LOG_DIR_NAME",
    "SERVER_LOG_NAME",
    "SOCKET_NAME",
    "log_path",
    "socket_path",
    "state_home",
]

SOCKET_NAME: Final = "server.sock"
"""The server's Unix socket, directly inside the state directory."""

LOG_DIR_NAME: Final = "logs"
"""The directory (mode 0700) for logs inside the state directory."""

SERVER_LOG_NAME: Final = "server.log"
"""The log an auto-started server appends its stdout and stderr to (mode 0600)."""


def state_home(environ: Mapping[str, str] | None = None) -> Path:
    """Return the absolute state directory.

    `$PI_WORKFLOWS_HOME` when set and non-empty, else `$XDG_STATE_HOME/pi-workflows`, else
    `~/.local/state/pi-workflows`. Must agree with `pi_workflows.store.paths.state_home`.
    """
    env = os.environ if environ is None else environ
    explicit = env.get("PI_WORKFLOWS_HOME")
    if explicit:
        return Path(explicit).expanduser().absolute()
    xdg = env.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return (base / "pi-workflows").absolute()


def socket_path(home: Path) -> Path:
    """The server's socket inside the state directory `home`."""
    return home / SOCKET_NAME


def log_path(home: Path) -> Path:
    """The log file an auto-started server writes to, inside `home`."""
    return home / LOG_DIR_NAME / SERVER_LOG_NAME
