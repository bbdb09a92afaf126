"""The child's end of the private channel: the inherited fd, framing, message ids, revisions.

Runs in the runner and resolver children; never opens the database. ``take_channel_fd``
reads ``PI_WORKFLOWS_RUNNER_FD`` and removes every ``PI_WORKFLOWS_*`` variable from the
environment before any workflow code can see it. ``Channel`` sends one ``RunnerMessage`` at
a time and waits for its ``RunnerReply``: it numbers messages ``"<runnerEpoch>-<seq>"``,
sends ``expectedRevision`` = the revision of the last reply (``None`` for ``ready`` and
reads), and turns a ``claimLost`` reply into ``ClaimLostError`` and any other non-committed
outcome into ``UnexpectedReplyError``. It never retries: a lost reply is the server's
problem to resolve from committed state.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any, Final

from pi_workflows.protocol import (
    RUNNER_SCHEMA,
    FrameReader,
    Outcome,
    ProtocolError,
    RunnerCommand,
    RunnerCommandKind,
    RunnerMessage,
    RunnerReply,
    decode_server_to_runner,
    encode_frame,
)
from pi_workflows.runner.errors import (
    ChannelClosedError,
    ClaimLostError,
    ProtocolViolationError,
    RunnerError,
    StopCommandError,
    UnexpectedReplyError,
)
from pi_workflows.runner.limits import CHANNEL_FD_ENV, ENV_PREFIX

READS: Final = frozenset({"state.get", "state.outputs", "blob.read", "children.of"})
"""Message kinds that change nothing; they carry no expected revision."""

_STOPS: Final = frozenset({RunnerCommandKind.CANCEL, RunnerCommandKind.STOP})


def take_channel_fd() -> int:
    """Return the channel descriptor named by the environment and scrub ``PI_WORKFLOWS_*``.

    Runs first thing in a child. The descriptor is made non-inheritable so no grandchild
    (shell command, subprocess of workflow code) ever holds the channel. Raises
    ``RunnerError`` if the variable is missing or not an open descriptor.
    """
    raw = os.environ.get(CHANNEL_FD_ENV)
    for name in [name for name in os.environ if name.startswith(ENV_PREFIX)]:
        del os.environ[name]
    if raw is None or not raw.strip().isdigit():
        raise RunnerError(f"{CHANNEL_FD_ENV} must name the inherited channel descriptor")
    fd = int(raw)
    try:
        os.set_inheritable(fd, False)
    except OSError as exc:
        raise RunnerError(f"{CHANNEL_FD_ENV}={fd} is not an open descriptor: {exc}") from None
    return fd


def open_socket(fd: int) -> socket.socket:
    """The blocking socket object for the inherited descriptor (it now owns the fd)."""
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    return sock


class Connection:
    """Raw frames over the channel socket: one blocking reader, one writer (the main thread)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._reader = FrameReader(sock)

    def send(self, message: object) -> None:
        """Encode and send one frame; a broken pipe is ``ChannelClosedError``."""
        frame = encode_frame(message)
        try:
            self._sock.sendall(frame)
        except OSError as exc:
            raise ChannelClosedError(f"cannot write to the server: {exc}") from None

    def receive(self, what: str) -> bytes:
        """The next frame; the end of the stream or a framing error is ``ChannelClosedError``."""
        try:
            frame = self._reader.read_frame()
        except ProtocolError as exc:
            raise ChannelClosedError(
                f"bad frame from the server while waiting for {what}: {exc}"
            ) from None
        except OSError as exc:
            raise ChannelClosedError(f"cannot read from the server: {exc}") from None
        if frame is None:
            raise ChannelClosedError(
                f"the server closed the channel while the child waited for {what}"
            )
        return frame

    def close(self) -> None:
        """Close the socket (and the descriptor)."""
        self._sock.close()


def receive_server_message(connection: Connection, what: str) -> RunnerReply | RunnerCommand:
    """Read and decode one server-to-runner frame."""
    frame = connection.receive(what)
    try:
        return decode_server_to_runner(frame)
    except ProtocolError as exc:
        raise ProtocolViolationError(what, exc.message) from None


def receive_command(connection: Connection, what: str) -> RunnerCommand:
    """Read the next frame, which must be a ``RunnerCommand``; ``cancel``/``stop`` stop."""
    message = receive_server_message(connection, what)
    if not isinstance(message, RunnerCommand):
        raise ProtocolViolationError(what, "expected a command, got a reply")
    if message.command in _STOPS:
        raise StopCommandError(message.command.value)
    return message


class Channel:
    """Numbered request/reply exchange for one runner generation.

    ``revision`` is the revision of the last reply received (``None`` before any); it is
    the ``expectedRevision`` of the next proposal. Only the main thread uses a channel.
    """

    def __init__(
        self, connection: Connection, *, run_id: str, generation: int, runner_epoch: int
    ) -> None:
        self._connection = connection
        self._run_id = run_id
        self._generation = generation
        self._epoch = runner_epoch
        self._seq = 0
        self.revision: int | None = None
        self.before_proposal: Callable[[str], None] | None = None
        """Called with a proposal's kind just before it is sent (``logs.Capture`` sends the
        attempt's output before its result); never for reads."""

    def request(self, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Send ``kind`` with ``payload`` and return the committed reply's payload.

        Raises ``ClaimLostError`` on ``claimLost``, ``UnexpectedReplyError`` on any outcome
        other than ``accepted``/``adopted``, ``ProtocolViolationError`` for a reply to
        another message or a command other than ``cancel``/``stop`` (which raise
        ``StopCommandError``).
        """
        if self.before_proposal is not None and kind not in READS and kind != "ready":
            self.before_proposal(kind)
        self._seq += 1
        message_id = f"{self._epoch}-{self._seq}"
        expected = None if kind in READS or kind == "ready" else self.revision
        self._connection.send(
            RunnerMessage(
                schema=RUNNER_SCHEMA,
                run_id=self._run_id,
                generation=self._generation,
                runner_epoch=self._epoch,
                message_id=message_id,
                kind=kind,
                expected_revision=expected,
                payload=payload,
            )
        )
        reply = receive_server_message(self._connection, f"the reply to {kind}")
        if isinstance(reply, RunnerCommand):
            if reply.command in _STOPS:
                raise StopCommandError(reply.command.value)
            raise ProtocolViolationError(kind, f"got command {reply.command.value!r}, not a reply")
        if reply.message_id != message_id:
            raise ProtocolViolationError(
                kind, f"reply to message {reply.message_id!r}, expected {message_id!r}"
            )
        if reply.outcome is Outcome.CLAIM_LOST:
            raise ClaimLostError(kind)
        if not reply.outcome.ok:
            error = reply.error
            raise UnexpectedReplyError(
                kind,
                reply.outcome.value,
                error.code if error is not None else None,
                error.message if error is not None else None,
            )
        if reply.revision is not None:
            self.revision = reply.revision
        return dict(reply.payload) if reply.payload is not None else {}
