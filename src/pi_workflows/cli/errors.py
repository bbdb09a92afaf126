"""Errors raised inside CLI commands, and the one table from any error to an exit code.

Exit codes (documented in docs/cli.md):

- 0: success;
- 1: the server refused (rejected, not found, conflict), a run ended badly, problems found,
  or any other failure;
- 2: bad usage: unknown command or option, a bad option value, invalid JSON;
- 3: no server answers (not running, stopping, could not be started or reached).

This module never prints; `main` prints `str(error)` as one line.
"""

from __future__ import annotations

from typing import Final

from pi_workflows.client import (
    ConnectionLostError,
    ServerStartError,
    ServerUnavailableError,
    UnavailableError,
)

__all__ = [
    "EXIT_FAILURE",
    "EXIT_NO_SERVER",
    "EXIT_OK",
    "EXIT_USAGE",
    "CliError",
    "DemoError",
    "ServerEntryMissingError",
    "WaitTimeoutError",
    "exit_code_for",
]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_NO_SERVER: Final = 3


class CliError(Exception):
    """A failure a command reports as one line with its own exit code.

    Attributes:
        message: the line to print after `pi-workflows: error: `.
        exit_code: the process exit status.
    """

    code = "failed"
    """A stable camelCase reason, printed as `error.code` under `--json`."""

    def __init__(self, message: str, *, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        if exit_code == EXIT_USAGE:
            self.code = "usage"


class WaitTimeoutError(CliError):
    """`run start --wait --timeout` (or the demo) gave up before the run settled.

    Attributes:
        run_id: the run that was being waited for.
        status: its last seen status.
    """

    code = "waitTimeout"

    def __init__(self, run_id: str, status: str, timeout: float) -> None:
        super().__init__(
            f"gave up waiting after {timeout:g} s: run {run_id} is still {status}; "
            f"follow it with `pi-workflows run show {run_id}`"
        )
        self.run_id = run_id
        self.status = status


class ServerEntryMissingError(CliError):
    """`server run` could not import the server's entry module `pi_workflows.server.main`."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"the server cannot run: {detail}")


class DemoError(CliError):
    """The demo cannot go on (it timed out, or the run waits on something it cannot answer)."""


_NO_SERVER: Final = (
    ServerUnavailableError,
    ServerStartError,
    UnavailableError,
    ConnectionLostError,
)


def exit_code_for(error: BaseException) -> int:
    """The exit status for an error that reached the CLI boundary."""
    if isinstance(error, CliError):
        return error.exit_code
    if isinstance(error, _NO_SERVER):
        return EXIT_NO_SERVER
    return EXIT_FAILURE
