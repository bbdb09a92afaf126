"""Runner protocol: envelope round trips and strict decoding in both directions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pi_workflows.protocol import (
    CLIENT_SCHEMA,
    RUNNER_SCHEMA,
    ErrorInfo,
    Outcome,
    ProtocolError,
    Request,
    RunnerCommand,
    RunnerCommandKind,
    RunnerMessage,
    RunnerReply,
    ServerToRunner,
    decode_runner_message,
    decode_server_to_runner,
    encode_frame,
)

PROPOSAL = RunnerMessage(
    schema=RUNNER_SCHEMA,
    run_id="run-1",
    generation=2,
    runner_epoch=5,
    message_id="msg-9",
    expected_revision=11,
    kind="node.propose",
    payload={"node": "review", "output": {"ok": True}},
)
READY = RunnerMessage(
    schema=RUNNER_SCHEMA,
    run_id="run-1",
    generation=2,
    runner_epoch=5,
    message_id="msg-1",
    kind="ready",
)
REPLY = RunnerReply(
    schema=RUNNER_SCHEMA, message_id="msg-9", outcome=Outcome.ACCEPTED, revision=12, payload={}
)
CLAIM_LOST = RunnerReply(
    schema=RUNNER_SCHEMA,
    message_id="msg-9",
    outcome=Outcome.CLAIM_LOST,
    error=ErrorInfo(code="staleGeneration", message="generation 2 is no longer current"),
)
START = RunnerCommand(schema=RUNNER_SCHEMA, command=RunnerCommandKind.START)


def _wire(message: object) -> dict[str, Any]:
    decoded = json.loads(encode_frame(message))
    assert isinstance(decoded, dict)
    return decoded


def _encoded(wire: dict[str, Any]) -> bytes:
    return json.dumps(wire).encode()


@pytest.mark.parametrize("message", [PROPOSAL, READY])
def test_runner_message_round_trips_through_a_frame(message: RunnerMessage) -> None:
    """A child's message encoded as a frame decodes to an equal struct."""
    assert decode_runner_message(encode_frame(message)) == message


@pytest.mark.parametrize(
    "message",
    [
        REPLY,
        CLAIM_LOST,
        START,
        *(RunnerCommand(schema=RUNNER_SCHEMA, command=c) for c in RunnerCommandKind),
    ],
)
def test_server_to_runner_messages_round_trip_through_a_frame(message: ServerToRunner) -> None:
    """Every server-to-child message decodes back to an equal struct of the same type."""
    decoded = decode_server_to_runner(encode_frame(message))
    assert type(decoded) is type(message)
    assert decoded == message


def test_runner_message_wire_shape_is_camel_case_with_type_and_schema() -> None:
    """The child's envelope carries every fencing field under its camelCase name."""
    assert _wire(PROPOSAL) == {
        "type": "message",
        "schema": "pi-workflows.runner.v1",
        "runId": "run-1",
        "generation": 2,
        "runnerEpoch": 5,
        "messageId": "msg-9",
        "kind": "node.propose",
        "expectedRevision": 11,
        "payload": {"node": "review", "output": {"ok": True}},
    }
    assert _wire(START) == {
        "type": "command",
        "schema": "pi-workflows.runner.v1",
        "command": "start",
        "payload": {},
    }


def test_runner_command_kinds_are_launch_and_the_five_explicit_instructions() -> None:
    """After the launch envelope the server can only start, resume, restart, cancel or stop."""
    assert [kind.value for kind in RunnerCommandKind] == [
        "launch",
        "start",
        "resume",
        "restart",
        "cancel",
        "stop",
    ]


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"surprise": 1}, "$"),
        ({"schema": CLIENT_SCHEMA}, "$.schema"),
        ({"generation": "2"}, "$.generation"),
        ({"generation": -1}, "$.generation"),
        ({"runnerEpoch": 1.5}, "$.runnerEpoch"),
        ({"messageId": ""}, "$.messageId"),
        ({"kind": "Node Propose"}, "$.kind"),
        ({"expectedRevision": -2}, "$.expectedRevision"),
    ],
)
def test_decode_runner_message_rejects_an_invalid_envelope(
    changes: dict[str, Any], path: str
) -> None:
    """Unknown fields, a client schema, wrong types and broken bounds raise ProtocolError."""
    with pytest.raises(ProtocolError, match=r"^invalid runner message: ") as caught:
        decode_runner_message(_encoded({**_wire(PROPOSAL), **changes}))
    assert caught.value.path == path


@pytest.mark.parametrize("field", ["type", "schema", "runId", "generation", "runnerEpoch"])
def test_decode_runner_message_rejects_a_missing_fencing_field(field: str) -> None:
    """Without its tag, schema or any fencing field, a child's message is refused."""
    wire = _wire(PROPOSAL)
    del wire[field]
    with pytest.raises(ProtocolError, match="missing required field"):
        decode_runner_message(_encoded(wire))


@pytest.mark.parametrize(
    "wire",
    [
        {**_wire(START), "command": "reboot"},
        {**_wire(REPLY), "outcome": "done"},
        {**_wire(REPLY), "runId": "run-1"},
        {**_wire(START), "schema": CLIENT_SCHEMA},
    ],
)
def test_decode_server_to_runner_rejects_an_invalid_message(wire: dict[str, Any]) -> None:
    """Unknown commands, unknown outcomes, unknown fields and a wrong schema are refused."""
    with pytest.raises(ProtocolError, match=r"^invalid server message to runner: "):
        decode_server_to_runner(_encoded(wire))


@pytest.mark.parametrize("message", [REPLY, START])
def test_decode_runner_message_rejects_what_only_the_server_sends(
    message: ServerToRunner,
) -> None:
    """A reply or command sent by a child is refused by its type tag."""
    with pytest.raises(ProtocolError, match="expected a runner message"):
        decode_runner_message(encode_frame(message))


def test_decode_server_to_runner_rejects_what_only_children_send() -> None:
    """A child's message echoed to a child is refused by its type tag."""
    with pytest.raises(ProtocolError, match="expected a reply or command"):
        decode_server_to_runner(encode_frame(PROPOSAL))


def test_client_request_is_not_a_runner_message() -> None:
    """A client-protocol request on the runner channel is refused, not misread."""
    request = Request(schema=CLIENT_SCHEMA, request_id="r", client_id="c", operation="run.get")
    with pytest.raises(ProtocolError, match="Invalid value 'request'"):
        decode_runner_message(encode_frame(request))


@pytest.mark.parametrize("data", [b"", b"{", b"\x00"])
def test_decode_runner_message_rejects_malformed_json(data: bytes) -> None:
    """Bytes that are not JSON raise ProtocolError."""
    with pytest.raises(ProtocolError, match=r"^runner message is not valid JSON"):
        decode_runner_message(data)
