"""Runner protocol (private): the envelope between the server and one runner child.

Owns the three frozen, tagged structs that cross the socketpair the server passes to a runner
child, the `RUNNER_SCHEMA` constant and the two decoders, built once at import:

- `RunnerMessage`, child to server: a proposal or a narrow read, always carrying the run id,
  claim generation, runner epoch, a message id (for receipt replay) and the expected revision,
  so the server can fence it.
- `RunnerReply`, server to child: the answer to one `RunnerMessage`, echoing its message id.
- `RunnerCommand`, server to child: the launch envelope, then one explicit instruction
  (`start`, `resume`, `restart`, `cancel`, `stop`); a child never infers what to do from a
  nullable field.

`RunnerMessage.kind` is a plain bounded name (`ready`, `node.propose`, ...) for now: the server
owns the catalogue of kinds and their payload shapes, and will narrow them when it defines
them. Payloads are plain JSON bounded by the frame cap; large values travel as digest-checked
content references, never inline. This module never does I/O and imports no other internal
package.
"""

from __future__ import annotations

import enum
from typing import Any, Final, Literal

import msgspec

from pi_workflows.protocol._decoding import Buffer, decode, wrong_direction
from pi_workflows.protocol.fields import Count, Id, Name, Revision
from pi_workflows.protocol.outcomes import ErrorInfo, Outcome

__all__ = [
    "RUNNER_SCHEMA",
    "RunnerCommand",
    "RunnerCommandKind",
    "RunnerMessage",
    "RunnerReply",
    "ServerToRunner",
    "decode_runner_message",
    "decode_server_to_runner",
]

RUNNER_SCHEMA: Final = "pi-workflows.runner.v1"
CHANNEL_FD_ENV: Final = "PI_WORKFLOWS_RUNNER_FD"
"""The environment variable naming the inherited channel descriptor of a runner or resolver."""
"""The `schema` every runner-channel message carries; any other value is refused."""

RunnerSchema = Literal["pi-workflows.runner.v1"]
"""The type of `schema`: exactly `RUNNER_SCHEMA`, checked when decoding."""


class RunnerCommandKind(enum.StrEnum):
    """The explicit instructions a server gives a runner child."""

    LAUNCH = "launch"
    """The first frame: the immutable launch envelope the server recorded before spawning."""
    START = "start"
    """Execute a new run from its entry node."""
    RESUME = "resume"
    """Continue a run from its committed state (the attempt to resume is read, not assumed)."""
    RESTART = "restart"
    """Execute the run again from the start as a new generation."""
    CANCEL = "cancel"
    """Stop executing and exit as cancelled; the server settles the run."""
    STOP = "stop"
    """Stop executing and exit without changing the run (server shutdown, reassignment)."""


class _RunnerEnvelope(
    msgspec.Struct,
    frozen=True,
    forbid_unknown_fields=True,
    rename="camel",
    tag_field="type",
    kw_only=True,
):
    """Common configuration of every runner-channel message (tag field `type`).

    Subclasses repeat `frozen=True` only so that mypy's dataclass view agrees with msgspec.
    """


class RunnerMessage(_RunnerEnvelope, tag="message", frozen=True):
    """A runner child's proposal or read; the server answers each with one `RunnerReply`."""

    schema: RunnerSchema
    run_id: Id
    generation: Count
    """The claim generation the child was launched for; a stale one gets `claimLost`."""
    runner_epoch: Count
    """The runner epoch recorded before the child was spawned; a stale one gets `claimLost`."""
    message_id: Id
    """Unique per logical message; a resend with the same id replays the stored receipt."""
    kind: Name
    """What the message is (`ready`, a proposal, a read); defined by the server."""
    expected_revision: Revision | None = None
    """The run revision the proposal was computed from; None for reads and `ready`."""
    payload: dict[str, Any] = {}


class RunnerReply(_RunnerEnvelope, tag="reply", frozen=True):
    """The server's answer to one `RunnerMessage`, sent after any change has committed."""

    schema: RunnerSchema
    message_id: Id
    """Repeats `RunnerMessage.messageId`."""
    outcome: Outcome
    revision: Revision | None = None
    """The run revision after the message was applied."""
    payload: dict[str, Any] | None = None
    """The stored receipt, or the result of a read."""
    error: ErrorInfo | None = None


class RunnerCommand(_RunnerEnvelope, tag="command", frozen=True):
    """An explicit instruction from the server; the first one follows the child's `ready`."""

    schema: RunnerSchema
    command: RunnerCommandKind
    payload: dict[str, Any] = {}


ServerToRunner = RunnerReply | RunnerCommand
"""Everything a server sends to a runner child."""

_RunnerProtocolMessage = RunnerMessage | RunnerReply | RunnerCommand

# One decoder for the whole union, as in `messages.py`: the `type` tag is required and a
# message sent the wrong way gets a precise error.
_DECODER: Final = msgspec.json.Decoder(_RunnerProtocolMessage)


def decode_runner_message(data: Buffer) -> RunnerMessage:
    """Decode one frame a runner child sent (runs in the server).

    Raises:
        ProtocolError: malformed JSON, wrong types, unknown or missing fields, a wrong
            `schema`, a bound exceeded, or a message that only the server sends.
    """
    message = decode(_DECODER, data, what="runner message")
    if not isinstance(message, RunnerMessage):
        raise wrong_direction("a runner message", message, what="runner message")
    return message


def decode_server_to_runner(data: Buffer) -> ServerToRunner:
    """Decode one frame the server sent to a runner child (runs in the child).

    Raises:
        ProtocolError: as `decode_runner_message`, or a message that only children send.
    """
    message = decode(_DECODER, data, what="server message to runner")
    if isinstance(message, RunnerMessage):
        raise wrong_direction("a reply or command", message, what="server message to runner")
    return message
