"""Hostile clients get per-connection limits; everybody else keeps being served.

A connection may have at most 64 requests outstanding (more closes it); a client that opens
connections until the server's file descriptors run out is refused past a cap that keeps
descriptors for runners; a slow reader and a slow (byte-at-a-time) writer are served at
their pace while other clients are served in between. Nothing committed is lost.
"""

from __future__ import annotations

import contextlib
import json
import resource
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from pi_workflows.protocol import MAX_FRAME_BYTES
from pi_workflows.server.connections import MAX_OUTSTANDING, connection_limit

from support.server import ServerProcess, wait_for

CHECKPOINT = """
from pi_workflows import Workflow, checkpoint, compute, edge

workflow = Workflow(
    "ask",
    start="ask",
    nodes={
        "ask": checkpoint(lambda ctx: {"question": "number?"}),
        "double": compute(lambda ctx: {"doubled": ctx.outputs["ask"]["n"] * 2}),
    },
    edges=[edge("ask", "double")],
)
"""


class Raw:
    """A raw client connection whose hello was read."""

    def __init__(self, home: Path, timeout: float = 30) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(home / "server.sock"))
        self.stream: BinaryIO = self.sock.makefile("rb")
        hello = self.stream.readline()
        self.hello = json.loads(hello) if hello else None

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def responses(self) -> Iterator[dict[str, Any]]:
        """Every frame until the server closes the connection."""
        while True:
            try:
                line = self.stream.readline(MAX_FRAME_BYTES + 1)
            except ConnectionResetError:
                return
            if not line:
                return
            yield json.loads(line)

    def close(self) -> None:
        self.stream.close()
        self.sock.close()


@contextlib.contextmanager
def raw(home: Path, timeout: float = 30) -> Iterator[Raw]:
    conn = Raw(home, timeout)
    try:
        yield conn
    finally:
        conn.close()


def request(request_id: str, operation: str = "server.status", **extra: Any) -> bytes:
    return (
        json.dumps(
            {
                "type": "request",
                "schema": "pi-workflows.client.v1",
                "requestId": request_id,
                "clientId": "hostile-test",
                "operation": operation,
                **extra,
            }
        ).encode()
        + b"\n"
    )


def _status_works(server: ServerProcess) -> bool:
    with server.client() as client:
        return bool(client.status()["pid"])


def test_more_than_64_outstanding_requests_close_the_connection(server: ServerProcess) -> None:
    """A client that pipelines 200 requests is answered in order for at least the first 64
    and at most the ones read before the 65th unanswered one, then closed; others are
    served."""
    with raw(server.home) as conn:
        conn.send(b"".join(request(f"r-{i}") for i in range(200)))
        answers = list(conn.responses())
    ids = [a["requestId"] for a in answers]
    assert MAX_OUTSTANDING <= len(ids) < 200
    assert ids == [f"r-{i}" for i in range(len(ids))], "answers out of order"
    assert all(a["outcome"] == "accepted" for a in answers)
    assert _status_works(server)
    wait_for(
        lambda: f"more than {MAX_OUTSTANDING} requests outstanding" in server.log.read_text(),
        30,
        "the server to log why it closed the connection",
    )


def test_a_client_that_keeps_64_requests_outstanding_is_never_closed(
    server: ServerProcess,
) -> None:
    """Batches of exactly 64 pipelined requests, each read back before the next batch, are
    all answered on one connection."""
    with raw(server.home) as conn:
        stream = conn.responses()
        for batch in range(3):
            conn.send(b"".join(request(f"b{batch}-{i}") for i in range(MAX_OUTSTANDING)))
            got = [next(stream)["requestId"] for _ in range(MAX_OUTSTANDING)]
            assert got == [f"b{batch}-{i}" for i in range(MAX_OUTSTANDING)]
        conn.send(request("last"))
        assert next(stream)["requestId"] == "last"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_client_that_opens_connections_until_descriptors_run_out_starves_nobody(
    server_process: ServerProcess,
) -> None:
    """With the server's RLIMIT_NOFILE lowered to 160, a client opening connections until it
    is refused is refused past the connection cap; a connected client keeps being served,
    answers a checkpoint so that a new runner is spawned under the flood, the run completes,
    and once the flood ends new clients connect again."""
    server = server_process.start()
    server.write_workflow("ask", CHECKPOINT)
    run_id = server.start_run("ask")
    server.wait_status(run_id, "waiting")
    assert server.process is not None
    pid = server.process.pid
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (160, 160))
    bystander = server.client()
    bystander.connect()
    flood: list[Raw] = []
    refused = 0
    try:
        for _ in range(400):
            conn = Raw(server.home, timeout=30)
            if conn.hello is None:  # closed before its hello: refused past the cap
                conn.close()
                refused += 1
                if refused >= 5:
                    break
                continue
            flood.append(conn)
        assert refused >= 5, f"never refused after {len(flood)} connections"
        assert len(flood) <= 160
        assert bystander.status()["pid"] == pid
        bystander.answer_checkpoint(run_id, {"n": 21})
        view = wait_for(
            lambda: (
                (v := bystander.get_run(run_id))["status"] in ("completed", "failed", "paused")
                and v
            ),
            120,
            "the run to finish under the flood",
        )
        assert view["status"] == "completed", view
        assert view["output"] == {"doubled": 42}
    finally:
        for conn in flood:
            conn.close()
        bystander.close()

    def connects() -> bool:
        with raw(server.home) as conn:
            return conn.hello is not None

    wait_for(connects, 60, "a new client to be accepted after the flood")
    assert server.process.poll() is None
    assert _status_works(server)
    assert server.diagnose() == []
    log = server.log.read_text(errors="replace")
    assert "refusing client connections" in log
    assert "Too many open files" not in log, log[-3000:]


def test_the_connection_cap_leaves_descriptors_for_runners() -> None:
    """The cap is the descriptor limit minus a reserve for the database, the listener and
    every runner slot, and never below a handful."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert connection_limit(4) <= max(4, soft - 64 - 32)
    assert connection_limit(4) >= 4


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_slow_reader_gets_every_response_while_others_are_served(
    server: ServerProcess,
) -> None:
    """A client that stops reading in the middle of large responses (about 2 MB pending)
    holds up only itself: another client is served meanwhile, and then the slow reader
    receives every response, complete and in order."""
    server.write_workflow(
        "big",
        "from pi_workflows import Workflow, compute\n"
        "workflow = Workflow('big', start='a', nodes={'a': compute(lambda ctx: 1)}, edges=[])\n",
    )
    run_id = server.start_run("big", {"blob": "x" * 800_000})
    ref = server.run(run_id)["inputRef"]
    served = threading.Event()
    answers_during_stall: list[str] = []

    def bystander() -> None:
        with server.client() as client:
            for _ in range(10):
                answers_during_stall.append(str(client.status()["pid"]))
        served.set()

    with raw(server.home, timeout=60) as slow:
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        slow.send(
            b"".join(
                request(f"blob-{i}", "blob.read", payload={"digest": ref["digest"]})
                for i in range(3)
            )
        )
        first = slow.sock.recv(1024)  # the start of the first response, then a stall
        assert first
        thread = threading.Thread(target=bystander)
        thread.start()
        assert served.wait(60), "another client was not served while one stalled"
        thread.join(30)
        stream = slow.stream  # nothing but the hello was buffered before the raw recv
        answers = [json.loads(first + stream.readline(MAX_FRAME_BYTES + 1))]
        answers += [json.loads(stream.readline(MAX_FRAME_BYTES + 1)) for _ in range(2)]
    assert len(answers_during_stall) == 10
    assert [a["requestId"] for a in answers] == ["blob-0", "blob-1", "blob-2"]
    assert all(a["outcome"] == "accepted" for a in answers)
    assert len({json.dumps(a["receipt"], sort_keys=True) for a in answers}) == 1
    with server.client() as client:
        assert int(client.status()["slowClientsDropped"]) == 0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_byte_at_a_time_writer_is_served_and_others_in_between(server: ServerProcess) -> None:
    """A client that sends a cancel one byte at a time, while another client is answered
    after every few bytes, gets its answer and the run is cancelled exactly once."""
    server.write_workflow("ask", CHECKPOINT)
    run_id = server.start_run("ask")
    server.wait_status(run_id, "waiting")
    frame = request("slow-1", "run.cancel", runId=run_id, idempotencyKey="slow-cancel")
    with raw(server.home) as slow, server.client() as other:
        for offset, byte in enumerate(frame):
            slow.send(bytes([byte]))
            if offset % 25 == 0:
                assert other.status()["pid"]
        answer = next(slow.responses())
        slow.send(request("slow-2", "run.cancel", runId=run_id, idempotencyKey="slow-cancel"))
        again = next(slow.responses())
    assert answer["requestId"] == "slow-1"
    assert answer["outcome"] == "accepted", answer
    assert again["outcome"] == "adopted", again
    view = server.run(run_id)
    assert view["status"] == "cancelled"
    cancels = server.query(
        "SELECT count(*) FROM events WHERE run_id = ? AND run_status = 'cancelled'", run_id
    )
    assert cancels == [(1,)]
    assert server.diagnose() == []
