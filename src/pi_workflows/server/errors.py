"""Errors the server raises on purpose."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ServerError(Exception):
    """Base class of the server's own errors."""


class ServerAlreadyRunningError(ServerError):
    """Raised at start-up when another server holds the state directory's lock."""

    def __init__(self, home: Path, pid: str) -> None:
        self.home = home
        self.pid = pid
        super().__init__(
            f"another pi-workflows server (pid {pid}) is already running for {home}; "
            "use 'pi-workflows server status' or 'pi-workflows server stop'"
        )


class RequestError(ServerError):
    """A client request that cannot be served: carries the outcome and a stable code, and
    sometimes a receipt that says what happened instead (a rejected submission's id)."""

    def __init__(
        self, outcome: str, code: str, message: str, receipt: dict[str, Any] | None = None
    ) -> None:
        self.outcome = outcome
        self.code = code
        self.receipt = receipt
        super().__init__(message)


class ResolveError(ServerError):
    """The resolver child could not describe a workflow (code and message from the child)."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)
