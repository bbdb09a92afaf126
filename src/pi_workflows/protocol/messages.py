"""Client protocol v1 messages: what clients and the server say to each other.

Owns the envelope structs (`Hello`, `Request`, `Response`, `Event`), the schema and version
constants, and the two decoders, built once at import. Every struct is frozen, tagged on
`type`, camelCase on the wire and refuses unknown fields. Operations and event names are
plain bounded strings; the server owns their catalogue and their payload shapes. This module
never does I/O (framing lives in `framing.py`) and imports no other internal package.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec

from pi_workflows.protocol._decoding import Buffer, decode, wrong_direction
from pi_workflows.protocol.fields import Count, Id, Name, Revision
from pi_workflows.protocol.outcomes import ErrorInfo, Outcome

__all__ = [
    "CLIENT_SCHEMA",
    "PROTOCOL_VERSION",
    "Event",
    "Hello",
    "Request",
    "Response",
    "ServerMessage",
    "decode_request",
    "decode_server_message",
]

CLIENT_SCHEMA: Final = "pi-workflows.client.v1"
"""The `schema` every hello and request carries; any other value is refused."""

PROTOCOL_VERSION: Final = 1
"""The client protocol version this package speaks (sent in `Hello.protocolVersion`)."""

ClientSchema = Literal["pi-workflows.client.v1"]
"""The type of `schema`: exactly `CLIENT_SCHEMA`, checked when decoding."""

_Version = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
_Pid = Annotated[int, msgspec.Meta(ge=1)]


class _ClientMessage(
    msgspec.Struct,
    frozen=True,
    forbid_unknown_fields=True,
    rename="camel",
    tag_field="type",
    kw_only=True,
):
    """Common configuration of every client-protocol message (tag field `type`).

    Subclasses repeat `frozen=True` only so that mypy's dataclass view agrees with msgspec.
    """


class Hello(_ClientMessage, tag="hello", frozen=True):
    """The server's first message on every connection, before any request is read."""

    schema: ClientSchema
    server_version: _Version
    protocol_version: Literal[1]
    server_epoch: Count
    """Increases every time a server starts on this state directory."""
    server_pid: _Pid


class Request(_ClientMessage, tag="request", frozen=True):
    """One client command or query; the server answers it with exactly one `Response`."""

    schema: ClientSchema
    request_id: Id
    """Unique per attempt; a retry after a lost reply uses a new one."""
    client_id: Id
    """Stable for one client; with the idempotency key it names a logical command."""
    operation: Name
    """What to do, e.g. `run.start`, `server.status`."""
    idempotency_key: Id | None = None
    """Required by the server for state-changing operations; reads have none."""
    run_id: Id | None = None
    expected_revision: Revision | None = None
    """If set, the command applies only while the run is at exactly this revision."""
    payload: dict[str, Any] = {}
    """Operation arguments (plain JSON, bounded by the frame size)."""


class Response(_ClientMessage, tag="response", frozen=True):
    """The server's answer to one request, committed before it is sent."""

    request_id: Id
    """Repeats `Request.requestId`."""
    outcome: Outcome
    revision: Revision | None = None
    """The run revision after the command, when it concerns a run."""
    receipt: dict[str, Any] | None = None
    """The stored receipt (or the read's result) when the outcome is accepted or adopted."""
    error: ErrorInfo | None = None
    """Why, for the other outcomes."""

    @property
    def ok(self) -> bool:
        """True when the command took effect (accepted now, or adopted from an earlier try)."""
        return self.outcome.ok


class Event(_ClientMessage, tag="event", frozen=True):
    """A notification the server pushes without a request (e.g. to a watching session)."""

    name: Name
    run_id: Id | None = None
    payload: dict[str, Any] = {}


ServerMessage = Hello | Response | Event
"""Everything a server sends to a client."""

_ClientProtocolMessage = Hello | Request | Response | Event

# One decoder for the whole union: it requires the `type` tag, and a message sent the wrong
# way (a hello sent to a server) gets a precise error instead of a missing-field one.
_DECODER: Final = msgspec.json.Decoder(_ClientProtocolMessage)


def decode_request(data: Buffer) -> Request:
    """Decode one frame a client sent to the server.

    Raises:
        ProtocolError: malformed JSON, wrong types, unknown or missing fields, a wrong
            `schema`, a bound exceeded, or a message that is not a request.
    """
    message = decode(_DECODER, data, what="request")
    if not isinstance(message, Request):
        raise wrong_direction("a request", message, what="request")
    return message


def decode_server_message(data: Buffer) -> ServerMessage:
    """Decode one frame the server sent to a client; dispatch on the result with `match`.

    Raises:
        ProtocolError: as `decode_request`, or a message that only clients send.
    """
    message = decode(_DECODER, data, what="server message")
    if isinstance(message, Request):
        raise wrong_direction("a hello, response or event", message, what="server message")
    return message
