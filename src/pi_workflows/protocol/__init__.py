"""The wire layer shared by the server, the runner child and the clients.

Layout:

- `canonical`: canonical JSON bytes and sha256 fingerprints of plain JSON values.
- `framing`: newline-delimited frames capped at `MAX_FRAME_BYTES`, for asyncio and sockets.
- `messages`: client protocol v1 (`Hello`, `Request`, `Response`, `Event`) and its decoders.
- `runner`: the private server <-> runner-child envelope and its decoders.
- `outcomes`: the `Outcome` enum and `ErrorInfo`, shared by both channels.
- `effects`: the effect key derivation and result markers the server and runner share.
- `process_start`: how a recorded process's start time is measured (ticks since boot).
- `fields`: bounded identifier and name types and their limits.
- `environment`: the variables a run records by default from its client, and their bounds.
- `uploads`: the bound on a run's input and the slices an input over a frame travels in.
- `times`: epoch milliseconds as ISO-8601 text.
- `json_schema`: a value's first problem against a typed contract's JSON Schema, with its
  path (imported by its users as a submodule; it loads `jsonschema` on first use).
- `errors`: `ProtocolError` and its subclasses, and `NotJsonError`.

This package imports no other internal package (import-linter enforces it) and does no I/O
beyond reading frames from streams it is handed and `/proc/PID/stat` for a start time.
"""

from pi_workflows.protocol.canonical import MAX_JSON_DEPTH, canonical_json, fingerprint, sha256_hex
from pi_workflows.protocol.effects import REQUEST_ID_PLACEHOLDER, TIMED_OUT_RESULT, effect_key
from pi_workflows.protocol.environment import environment_problem
from pi_workflows.protocol.errors import FrameError, FrameTooLarge, NotJsonError, ProtocolError
from pi_workflows.protocol.fields import (
    AUDIENCE_PATTERN,
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    SIGNAL_NAME_PATTERN,
    Count,
    Id,
    Name,
    Revision,
)
from pi_workflows.protocol.framing import MAX_FRAME_BYTES, FrameReader, encode_frame, read_frame
from pi_workflows.protocol.messages import (
    CLIENT_SCHEMA,
    PROTOCOL_VERSION,
    Event,
    Hello,
    Request,
    Response,
    ServerMessage,
    decode_request,
    decode_server_message,
)
from pi_workflows.protocol.outcomes import MAX_ERROR_MESSAGE_CHARS, ErrorInfo, Outcome, safe_message
from pi_workflows.protocol.runner import (
    CHANNEL_FD_ENV,
    RUNNER_SCHEMA,
    RunnerCommand,
    RunnerCommandKind,
    RunnerMessage,
    RunnerReply,
    ServerToRunner,
    decode_runner_message,
    decode_server_to_runner,
)
from pi_workflows.protocol.times import iso_ms
from pi_workflows.protocol.uploads import (
    INLINE_INPUT_BYTES,
    MAX_INPUT_BYTES,
    MAX_RUN_STATE_BYTES,
    UPLOAD_CHUNK_BYTES,
    input_too_large,
)

__all__ = [
    # canonical JSON
    "MAX_JSON_DEPTH",
    "canonical_json",
    "fingerprint",
    "sha256_hex",
    # managed effects and steps
    "REQUEST_ID_PLACEHOLDER",
    "TIMED_OUT_RESULT",
    "effect_key",
    # framing
    "MAX_FRAME_BYTES",
    "FrameReader",
    "encode_frame",
    "read_frame",
    # client protocol v1
    "CLIENT_SCHEMA",
    "PROTOCOL_VERSION",
    "Hello",
    "Request",
    "Response",
    "Event",
    "ServerMessage",
    "decode_request",
    "decode_server_message",
    # runner protocol
    "CHANNEL_FD_ENV",
    "RUNNER_SCHEMA",
    "RunnerMessage",
    "RunnerReply",
    "RunnerCommand",
    "RunnerCommandKind",
    "ServerToRunner",
    "decode_runner_message",
    "decode_server_to_runner",
    # outcomes and errors on the wire
    "Outcome",
    "ErrorInfo",
    "safe_message",
    "MAX_ERROR_MESSAGE_CHARS",
    # field bounds
    "AUDIENCE_PATTERN",
    "MAX_ID_CHARS",
    "MAX_NAME_CHARS",
    "SIGNAL_NAME_PATTERN",
    "iso_ms",
    "Id",
    "Name",
    "Revision",
    "Count",
    # a run's environment
    "environment_problem",
    # large inputs
    "INLINE_INPUT_BYTES",
    "MAX_INPUT_BYTES",
    "MAX_RUN_STATE_BYTES",
    "UPLOAD_CHUNK_BYTES",
    "input_too_large",
    # errors
    "ProtocolError",
    "FrameTooLarge",
    "FrameError",
    "NotJsonError",
]
