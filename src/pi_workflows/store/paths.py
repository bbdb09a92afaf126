"""The state directory: where it is, and that only its owner can enter it.

Owns the layout of ``$PI_WORKFLOWS_HOME``. Never opens the database.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

DATABASE_NAME = "state.sqlite"
SOCKET_NAME = "server.sock"
LOCK_NAME = "server.lock"
LOG_DIR_NAME = "logs"


def state_home(environ: dict[str, str] | None = None) -> Path:
    """Return the state directory: ``$PI_WORKFLOWS_HOME``, else the user state directory.

    The user state directory is ``$XDG_STATE_HOME/pi-workflows``, which defaults to
    ``~/.local/state/pi-workflows`` on Linux.
    """
    env = os.environ if environ is None else environ
    explicit = env.get("PI_WORKFLOWS_HOME")
    if explicit:
        return Path(explicit).expanduser().absolute()
    xdg = env.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return (base / "pi-workflows").absolute()


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) if needed and make it mode 0700.

    Raises ``PermissionError`` naming the directory when it belongs to another user, since
    a state directory someone else controls cannot be trusted.
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise PermissionError(
            f"state directory {path} belongs to uid {info.st_uid}, not to you; "
            "set PI_WORKFLOWS_HOME to a directory you own"
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        path.chmod(0o700)
    return path


def database_path(home: Path) -> Path:
    """The SQLite file inside ``home``."""
    return home / DATABASE_NAME
