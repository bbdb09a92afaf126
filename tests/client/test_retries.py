"""Lost connections are retried with the same logical command, a bounded number of times."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from client.scripted_peer import DROP, SILENCE, Reply, ok, serving
from pi_workflows.client import MAX_RETRIES, Client, ConnectionLostError
from pi_workflows.protocol import Outcome, Request
from pi_workflows.protocol.environment import snapshot


def test_a_reply_lost_after_the_server_received_the_request_is_retried_as_the_same_command(
    tmp_path: Path,
) -> None:
    """Crash window: reply lost after commit. The retry repeats key, client id and payload with
    a new request id, and the stored receipt comes back as adopted."""

    def answer(index: int, request: Request) -> Reply:
        if index == 0:
            return DROP
        return ok(
            request,
            {"runId": "run_1", "workflow": "demo", "revision": 1},
            outcome=Outcome.ADOPTED,
            revision=1,
        )

    with serving(tmp_path, answer) as (client, peer):
        receipt = client.start_run("demo", {"n": 1}, project_dir=tmp_path)
    assert receipt.adopted
    assert receipt["runId"] == "run_1"
    assert receipt.revision == 1
    (_, first), (_, second) = peer.requests
    assert first.request_id != second.request_id
    assert first.idempotency_key is not None
    assert (first.idempotency_key, first.client_id, first.operation, first.payload) == (
        second.idempotency_key,
        second.client_id,
        second.operation,
        second.payload,
    )
    assert first.payload == {
        "workflow": "demo",
        "input": {"n": 1},
        "projectDir": str(tmp_path),
        "environment": snapshot(os.environ),
        "workingDirectory": os.getcwd(),
    }
    assert receipt.idempotency_key == first.idempotency_key


def test_a_reply_that_never_arrives_is_retried_on_a_new_connection(tmp_path: Path) -> None:
    """A reply timeout closes the connection and the retry keeps the idempotency key."""

    def answer(index: int, request: Request) -> Reply:
        return SILENCE if index == 0 else ok(request, {"runId": "r", "status": "paused"})

    with serving(tmp_path, answer, timeout=0.2) as (client, peer):
        receipt = client.pause("r", idempotency_key="my-key")
    assert receipt["status"] == "paused"
    assert [(i, r.idempotency_key, r.run_id) for i, r in peer.requests] == [
        (0, "my-key", "r"),
        (1, "my-key", "r"),
    ]


def test_reads_are_retried_without_an_idempotency_key(tmp_path: Path) -> None:
    """A read that lost its connection is sent again; reads never carry a key."""

    def answer(index: int, request: Request) -> Reply:
        return DROP if index == 0 else ok(request, {"run": {"runId": "r", "status": "running"}})

    with serving(tmp_path, answer) as (client, peer):
        view = client.get_run("r")
    assert view == {"runId": "r", "status": "running"}
    assert [r.idempotency_key for _, r in peer.requests] == [None, None]


def test_retries_are_bounded_and_the_error_names_the_key_to_retry_with(tmp_path: Path) -> None:
    """After `MAX_RETRIES` resends the call raises `ConnectionLostError` carrying its key."""
    with (
        serving(tmp_path, lambda _i, _r: DROP) as (client, peer),
        pytest.raises(ConnectionLostError) as caught,
    ):
        client.cancel("r", reason="enough")
    assert len(peer.requests) == MAX_RETRIES + 1
    keys = {r.idempotency_key for _, r in peer.requests}
    assert keys == {caught.value.idempotency_key}
    assert caught.value.attempts == MAX_RETRIES + 1
    assert caught.value.operation == "run.cancel"


def test_state_changing_calls_get_a_fresh_key_and_a_stable_client_id(tmp_path: Path) -> None:
    """Two commands get two generated keys; every request of one client shares its client id."""
    with serving(tmp_path, lambda _i, r: ok(r)) as (client, peer):
        client.resume("a")
        client.restart("b")
        client.list_runs(status="running", limit=3)
    (_, resume), (_, restart), (_, listing) = peer.requests
    assert resume.idempotency_key
    assert restart.idempotency_key
    assert resume.idempotency_key != restart.idempotency_key
    assert listing.idempotency_key is None
    assert listing.payload == {"status": ["running"], "limit": 3}
    assert resume.client_id == restart.client_id == listing.client_id
    assert resume.client_id.startswith("py-")


def test_each_client_instance_has_its_own_client_id(tmp_path: Path) -> None:
    """The default client id is new per instance; an explicit one is used as given."""
    assert Client(tmp_path).client_id != Client(tmp_path).client_id
    assert Client(tmp_path, client_id="cli").client_id == "cli"


def test_the_client_reconnects_after_the_server_closed_an_idle_connection(tmp_path: Path) -> None:
    """A connection the server closed between calls is replaced transparently."""

    def answer(index: int, request: Request) -> Reply:
        return Reply(ok(request, {"n": index}).frame, close=True)

    with serving(tmp_path, answer) as (client, peer):
        assert client.status() == {"n": 0}
        assert client.status() == {"n": 1}
    assert peer.connections == 2


def test_retries_leave_no_socket_open(tmp_path: Path) -> None:
    """Every connection a lost reply abandoned is closed: no file descriptor leaks."""
    fds = Path("/proc/self/fd")
    before = len(list(fds.iterdir()))
    with serving(tmp_path, lambda _i, _r: DROP) as (client, _peer):
        with pytest.raises(ConnectionLostError):
            client.restart("r")
        client.close()
    assert len(list(fds.iterdir())) == before
