"""The connection checks the server's hello and respects the frame cap both ways."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from client.scripted_peer import SILENCE, Reply, hello, ok, scripted_peer, serving
from pi_workflows.client import (
    Client,
    Connection,
    ConnectionLostError,
    ProtocolMismatchError,
    RequestTooLargeError,
    ServerProtocolError,
    ServerUnavailableError,
)
from pi_workflows.protocol import CLIENT_SCHEMA, MAX_FRAME_BYTES, Request


def _raw_hello(**changes: object) -> bytes:
    fields: dict[str, object] = {
        "type": "hello",
        "schema": CLIENT_SCHEMA,
        "serverVersion": "9.9.9",
        "protocolVersion": 1,
        "serverEpoch": 1,
        "serverPid": 4242,
    }
    fields.update(changes)
    return json.dumps(fields).encode() + b"\n"


def test_connection_accepts_a_v1_hello_and_exposes_it(tmp_path: Path) -> None:
    """A valid hello is read on connect and its pid, epoch and version are available."""
    with (
        scripted_peer(tmp_path, lambda _i, r: ok(r), greeting=hello(server_epoch=12)),
        Connection.open(tmp_path / "server.sock", timeout=5) as connection,
    ):
        assert connection.hello.server_epoch == 12
        assert connection.hello.server_version == "0.1.0-test"


@pytest.mark.parametrize(
    ("greeting", "named"),
    [
        (_raw_hello(schema="pi-workflows.client.v2"), "pi-workflows.client.v2"),
        (_raw_hello(protocolVersion=2), "protocol version 2"),
    ],
)
def test_connection_refuses_a_hello_of_another_protocol(
    tmp_path: Path, greeting: bytes, named: str
) -> None:
    """A hello with another schema or protocol version raises `ProtocolMismatchError` naming it."""
    with (
        scripted_peer(tmp_path, lambda _i, r: ok(r), greeting=greeting),
        pytest.raises(ProtocolMismatchError) as caught,
    ):
        Connection.open(tmp_path / "server.sock", timeout=5)
    assert named in caught.value.message
    assert "pi-workflows.client.v1" in caught.value.message
    assert caught.value.code == "protocolMismatch"


@pytest.mark.parametrize(
    "greeting",
    [
        b'{"type": "response", "requestId": "r", "outcome": "accepted"}\n',
        b"HTTP/1.1 400 Bad Request\n",
        b'{"type": "hello"}\n',
    ],
)
def test_connection_refuses_a_peer_that_does_not_greet_with_a_hello(
    tmp_path: Path, greeting: bytes
) -> None:
    """Anything but a valid hello as the first frame is a protocol mismatch, not a retry."""
    with (
        scripted_peer(tmp_path, lambda _i, r: ok(r), greeting=greeting),
        pytest.raises(ProtocolMismatchError),
    ):
        Connection.open(tmp_path / "server.sock", timeout=5)


def test_a_peer_that_never_says_hello_times_out_as_a_lost_connection(tmp_path: Path) -> None:
    """A listener that accepts but stays silent makes `open` fail within its timeout."""
    path = tmp_path / "server.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with listener:
        listener.bind(str(path))
        listener.listen(1)
        with pytest.raises(ConnectionLostError, match="no hello"):
            Connection.open(path, timeout=0.2)


def test_a_request_over_the_frame_cap_is_refused_before_sending(tmp_path: Path) -> None:
    """An oversized request raises `RequestTooLargeError`; the server never sees it (an
    event's data is bounded by the frame; only a run's input is uploaded in slices)."""
    with serving(tmp_path, lambda _i, r: ok(r)) as (client, peer):
        with pytest.raises(RequestTooLargeError) as caught:
            client.signal("run_1", "big", {"blob": "x" * MAX_FRAME_BYTES})
        assert client.status() == {}, "the connection is still usable"
    assert caught.value.limit == MAX_FRAME_BYTES
    assert peer.operations == ["server.status"]


def test_a_reply_over_the_frame_cap_is_a_protocol_error_and_is_not_retried(
    tmp_path: Path,
) -> None:
    """The client stops reading at the cap, closes, and does not resend the request."""
    oversized = b"{" + b" " * MAX_FRAME_BYTES + b"}\n"
    with (
        serving(tmp_path, lambda _i, _r: Reply(oversized)) as (client, peer),
        pytest.raises(ServerProtocolError, match="limit"),
    ):
        client.status()
    assert peer.operations == ["server.status"]


def test_a_reply_for_another_request_is_a_protocol_error(tmp_path: Path) -> None:
    """A response whose request id does not match the outstanding request closes the connection."""

    def answer(_index: int, request: Request) -> Reply:
        wrong = Request(
            schema=CLIENT_SCHEMA, request_id="other", client_id="c", operation="server.status"
        )
        return ok(wrong)

    with (
        serving(tmp_path, answer) as (client, _peer),
        pytest.raises(ServerProtocolError, match="other"),
    ):
        client.status()


def test_a_silent_server_makes_a_call_time_out(tmp_path: Path) -> None:
    """With no reply ever, the call ends with `ConnectionLostError` after its bounded retries."""
    with (
        serving(tmp_path, lambda _i, _r: SILENCE, timeout=0.1) as (client, peer),
        pytest.raises(ConnectionLostError, match="no reply within"),
    ):
        client.status()
    assert peer.operations == ["server.status"] * 4


def test_no_server_and_no_autostart_names_the_socket_and_the_start_command(
    tmp_path: Path,
) -> None:
    """Without a listener and with auto-start off, the error says where and what to run."""
    with pytest.raises(ServerUnavailableError) as caught:
        Client(tmp_path, autostart=False).status()
    message = caught.value.message
    assert str(tmp_path / "server.sock") in message
    assert "pi-workflows server start" in message
    assert "\n" not in message
    assert caught.value.code == "serverNotRunning"
    assert not (tmp_path / "logs").exists()


def test_a_stale_socket_file_without_a_listener_counts_as_no_server(tmp_path: Path) -> None:
    """A socket left behind by a dead server refuses connections: `ServerUnavailableError`."""
    path = tmp_path / "server.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()
    with pytest.raises(ServerUnavailableError, match="connection refused") as caught:
        Client(tmp_path, autostart=False).status()
    assert caught.value.startable


def test_an_overlong_socket_path_is_refused_clearly(tmp_path: Path) -> None:
    """A state directory whose socket path cannot be a Unix socket address is named as such."""
    home = tmp_path / ("d" * 120)
    with pytest.raises(ServerUnavailableError, match="longer than 107 bytes") as caught:
        Client(home, autostart=True).status()
    assert not caught.value.startable
    assert not home.exists()
