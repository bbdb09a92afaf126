"""Bad clients and noisy runners are bounded: each closes only itself."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from support.server import ServerProcess, wait_for


@pytest.fixture
def raw(server: ServerProcess) -> Iterator[Callable[[], socket.socket]]:
    """Open raw connections to the server (after its hello); all are closed afterwards."""
    opened: list[socket.socket] = []

    def connect() -> socket.socket:
        sock = _raw(server)
        opened.append(sock)
        return sock

    yield connect
    for sock in opened:
        sock.close()


def _raw(server: ServerProcess) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(str(server.home / "server.sock"))
    hello = b""
    while not hello.endswith(b"\n"):
        hello += sock.recv(4096)
    assert json.loads(hello)["type"] == "hello"
    return sock


def _closed(sock: socket.socket) -> bool:
    """Read until EOF (the server closed) and say so; a timeout fails the test."""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return True


def _status_works(server: ServerProcess) -> bool:
    with server.client() as client:
        return bool(client.status()["pid"])


def _request(operation: str, **extra: object) -> dict[str, object]:
    return {
        "type": "request",
        "schema": "pi-workflows.client.v1",
        "requestId": "r-1",
        "clientId": "raw",
        "operation": operation,
        **extra,
    }


def test_malformed_json_closes_only_that_connection(
    server: ServerProcess, raw: Callable[[], socket.socket]
) -> None:
    """A line that is not JSON closes its connection; another client is served."""
    bad = raw()
    bystander = raw()
    bad.sendall(b"{this is not json\n")
    assert _closed(bad)
    bystander.sendall(json.dumps(_request("server.status")).encode() + b"\n")
    with bystander.makefile("rb") as stream:
        assert json.loads(stream.readline())["outcome"] == "accepted"
    assert _status_works(server)


def test_an_unknown_envelope_field_closes_only_that_connection(
    server: ServerProcess, raw: Callable[[], socket.socket]
) -> None:
    """Strict decoding refuses unknown fields in the envelope."""
    bad = raw()
    bad.sendall(json.dumps(_request("server.status", surprise=1)).encode() + b"\n")
    with bad.makefile("rb") as stream:
        answer = json.loads(stream.readline())
    assert answer["outcome"] == "rejected"
    assert _closed(bad)
    assert _status_works(server)


def test_a_two_megabyte_line_closes_only_that_connection(
    server: ServerProcess, raw: Callable[[], socket.socket]
) -> None:
    """A frame over 1 MiB is refused without buffering it; the server stays responsive."""
    bad = raw()
    payload = b'{"type":"request","x":"' + b"a" * (2 * 1024 * 1024) + b'"}\n'
    try:
        bad.sendall(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass
    else:
        assert _closed(bad)
    assert _status_works(server)


def test_a_client_that_never_reads_is_disconnected_alone(
    server: ServerProcess, raw: Callable[[], socket.socket]
) -> None:
    """A client that floods requests without reading is cut off; others are served meanwhile."""
    server.write_workflow(
        "big",
        "from pi_workflows import Workflow, compute\n"
        "workflow = Workflow('big', start='a', nodes={'a': compute(lambda ctx: 1)}, edges=[])\n",
    )
    big_run = server.start_run("big", {"blob": "x" * 800_000})
    ref = server.run(big_run)["inputRef"]  # a large input is read in chunks of ~700 KB
    greedy = raw()
    greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    greedy.setblocking(False)
    line = json.dumps(_request("blob.read", payload={"digest": ref["digest"]})).encode() + b"\n"
    pid = server.process.pid  # type: ignore[union-attr]
    rss_before = psutil.Process(pid).memory_info().rss
    sent = 0
    while True:
        try:
            greedy.send(line)
            sent += 1
        except (BlockingIOError, BrokenPipeError, ConnectionResetError):
            break
    assert sent > 10

    def dropped() -> bool:
        with server.client() as client:
            return int(client.status()["slowClientsDropped"]) >= 1

    wait_for(dropped, 60, "the server to drop the client that does not read")
    assert _status_works(server)
    greedy.setblocking(True)
    greedy.settimeout(30)
    answered = 0
    with greedy.makefile("rb") as stream:
        for _ in stream:
            answered += 1
    assert answered < sent
    rss_after = psutil.Process(pid).memory_info().rss
    assert rss_after - rss_before < 32 * 1024 * 1024


def test_a_runner_flooding_its_output_is_bounded(server: ServerProcess, tmp_path: Path) -> None:
    """A node writing 64 MiB to stdout and stderr never blocks on a full pipe, completes,
    leaves the server's memory flat and its clients served, and the stored tail is the
    *end* of what it wrote (where the diagnosis is)."""
    server.write_workflow(
        "noisy",
        """
        import os, sys
        from pi_workflows import Workflow, compute

        def shout(ctx):
            block = b"x" * 65536
            for _ in range(512):
                os.write(1, block)
                os.write(2, block)
            os.write(2, b"the last words of the flood")
            return {"ok": True}

        workflow = Workflow("noisy", start="shout", nodes={"shout": compute(shout)}, edges=[])
        """,
    )
    pid = server.process.pid  # type: ignore[union-attr]
    rss_before = psutil.Process(pid).memory_info().rss
    run_id = server.start_run("noisy")
    with server.client() as client:  # the server answers while it drains the flood
        while client.get_run(run_id)["status"] not in ("completed", "failed", "paused"):
            client.status()
    view = server.wait_status(run_id, {"completed", "failed", "paused"}, 120)
    assert view["status"] == "completed", view
    rss_after = psutil.Process(pid).memory_info().rss
    assert rss_after - rss_before < 48 * 1024 * 1024
    (tail,) = wait_for(
        lambda: server.query(
            "SELECT output_tail FROM run_runners WHERE run_id = ? AND output_tail IS NOT NULL",
            run_id,
        ),
        30,
        "the runner's output tail",
    )[0]
    assert tail.rstrip().endswith("the last words of the flood")
    wait_for(lambda: server.run(run_id)["runner"] is None, 30, "the runner record to close")
