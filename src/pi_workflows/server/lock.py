"""The one-server-per-state-directory lock: an exclusive ``flock`` on ``server.lock``.

Held for the server's whole life; the kernel releases it when the process dies, however it
dies. The lock file holds the owner's pid, for the refusal message only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from pi_workflows.server.errors import ServerAlreadyRunningError


class ServerLock:
    """An acquired server lock. Release it with ``release()`` (or let the process die)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def acquire(cls, path: Path) -> ServerLock:
        """Take the lock or raise ``ServerAlreadyRunningError`` naming the holder's pid."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            raise ServerAlreadyRunningError(path.parent, holder or "unknown") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        os.fchmod(fd, 0o600)
        return cls(path, fd)

    def release(self) -> None:
        """Give the lock up."""
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
