"""The web page's errors: each says what went wrong and what to do, in one line.

Raised by the launcher (in the CLI process) and by the page process itself; the CLI turns
them into `pi-workflows: error: <line>` and a non-zero exit. Never carries the access
secret.
"""

from __future__ import annotations

__all__ = ["PageStartError", "PortInUseError", "SecretFileError", "WebError"]


class WebError(Exception):
    """Base of the web page's errors; `message` is one safe line, `code` a stable name."""

    code = "webError"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class PageStartError(WebError):
    """The page process did not say it was serving within its start deadline, or exited
    first. `log_tail` holds the end of its log (never the secret: the page logs none)."""

    code = "pageStartFailed"

    def __init__(self, message: str, *, log_tail: str = "", exit_code: int | None = None) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.exit_code = exit_code


class PortInUseError(WebError):
    """The loopback port asked for with `--port` is taken by another program."""

    code = "portInUse"

    def __init__(self, port: int) -> None:
        super().__init__(
            f"port {port} on 127.0.0.1 is in use by another program; choose another with"
            " --port, or leave it out to let the system pick a free one"
        )
        self.port = port


class SecretFileError(WebError):
    """The access secret file exists but cannot be trusted: not a regular file of this
    user, readable by others, or of the wrong size."""

    code = "secretFileRefused"
