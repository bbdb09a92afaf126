"""Client protocol v1: struct round trips, camelCase wire shape, and strict decoding."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pi_workflows.protocol import (
    CLIENT_SCHEMA,
    MAX_ERROR_MESSAGE_CHARS,
    MAX_ID_CHARS,
    PROTOCOL_VERSION,
    ErrorInfo,
    Event,
    Hello,
    Outcome,
    ProtocolError,
    Request,
    Response,
    ServerMessage,
    decode_request,
    decode_server_message,
    encode_frame,
)

HELLO = Hello(
    schema=CLIENT_SCHEMA,
    server_version="0.1.0",
    protocol_version=PROTOCOL_VERSION,
    server_epoch=7,
    server_pid=4242,
)
FULL_REQUEST = Request(
    schema=CLIENT_SCHEMA,
    request_id="req-1",
    client_id="cli-1",
    operation="run.start",
    idempotency_key="idem-1",
    run_id="run-1",
    expected_revision=3,
    payload={"workflow": "review", "input": {"files": ["a.py"], "depth": 2.5}},
)
MINIMAL_REQUEST = Request(
    schema=CLIENT_SCHEMA, request_id="req-2", client_id="cli-1", operation="server.status"
)
ACCEPTED = Response(
    request_id="req-1", outcome=Outcome.ACCEPTED, revision=4, receipt={"runId": "run-1"}
)
CONFLICT = Response(
    request_id="req-1",
    outcome=Outcome.CONFLICT,
    error=ErrorInfo(code="staleRevision", message="run is at revision 5, not 3"),
)
EVENT = Event(name="run.progress", run_id="run-1", payload={"node": "review"})


def _wire(message: object) -> dict[str, Any]:
    decoded = json.loads(encode_frame(message))
    assert isinstance(decoded, dict)
    return decoded


def _request_dict(**changes: Any) -> dict[str, Any]:
    wire = _wire(FULL_REQUEST)
    wire.update(changes)
    return wire


def _encoded(wire: dict[str, Any]) -> bytes:
    return json.dumps(wire).encode()


@pytest.mark.parametrize("request_message", [FULL_REQUEST, MINIMAL_REQUEST])
def test_request_round_trips_through_a_frame(request_message: Request) -> None:
    """A request encoded as a frame decodes to an equal request."""
    assert decode_request(encode_frame(request_message)) == request_message


@pytest.mark.parametrize("message", [HELLO, ACCEPTED, CONFLICT, EVENT, Event(name="server.idle")])
def test_server_messages_round_trip_through_a_frame(message: ServerMessage) -> None:
    """Every server-to-client message decodes back to an equal struct of the same type."""
    decoded = decode_server_message(encode_frame(message))
    assert type(decoded) is type(message)
    assert decoded == message


def test_request_uses_camel_case_keys_and_carries_type_and_schema() -> None:
    """The wire form of a request has camelCase keys, its type tag and the schema."""
    assert _wire(FULL_REQUEST).keys() == {
        "type",
        "schema",
        "requestId",
        "clientId",
        "operation",
        "idempotencyKey",
        "runId",
        "expectedRevision",
        "payload",
    }
    assert _wire(FULL_REQUEST)["type"] == "request"
    assert _wire(FULL_REQUEST)["schema"] == "pi-workflows.client.v1"


def test_hello_and_response_use_camel_case_keys() -> None:
    """Hello and response keys are camelCase, with outcome as its wire string."""
    assert _wire(HELLO) == {
        "type": "hello",
        "schema": "pi-workflows.client.v1",
        "serverVersion": "0.1.0",
        "protocolVersion": 1,
        "serverEpoch": 7,
        "serverPid": 4242,
    }
    assert _wire(CONFLICT) == {
        "type": "response",
        "requestId": "req-1",
        "outcome": "conflict",
        "revision": None,
        "receipt": None,
        "error": {"code": "staleRevision", "message": "run is at revision 5, not 3"},
    }


def test_server_messages_dispatch_with_match() -> None:
    """Decoded server messages can be dispatched by type with a match statement."""
    seen = []
    for message in (HELLO, ACCEPTED, EVENT):
        match decode_server_message(encode_frame(message)):
            case Hello(server_epoch=epoch):
                seen.append(f"hello {epoch}")
            case Response(request_id=request_id, outcome=outcome):
                seen.append(f"{request_id} {outcome}")
            case Event(name=name):
                seen.append(f"event {name}")
    assert seen == ["hello 7", "req-1 accepted", "event run.progress"]


def test_response_ok_is_true_only_for_committed_outcomes() -> None:
    """`ok` is true for accepted and adopted and false for every other outcome."""
    ok = {outcome for outcome in Outcome if Response(request_id="r", outcome=outcome).ok}
    assert ok == {Outcome.ACCEPTED, Outcome.ADOPTED}


@pytest.mark.parametrize(
    ("wire", "path", "fragment"),
    [
        (_request_dict(extra=1), "$", "unknown field `extra`"),
        (_request_dict(expectedRevision="3"), "$.expectedRevision", "Expected `int | null`"),
        (_request_dict(expectedRevision=True), "$.expectedRevision", "got `bool`"),
        (_request_dict(expectedRevision=-1), "$.expectedRevision", ">= 0"),
        (_request_dict(payload=[1]), "$.payload", "Expected `object`"),
        (_request_dict(schema="pi-workflows.client.v2"), "$.schema", "Invalid enum value"),
        (_request_dict(schema="pi-workflows.runner.v1"), "$.schema", "Invalid enum value"),
        (_request_dict(requestId=""), "$.requestId", "length >= 1"),
        (_request_dict(requestId="r" * (MAX_ID_CHARS + 1)), "$.requestId", "length <= 200"),
        (_request_dict(operation="run start"), "$.operation", "matching regex"),
        (_request_dict(operation="run.start\n"), "$.operation", "matching regex"),
        (_request_dict(operation="x" * 65), "$.operation", "length <= 64"),
        (_request_dict(type="nonsense"), "$.type", "Invalid value 'nonsense'"),
    ],
)
def test_decode_request_rejects_an_invalid_envelope(
    wire: dict[str, Any], path: str, fragment: str
) -> None:
    """Unknown fields, wrong types, wrong schema and broken bounds raise ProtocolError."""
    with pytest.raises(ProtocolError) as caught:
        decode_request(_encoded(wire))
    assert caught.value.path == path
    assert fragment in caught.value.message
    assert caught.value.message.startswith("invalid request: ")


@pytest.mark.parametrize("field", ["type", "schema", "requestId", "clientId", "operation"])
def test_decode_request_rejects_a_missing_required_field(field: str) -> None:
    """The type tag, the schema and every identifying field are required on the wire."""
    wire = _wire(MINIMAL_REQUEST)
    del wire[field]
    with pytest.raises(ProtocolError, match="missing required field"):
        decode_request(_encoded(wire))


@pytest.mark.parametrize(
    "data", [b"", b"{", b'{"type":"request",}', b"NaN", b"\xff\xfe", b'{"type":"req']
)
def test_decode_request_rejects_malformed_json(data: bytes) -> None:
    """Bytes that are not one JSON document raise ProtocolError with no path."""
    with pytest.raises(ProtocolError) as caught:
        decode_request(data)
    assert caught.value.message.startswith("request is not valid JSON")
    assert caught.value.path is None


@pytest.mark.parametrize("data", [b"[]", b'"request"', b"null", b"3"])
def test_decode_request_rejects_json_that_is_not_an_object(data: bytes) -> None:
    """A JSON document that is not an object is not a message."""
    with pytest.raises(ProtocolError, match="Expected `object`"):
        decode_request(data)


def test_decode_request_rejects_a_payload_nested_too_deeply() -> None:
    """A payload nested beyond what the decoder can follow is a ProtocolError, not a crash."""
    deep = b"[" * 100_000 + b"]" * 100_000
    data = _encoded(_request_dict(payload={"deep": 0})).replace(b"0}", deep + b"}")
    with pytest.raises(ProtocolError, match="nested too deeply"):
        decode_request(data)


@pytest.mark.parametrize("message", [HELLO, ACCEPTED, EVENT])
def test_decode_request_rejects_a_server_message(message: ServerMessage) -> None:
    """A well-formed server message sent to the server is refused by its type tag."""
    with pytest.raises(ProtocolError, match="expected a request") as caught:
        decode_request(encode_frame(message))
    assert caught.value.path == "$.type"


def test_decode_server_message_rejects_a_request() -> None:
    """A request sent to a client is refused by its type tag."""
    with pytest.raises(ProtocolError, match="got a 'request' message"):
        decode_server_message(encode_frame(FULL_REQUEST))


@pytest.mark.parametrize(
    "wire",
    [
        {**_wire(HELLO), "protocolVersion": 2},
        {**_wire(HELLO), "schema": "pi-workflows.client.v2"},
        {**_wire(HELLO), "capabilities": []},
        {**_wire(ACCEPTED), "outcome": "ok"},
        {**_wire(CONFLICT), "error": {"code": "x", "message": "m", "stack": "..."}},
        {**_wire(CONFLICT), "error": {"code": "x", "message": "two\nlines"}},
        {**_wire(CONFLICT), "error": {"code": "x", "message": "m" * 501}},
        {**_wire(EVENT), "name": ""},
        {"type": "goodbye"},
    ],
)
def test_decode_server_message_rejects_an_invalid_message(wire: dict[str, Any]) -> None:
    """Wrong versions, unknown fields, unknown outcomes and unbounded errors are refused."""
    with pytest.raises(ProtocolError, match=r"^invalid server message: "):
        decode_server_message(_encoded(wire))


def test_protocol_error_message_is_one_bounded_line_for_hostile_input() -> None:
    """An attacker-chosen field name cannot make the error multi-line or unbounded."""
    hostile = "x\n" * 5_000
    with pytest.raises(ProtocolError) as caught:
        decode_request(_encoded(_request_dict(**{hostile: 1})))
    message = caught.value.message
    assert "\n" not in message
    assert len(message) <= MAX_ERROR_MESSAGE_CHARS
    assert str(caught.value) == message
