"""Every error the client library raises, each with a stable `code` and a one-line `message`.

Two families:

- the server answered, and said no: `CommandError` and its subclasses, one per wire outcome
  (`RejectedError`, `ConflictError`, `NotFoundError`, `UnavailableError`, `ClaimLostError`);
  `code` is the server's `error.code` and `message` its safe line;
- no usable answer came: `ServerUnavailableError` (nobody listens and auto-start is off),
  `ServerStartError` (auto-start failed), `ProtocolMismatchError` (the server speaks another
  protocol), `ServerProtocolError` (the server sent something invalid), `ConnectionLostError`
  (the connection kept breaking and the retries ran out), `StopTimeoutError` (a stopping
  server did not exit in time), `RequestTooLargeError`, `InputTooLargeError`,
  `RunEnvironmentError` and `InvalidPayloadError` (the request could not be sent at all),
  `WatchUnavailableError` (the server ended a watch it could not push).

Messages are one printable line, never a payload, a token or a traceback, so a CLI can print
`str(error)` as it is. This module imports nothing internal except `protocol.safe_message`
and the input bound (`protocol.uploads`).
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path
from typing import Any

from pi_workflows.protocol import MAX_INPUT_BYTES, Outcome, input_too_large, safe_message

__all__ = [
    "ClientError",
    "CommandError",
    "RejectedError",
    "ConflictError",
    "NotFoundError",
    "UnavailableError",
    "ClaimLostError",
    "ServerUnavailableError",
    "OtherUserServerError",
    "ServerStartError",
    "ProtocolMismatchError",
    "ServerProtocolError",
    "ConnectionLostError",
    "StopTimeoutError",
    "RequestTooLargeError",
    "InputTooLargeError",
    "RunEnvironmentError",
    "InvalidPayloadError",
    "WaitTimeoutError",
    "RunFailedError",
    "WatchUnavailableError",
]


class ClientError(Exception):
    """Base of every client error; catch this to handle them all.

    Attributes:
        code: a stable camelCase reason (the server's error code for `CommandError`s).
        message: one safe printable line (also `str(error)`).
    """

    code: str = "clientError"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        self.message = safe_message(message)
        if code is not None:
            self.code = code
        super().__init__(self.message)


class CommandError(ClientError):
    """The server answered a request with an outcome other than accepted or adopted.

    Raised by every `Client` method; the subclass says which outcome. Nothing changed on the
    server (the server stores no receipt for a refused command), so the same call may be
    retried once the cause is gone.

    Attributes:
        outcome: the wire outcome.
        operation: the operation that was refused, e.g. `run.pause`.
        run_id: the run the request named, if any.
        request_id: the id of the request attempt that got this answer.
        details: what the server sent beside the refusal, if anything, e.g. `{"problems":
            [{file, line, message}], "problemCount"}` for a workflow file that does not load
            (`workflowInvalid`, `workflowLoadFailed`), or the answer that won a decision.
    """

    outcome: Outcome = Outcome.REJECTED

    def __init__(
        self,
        message: str,
        *,
        code: str,
        operation: str,
        run_id: str | None = None,
        request_id: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.operation = operation
        self.run_id = run_id
        self.request_id = request_id
        self.details = details


class RejectedError(CommandError):
    """Outcome `rejected`: the request is invalid or impossible in the run's current state.

    Examples: an unknown workflow (`workflowNotFound`), input that fails validation
    (`inputInvalid`), pausing a completed run (`invalidTransition`).
    """

    outcome = Outcome.REJECTED


class ConflictError(CommandError):
    """Outcome `conflict`: the idempotency key was used before with another payload, or the
    `expectedRevision` is stale. Unlike `RejectedError`, the request itself may be valid."""

    outcome = Outcome.CONFLICT


class NotFoundError(CommandError):
    """Outcome `notFound`: the run (or the request or effect it names) does not exist."""

    outcome = Outcome.NOT_FOUND


class UnavailableError(CommandError):
    """Outcome `unavailable`: the server is stopping; retry after it has restarted.

    Unlike `ServerUnavailableError`, a server did answer.
    """

    outcome = Outcome.UNAVAILABLE


class ClaimLostError(CommandError):
    """Outcome `claimLost`: a fenced write found its claim stale. Clients should not normally
    see it (it belongs to the runner channel); it is mapped so that no outcome goes unnamed."""

    outcome = Outcome.CLAIM_LOST


class ServerUnavailableError(ClientError):
    """No server answers on the socket and the client may not start one.

    Raised when the socket is missing or refuses connections and auto-start is off (or the
    operation never auto-starts, such as `server.stop`), and when the socket cannot be used at
    all (for example a path too long for a Unix socket, or no permission).

    Attributes:
        socket_path: the socket that was tried.
        reason: what went wrong, e.g. `socket missing`, `connection refused`.
        startable: True when nobody listens (the socket is missing or refuses connections),
            so starting a server may help; False when the socket cannot be used at all.
    """

    code = "serverNotRunning"

    def __init__(
        self, socket_path: Path, *, reason: str | None = None, startable: bool = True
    ) -> None:
        detail = f" ({reason})" if reason else ""
        super().__init__(
            f"no pi-workflows server is running at {socket_path}{detail}; "
            "start one with `pi-workflows server start`"
        )
        self.socket_path = socket_path
        self.reason = reason
        self.startable = startable


class OtherUserServerError(ClientError):
    """The server on the socket serves another user: it refuses every connection that is
    not its own uid's (a command run with `sudo` against a user's server, or another
    user's state directory). Retrying cannot help.

    Attributes:
        socket_path: the socket that was tried.
        owner_uid: the uid that owns the socket (None when it cannot even be looked at).
    """

    code = "otherUser"

    def __init__(self, socket_path: Path, *, owner_uid: int | None) -> None:
        me = _user(os.getuid())
        if owner_uid is None:
            what = f"the state directory of {socket_path} belongs to another user (you are {me})"
        else:
            what = f"the server at {socket_path} serves {_user(owner_uid)}; you are {me}"
        owner = "its owner" if owner_uid is None else _name(owner_uid)
        super().__init__(
            f"{what}; run the command as {owner} (without sudo), or use a state directory of"
            " your own (--home or PI_WORKFLOWS_HOME)"
        )
        self.socket_path = socket_path
        self.owner_uid = owner_uid


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _user(uid: int) -> str:
    name = _name(uid)
    return name if name.startswith("uid ") else f"{name} (uid {uid})"


class ServerStartError(ClientError):
    """Auto-start spawned a server but it never answered: it exited first, or the deadline
    passed. The message ends with the last lines the server wrote to its log.

    Attributes:
        log_path: the server log (`<home>/logs/server.log`).
        log_tail: the last lines of that log written by this attempt (may be empty).
        exit_code: the child's exit status, or None if it was still running at the deadline
            (it is left running: it may still come up, and only a server stops itself).
        pid: the spawned child's pid.
    """

    code = "serverStartFailed"

    def __init__(
        self, reason: str, *, log_path: Path, log_tail: str, exit_code: int | None, pid: int
    ) -> None:
        tail = " | ".join(line for line in log_tail.splitlines() if line.strip())
        shown = f"; log {log_path}: {tail}" if tail else f"; see {log_path}"
        super().__init__(f"could not start the pi-workflows server: {reason}{shown}")
        self.log_path = log_path
        self.log_tail = log_tail
        self.exit_code = exit_code
        self.pid = pid


class ProtocolMismatchError(ClientError):
    """The peer on the socket did not greet with a client-protocol v1 `hello`.

    Raised when the first frame is not a hello, names another `schema`, or another
    `protocolVersion` (an older or newer server). Retrying cannot help; upgrade one side.

    Attributes:
        server_schema: the schema the peer announced, if it could be read.
        server_protocol_version: the version the peer announced, if it could be read.
    """

    code = "protocolMismatch"

    def __init__(
        self,
        message: str,
        *,
        server_schema: str | None = None,
        server_protocol_version: object = None,
    ) -> None:
        super().__init__(message)
        self.server_schema = server_schema
        self.server_protocol_version = server_protocol_version


class ServerProtocolError(ClientError):
    """The server sent a frame that is not a valid message (malformed, oversized, a response
    to another request). The connection was closed; the request is not retried, because a
    server that breaks the protocol once cannot be trusted to apply a retry correctly."""

    code = "protocolError"


class ConnectionLostError(ClientError):
    """The connection broke (end of stream, reset, broken pipe, or no reply before the
    timeout) on every attempt, and the bounded retries ran out.

    A state-changing command may or may not have committed; calling again with the same
    idempotency key (and the same client id) is safe and returns the stored receipt if it did.

    Attributes:
        operation: the operation that was being sent.
        attempts: how many times it was sent.
        idempotency_key: the key to retry with (None for reads).
    """

    code = "connectionLost"

    def __init__(
        self,
        reason: str,
        *,
        operation: str | None = None,
        attempts: int = 1,
        idempotency_key: str | None = None,
    ) -> None:
        what = operation or "a request"
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"lost the connection to the server during {what}{tries}: {reason}")
        self.reason = reason
        self.operation = operation
        self.attempts = attempts
        self.idempotency_key = idempotency_key


class StopTimeoutError(ClientError):
    """`server.stop` was accepted but the server process was still running when the wait ended.

    The server is stopping (its runners get a grace period before they are killed); wait a
    little longer, or look at its log.

    Attributes:
        pid: the server's pid.
        timeout: how long the client waited, in seconds.
    """

    code = "stopTimeout"

    def __init__(self, pid: int, timeout: float) -> None:
        super().__init__(
            f"the server (pid {pid}) accepted server.stop but was still running after {timeout:g} s"
        )
        self.pid = pid
        self.timeout = timeout


class RequestTooLargeError(ClientError):
    """The request would not fit in one frame (1 MiB including the newline); nothing was sent.

    Attributes:
        operation: the operation whose payload is too large.
        limit: the frame cap in bytes.
    """

    code = "frameTooLarge"

    def __init__(self, operation: str, limit: int) -> None:
        super().__init__(
            f"the {operation} request is larger than the {limit}-byte frame limit; "
            "pass large values by reference"
        )
        self.operation = operation
        self.limit = limit


class InputTooLargeError(ClientError):
    """The run's input is over the bound on a run's whole state (16 MiB of canonical JSON);
    nothing was sent. Unlike `RequestTooLargeError`, no frame limit is involved: an input up
    to the bound is uploaded in slices.

    Attributes:
        size: the input's canonical JSON size in bytes.
        limit: the bound in bytes.
    """

    code = "inputTooLarge"

    def __init__(self, size: int) -> None:
        super().__init__(input_too_large(size))
        self.size = size
        self.limit = MAX_INPUT_BYTES


class RunEnvironmentError(ClientError):
    """The environment a run would record is refused (a name that is not a variable name or
    is one of the server's `PI_WORKFLOWS_*` settings, a value with NUL, a variable asked for
    that is not set, or more than the bounds); nothing was sent.

    Attributes:
        name: the variable concerned, when there is one.
    """

    code = "badRequest"

    def __init__(self, message: str, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name


class InvalidPayloadError(ClientError):
    """A payload value is not plain JSON (a tuple, a set, NaN, a non-str key); nothing was sent.

    Attributes:
        operation: the operation whose payload was refused.
        path: where the offending value sits, e.g. `$.input.items[2]`.
    """

    code = "badRequest"

    def __init__(self, operation: str, path: str, reason: str) -> None:
        super().__init__(f"the {operation} payload is not plain JSON at {path}: {reason}")
        self.operation = operation
        self.path = path


class WaitTimeoutError(ClientError):
    """`Client.wait` or `Client.result` gave up before the run reached a status it waits for.

    The run goes on; nothing was changed. Unlike `ConnectionLostError`, the server answered.

    Attributes:
        run_id: the run waited for.
        status: its last status seen.
        timeout: how long the client waited, in seconds.
    """

    code = "waitTimeout"

    def __init__(self, run_id: str, status: str, timeout: float) -> None:
        super().__init__(f"run {run_id} is still {status} after waiting {timeout:g} s")
        self.run_id = run_id
        self.status = status
        self.timeout = timeout


class RunFailedError(ClientError):
    """`Client.result` found the run ended without completing (failed, timed out, cancelled).

    Attributes:
        run_id: the run.
        status: `failed`, `timed_out` or `cancelled`.
        error: the run's one-line error, if it has one.
        view: the final `RunView`.
    """

    code = "runFailed"

    def __init__(self, run_id: str, status: str, error: str | None, view: dict[str, object]):
        detail = f": {error}" if error else ""
        super().__init__(f"run {run_id} ended {status}{detail}")
        self.run_id = run_id
        self.status = status
        self.error = error
        self.view = view


class WatchUnavailableError(ClientError):
    """The server ended a watch with a `session.unavailable`, `run.unavailable` or
    `runs.unavailable` event: it could not compute or send that watch's view.

    Raised by `next_view` and `wait_for` of the watches. The watch has ended (no more views
    come on it); the connection and the server are fine, and a new watch may be opened after
    `retry_after` seconds. Unlike `ConnectionLostError`, nothing broke between client and
    server.

    Attributes:
        code: `viewFailed` (the view could not be computed) or `viewTooLarge`.
        event: the event's name, e.g. `session.unavailable`.
        retry_after: seconds to wait before watching again.
    """

    code = "viewFailed"

    def __init__(self, event: str, payload: dict[str, object]) -> None:
        message = payload.get("message")
        code = payload.get("code")
        retry = payload.get("retryAfterMs")
        super().__init__(
            str(message) if message else f"the server ended the watch ({event})",
            code=str(code) if code else None,
        )
        self.event = event
        self.retry_after = retry / 1000 if isinstance(retry, int | float) else 1.0
