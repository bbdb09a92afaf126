"""The asyncio Python client: the same surface as `Client` for programs that run an event loop.

Owns `AsyncClient` and `AsyncWatch`. Requests, idempotency keys, retries (the same key,
client id and payload after a lost connection, at most `MAX_RETRIES` times), receipts and
errors are exactly those of the blocking `Client` (`sync_client`, `payloads`); calls on one
`AsyncClient` are serialised on its one connection, so it is safe to share between tasks.
Auto-start runs the blocking `ensure_server` in a worker thread. `wait` and `result`
follow the run through `run.watch` on a second connection and never poll.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import uuid
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from pi_workflows.client.async_connection import AsyncConnection
from pi_workflows.client.autostart import ensure_server
from pi_workflows.client.errors import (
    ConnectionLostError,
    InvalidPayloadError,
    NotFoundError,
    RejectedError,
    RunFailedError,
    ServerProtocolError,
    ServerUnavailableError,
    WaitTimeoutError,
)
from pi_workflows.client.paths import socket_path, state_home
from pi_workflows.client.payloads import (
    SETTLED_STATUSES,
    TERMINAL_STATUSES,
    history_payload,
    list_payload,
    logs_payload,
    start_payload,
)
from pi_workflows.client.sync_client import (
    _RETRY_BACKOFF,
    MAX_RETRIES,
    READ_OPERATIONS,
    JsonObject,
    Receipt,
    _new_key,
    _result,
)
from pi_workflows.protocol import (
    CLIENT_SCHEMA,
    Hello,
    NotJsonError,
    Outcome,
    Request,
    canonical_json,
)

__all__ = ["AsyncClient", "AsyncWatch"]

_WATCH_SLICE: Final = 30.0
_SUBMIT_POLL: Final = 0.2


class AsyncWatch:
    """One connection receiving the pushed views of one run (`run.watch`) or of the run list
    (`runs.watch`); an async context manager and an async iterator of views."""

    def __init__(self, connection: AsyncConnection, run_id: str | None) -> None:
        self._connection = connection
        self.run_id = run_id
        self.gone = False
        """True once the watched run was removed (retention)."""
        self.view: JsonObject | None = None

    async def next_view(self, timeout: float | None) -> JsonObject | None:
        """The next pushed view within `timeout` seconds, or None (none came, or `gone`)."""
        if self.gone:
            return None
        event = await self._connection.next_event(timeout)
        if event is None:
            return None
        if event.name == "run.gone":
            self.gone = True
            return None
        self.view = dict(event.payload)
        return self.view

    def __aiter__(self) -> AsyncWatch:
        return self

    async def __anext__(self) -> JsonObject:
        while True:
            view = await self.next_view(None)
            if self.gone:
                raise StopAsyncIteration
            if view is not None:
                return view

    async def close(self) -> None:
        """Close the watch connection."""
        await self._connection.close()

    async def __aenter__(self) -> AsyncWatch:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class AsyncClient:
    """An asyncio client for one state directory's server; arguments as for `Client`.

    Use it as `async with AsyncClient() as client:`, or call `await close()`.
    """

    def __init__(
        self,
        home: Path | str | None = None,
        *,
        client_id: str | None = None,
        autostart: bool = True,
        timeout: float = 30.0,
        start_timeout: float = 15.0,
    ) -> None:
        self.home: Final = Path(home).expanduser().absolute() if home else state_home()
        self.socket_path: Final = socket_path(self.home)
        self.client_id: Final = client_id or f"py-{uuid.uuid4()}"
        self.autostart = autostart
        self.timeout = timeout
        self.start_timeout = start_timeout
        self._connection: AsyncConnection | None = None
        self._lock = asyncio.Lock()

    # -- connection ---------------------------------------------------------------------

    async def connect(self) -> Hello:
        """Connect now (starting a server if allowed) and return its hello."""
        async with self._lock:
            return (await self._ensure_connection()).hello

    async def _open(self) -> AsyncConnection:
        try:
            return await AsyncConnection.open(self.socket_path, timeout=self.start_timeout)
        except ServerUnavailableError as exc:
            if not (self.autostart and exc.startable):
                raise
        await asyncio.to_thread(ensure_server, self.home, timeout=self.start_timeout)
        return await AsyncConnection.open(self.socket_path, timeout=self.start_timeout)

    async def _ensure_connection(self) -> AsyncConnection:
        if self._connection is None or self._connection.closed:
            self._connection = await self._open()
        return self._connection

    async def close(self) -> None:
        """Close the connection; the client reconnects on its next call."""
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- the generic call -------------------------------------------------------------

    async def call(
        self,
        operation: str,
        payload: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        *,
        expected_revision: int | None = None,
    ) -> Receipt:
        """Send one operation and return its receipt; the same rules as `Client.call`."""
        body = dict(payload or {})
        try:
            canonical_json(body)
        except NotJsonError as exc:
            raise InvalidPayloadError(operation, exc.path, exc.reason) from None
        if idempotency_key is None and operation not in READ_OPERATIONS:
            idempotency_key = _new_key()
        lost: ConnectionLostError | None = None
        for attempt in range(MAX_RETRIES + 1):
            if attempt:
                await asyncio.sleep(_RETRY_BACKOFF[min(attempt - 1, len(_RETRY_BACKOFF) - 1)])
            request = Request(
                schema=CLIENT_SCHEMA,
                request_id=f"req-{uuid.uuid4().hex}",
                client_id=self.client_id,
                operation=operation,
                idempotency_key=idempotency_key,
                run_id=run_id,
                expected_revision=expected_revision,
                payload=body,
            )
            async with self._lock:
                try:
                    connection = await self._ensure_connection()
                    response = await connection.exchange(request, timeout=self.timeout)
                except ConnectionLostError as exc:
                    await self.close()
                    lost = exc
                    continue
            return _result(operation, request, response)
        assert lost is not None
        raise ConnectionLostError(
            lost.reason, operation=operation, attempts=MAX_RETRIES + 1,
            idempotency_key=idempotency_key,
        )  # fmt: skip

    # -- server and runs ----------------------------------------------------------------

    async def status(self) -> JsonObject:
        """`server.status`."""
        return (await self.call("server.status")).body

    async def start(
        self,
        workflow: str,
        input: Any = None,
        *,
        project: Path | str | None = None,
        session: str | None = None,
        detached: bool = False,
        idempotency_key: str | None = None,
    ) -> str:
        """Start `workflow` with `input`; its run id (see `Client.start`)."""
        payload = start_payload(workflow, input, project, session, detached)
        receipt = await self.call("run.start", payload, idempotency_key=idempotency_key)
        return str(receipt["runId"])

    async def get_run(self, run_id: str) -> JsonObject:
        """`run.get`: the run's `RunView`."""
        run = (await self.call("run.get", run_id=run_id)).body.get("run")
        return dict(run) if isinstance(run, dict) else {}

    async def list_runs(
        self,
        status: Iterable[str] | str | None = None,
        *,
        workflow: str | None = None,
        since: int | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> tuple[list[JsonObject], str | None]:
        """One page of `run.list` (newest first) and the next page's cursor, or None."""
        body = (
            await self.call("run.list", list_payload(status, workflow, since, after, limit))
        ).body
        cursor = body.get("next")
        return list(body.get("runs", [])), None if cursor is None else str(cursor)

    async def pause(self, run_id: str, *, idempotency_key: str | None = None) -> Receipt:
        """`run.pause`."""
        return await self.call("run.pause", run_id=run_id, idempotency_key=idempotency_key)

    async def resume(self, run_id: str, *, idempotency_key: str | None = None) -> Receipt:
        """`run.resume`."""
        return await self.call("run.resume", run_id=run_id, idempotency_key=idempotency_key)

    async def cancel(
        self, run_id: str, reason: str | None = None, *, idempotency_key: str | None = None
    ) -> Receipt:
        """`run.cancel`, with an optional reason."""
        payload = {} if reason is None else {"reason": reason}
        return await self.call(
            "run.cancel", payload, run_id=run_id, idempotency_key=idempotency_key
        )

    async def restart(self, run_id: str, *, idempotency_key: str | None = None) -> Receipt:
        """`run.restart`."""
        return await self.call("run.restart", run_id=run_id, idempotency_key=idempotency_key)

    async def answer_checkpoint(
        self,
        run_id: str,
        value: Any,
        request_id: str | None = None,
        *,
        idempotency_key: str | None = None,
        wait: float = 120.0,
    ) -> Receipt:
        """`checkpoint.answer`, held until the answer's validation settled (see `Client`)."""
        payload: JsonObject = {"value": value}
        if request_id is not None:
            payload["requestId"] = request_id
        return await self._until_validated(
            "checkpoint.answer", payload, run_id, idempotency_key or _new_key(), wait
        )

    async def submit(
        self,
        request_id: str,
        output: Any,
        *,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        wait: float = 120.0,
    ) -> Receipt:
        """`interaction.submit`, held until the submission's validation settled."""
        payload: JsonObject = {"requestId": request_id, "output": output}
        return await self._until_validated(
            "interaction.submit", payload, run_id, idempotency_key or _new_key(), wait
        )

    async def _until_validated(
        self, operation: str, payload: JsonObject, run_id: str | None, key: str, wait: float
    ) -> Receipt:
        loop = asyncio.get_running_loop()
        until = loop.time() + wait
        while True:
            receipt = await self.call(operation, payload, run_id=run_id, idempotency_key=key)
            if receipt.get("status") != "validating" or loop.time() >= until:
                return receipt
            await asyncio.sleep(_SUBMIT_POLL)

    async def answer_decision(
        self,
        run_id: str,
        choice: str,
        request_id: str | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """`decision.answer`: choose `choice` in the run's pending human decision."""
        payload: JsonObject = {"choice": choice}
        if request_id is not None:
            payload["requestId"] = request_id
        return await self.call(
            "decision.answer", payload, run_id=run_id, idempotency_key=idempotency_key
        )

    # -- what a run did ---------------------------------------------------------------

    async def history(self, run_id: str, *, after: int = 0) -> list[JsonObject]:
        """The run's events after revision `after`, oldest first (every page)."""
        events: list[JsonObject] = []
        while True:
            body = (
                await self.call("run.history", history_payload(after, None), run_id=run_id)
            ).body
            events.extend(body.get("events", []))
            if body.get("next") is None:
                return events
            after = int(body["next"])

    async def logs(self, run_id: str, *, node: str | None = None) -> list[JsonObject]:
        """Every attempt's captured output (of one `node`), oldest first."""
        found: list[JsonObject] = []
        after = 0
        while True:
            body = (await self.call("run.logs", logs_payload(node, after), run_id=run_id)).body
            found.extend(body.get("logs", []))
            if body.get("next") is None:
                return found
            after = int(body["next"])

    async def read_value(self, ref: Mapping[str, Any]) -> Any:
        """The value behind a `*Ref`, read in chunks and checked against its digest."""
        digest, size = str(ref["digest"]), int(ref["bytes"])
        data = bytearray()
        while len(data) < size:
            chunk = (await self.call("blob.read", {"digest": digest, "offset": len(data)})).body
            piece = base64.b64decode(str(chunk.get("data", "")))
            if not piece:
                break
            data += piece
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            raise ServerProtocolError(f"the stored value {digest} does not match its digest")
        return json.loads(data)

    # -- following runs ---------------------------------------------------------------

    async def watch_run(self, run_id: str) -> AsyncWatch:
        """`run.watch` on a connection of its own (use with `async with`)."""
        return await self._watch("run.watch", run_id, {})

    async def watch_runs(
        self, status: Iterable[str] | str | None = None, *, limit: int = 100
    ) -> AsyncWatch:
        """`runs.watch`: pushed `{runs, counts}` views of the newest matching runs."""
        return await self._watch("runs.watch", None, list_payload(status, None, None, None, limit))

    async def _watch(self, operation: str, run_id: str | None, payload: JsonObject) -> AsyncWatch:
        await self.connect()
        connection = await AsyncConnection.open(self.socket_path, timeout=self.start_timeout)
        request = Request(
            schema=CLIENT_SCHEMA,
            request_id=f"req-{uuid.uuid4().hex}",
            client_id=self.client_id,
            operation=operation,
            run_id=run_id,
            payload=payload,
        )
        response = await connection.exchange(request, timeout=self.timeout)
        if not response.ok:
            await connection.close()
            code = response.error.code if response.error else str(response.outcome)
            message = response.error.message if response.error else f"{operation} was refused"
            error = NotFoundError if response.outcome is Outcome.NOT_FOUND else RejectedError
            raise error(message, code=code, operation=operation, run_id=run_id)
        return AsyncWatch(connection, run_id)

    async def wait(
        self,
        run_id: str,
        *,
        timeout: float | None = None,
        until: Collection[str] = SETTLED_STATUSES,
    ) -> JsonObject:
        """Wait until the run's status is in `until`; that `RunView` (see `Client.wait`)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        status = "unknown"
        async with await self.watch_run(run_id) as watch:
            while True:
                left = _WATCH_SLICE if deadline is None else deadline - loop.time()
                if left <= 0:
                    assert timeout is not None
                    raise WaitTimeoutError(run_id, status, timeout)
                pushed = await watch.next_view(left)
                if watch.gone:
                    raise NotFoundError(
                        f"run {run_id} was removed", code="notFound", operation="run.watch"
                    )
                if pushed is not None:
                    view = dict(pushed["run"])
                    status = str(view.get("status"))
                    if status in until:
                        return view

    async def result(self, run_id: str, *, timeout: float | None = None) -> Any:
        """Wait until the run ends and return its output (see `Client.result`)."""
        view = await self.wait(run_id, timeout=timeout, until=TERMINAL_STATUSES)
        status = str(view.get("status"))
        if status != "completed":
            raise RunFailedError(run_id, status, view.get("error"), view)
        ref = view.get("outputRef")
        return await self.read_value(ref) if isinstance(ref, dict) else view.get("output")
