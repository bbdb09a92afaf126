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
    """The resolver child could not describe a workflow (code and message from the child).

    ``problems`` lists a file's problems when it does not load (``[{file, line, message}]``,
    bounded by ``resolver.call``), else it is empty; ``problem_count`` counts all of them.
    """

    def __init__(
        self,
        code: str,
        message: str,
        problems: list[dict[str, Any]] | None = None,
        problem_count: int | None = None,
    ) -> None:
        self.code = code
        self.problems = problems or []
        self.problem_count = max(len(self.problems), problem_count or 0)
        super().__init__(message)
