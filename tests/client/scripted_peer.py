"""A scripted Unix-socket peer that plays the server's side of client protocol v1 in tests.

A protocol-level test double for the client and CLI unit tests: it greets each connection
with a hello (or any bytes a test wants), decodes each request with the real protocol
decoder, records it, and lets a handler decide the answer: a response, raw bytes, silence, or
closing the connection without a reply. It runs on threads in the test process and never
touches a database. The real server is exercised by the end-to-end tests.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_workflows.client import Client
from pi_workflows.protocol import (
    CLIENT_SCHEMA,
    ErrorInfo,
    FrameReader,
    Hello,
    Outcome,
    Request,
    Response,
    decode_request,
    encode_frame,
)

POLL = 0.02  # how often the peer's threads look at the stop flag, in seconds


@dataclass(frozen=True)
class Reply:
    """What the peer does with one request.

    `frame` (bytes, or a message to encode) is sent first when given; then the connection is
    closed when `close` is set. A reply with neither keeps silent and keeps reading.
    """

    frame: bytes | Response | None = None
    close: bool = False


Handler = Callable[[int, Request], Reply]
"""Called with the connection number (0 for the first connection) and the decoded request."""


def hello(**changes: Any) -> Hello:
    """A valid v1 hello for this test process, with fields overridden by `changes`."""
    fields: dict[str, Any] = {
        "schema": CLIENT_SCHEMA,
        "server_version": "0.1.0-test",
        "protocol_version": 1,
        "server_epoch": 7,
        "server_pid": os.getpid(),
    }
    fields.update(changes)
    return Hello(**fields)


def ok(request: Request, receipt: dict[str, Any] | None = None, **fields: Any) -> Reply:
    """Answer `accepted` (or `fields["outcome"]`) with `receipt`."""
    fields.setdefault("outcome", Outcome.ACCEPTED)
    return Reply(Response(request_id=request.request_id, receipt=receipt or {}, **fields))


def refuse(request: Request, outcome: Outcome, code: str, message: str) -> Reply:
    """Answer with a non-ok outcome and an error."""
    return Reply(
        Response(
            request_id=request.request_id,
            outcome=outcome,
            error=ErrorInfo(code=code, message=message),
        )
    )


DROP = Reply(close=True)
"""Close the connection without answering: a reply lost after the request arrived."""

SILENCE = Reply()
"""Answer nothing and keep the connection open: the client's reply timeout fires."""


class ScriptedPeer:
    """Listens on `path` until stopped; records every request it decoded in `requests`."""

    def __init__(
        self,
        path: Path,
        handler: Handler,
        *,
        greeting: bytes | Hello | None = None,
    ) -> None:
        self.path = path
        self.handler = handler
        self.greeting = (
            encode_frame(greeting or hello()) if not isinstance(greeting, bytes) else greeting
        )
        self.requests: list[tuple[int, Request]] = []
        self.connections = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    def start(self) -> ScriptedPeer:
        self._listener.bind(str(self.path))
        self._listener.listen(16)
        self._listener.settimeout(POLL)
        self._spawn(self._accept_loop)
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in list(self._threads):
            thread.join(timeout=5)
        self._listener.close()
        with suppress(FileNotFoundError):
            self.path.unlink()
        if self.errors:
            raise self.errors[0]

    @property
    def operations(self) -> list[str]:
        return [request.operation for _, request in self.requests]

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=self._guard, args=(target, *args), daemon=True)
        self._threads.append(thread)
        thread.start()

    def _guard(self, target: Callable[..., None], *args: Any) -> None:
        try:
            target(*args)
        except BaseException as exc:  # surfaced by stop(), so a broken script fails its test
            self.errors.append(exc)

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            index = self.connections
            self.connections += 1
            self._spawn(self._serve, conn, index)

    def _serve(self, conn: socket.socket, index: int) -> None:
        with conn:
            conn.settimeout(5)
            try:
                conn.sendall(self.greeting)
            except OSError:
                return
            reader = FrameReader(conn)
            while not self._stop.is_set():
                try:
                    frame = reader.read_frame(timeout=POLL)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if frame is None:
                    return
                request = decode_request(frame)
                self.requests.append((index, request))
                reply = self.handler(index, request)
                if reply.frame is not None:
                    data = (
                        reply.frame if isinstance(reply.frame, bytes) else encode_frame(reply.frame)
                    )
                    try:
                        conn.sendall(data)
                    except OSError:
                        return
                if reply.close:
                    return


@contextmanager
def scripted_peer(
    home: Path, handler: Handler, *, greeting: bytes | Hello | None = None
) -> Iterator[ScriptedPeer]:
    """Run a `ScriptedPeer` on `home`'s socket for the duration of a `with` block."""
    home.mkdir(parents=True, exist_ok=True)
    peer = ScriptedPeer(home / "server.sock", handler, greeting=greeting).start()
    try:
        yield peer
    finally:
        peer.stop()


@contextmanager
def serving(
    home: Path,
    handler: Handler,
    *,
    greeting: bytes | Hello | None = None,
    timeout: float = 5.0,
) -> Iterator[tuple[Client, ScriptedPeer]]:
    """A scripted peer on `home` and a `Client` (auto-start off) talking to it."""
    with (
        scripted_peer(home, handler, greeting=greeting) as peer,
        Client(home, autostart=False, timeout=timeout) as client,
    ):
        yield client, peer
