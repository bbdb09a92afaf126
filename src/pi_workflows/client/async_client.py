"""The asyncio Python client: the same surface as `Client` for programs that run an event loop.

Owns `AsyncClient`. Requests, idempotency keys, retries (the same key, client id and payload
after a lost connection, at most `MAX_RETRIES` times), receipts and errors are exactly those
of the blocking `Client`: both run the same programs of `operations` and build requests with
`sync_client.request_for`. Every method of `Client` is here with the same name, arguments
and result, awaitable (`tests/client/test_surface.py` keeps it so). Calls on one
`AsyncClient` are serialised on its one connection, so it is safe to share between tasks.
Auto-start runs the blocking `ensure_server` in a worker thread, and so does waiting for a
stopped server to exit.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from pi_workflows.client import operations as ops
from pi_workflows.client.async_connection import AsyncConnection
from pi_workflows.client.autostart import ensure_server
from pi_workflows.client.errors import (
    ConnectionLostError,
    ServerUnavailableError,
    StopTimeoutError,
    UnavailableError,
)
from pi_workflows.client.interactions import AsyncInteractionMethods
from pi_workflows.client.operations import Call, JsonObject, Program, Receipt, T, new_key
from pi_workflows.client.paths import socket_path, state_home
from pi_workflows.client.payloads import absolute
from pi_workflows.client.run_methods import AsyncRunMethods
from pi_workflows.client.schedule_methods import AsyncScheduleMethods
from pi_workflows.client.sync_client import (
    MAX_RETRIES,
    RETRY_BACKOFF,
    SERVER_STOPPING,
    checked_key,
    request_for,
    server_process,
    stop_drain,
    stopping_receipt,
    wait_gone,
)
from pi_workflows.client.watch import AsyncWatch
from pi_workflows.protocol import Hello

__all__ = ["AsyncClient", "AsyncWatch"]


class AsyncClient(AsyncInteractionMethods, AsyncRunMethods, AsyncScheduleMethods):
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
        self.started_server = False
        """True once this client has spawned a server (auto-start found none answering)."""

    # -- connection ---------------------------------------------------------------------

    @property
    def hello(self) -> Hello | None:
        """The current connection's hello (server pid, epoch, version), if connected."""
        return self._connection.hello if self._connection is not None else None

    async def connect(self, *, autostart: bool | None = None) -> Hello:
        """Connect now (starting a server if allowed) and return its hello."""
        async with self._lock:
            chosen = self.autostart if autostart is None else autostart
            return (await self._ensure_connection(chosen)).hello

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
        return await self._call(
            operation,
            dict(payload or {}),
            run_id=run_id,
            idempotency_key=idempotency_key,
            expected_revision=expected_revision,
            autostart=self.autostart,
        )

    async def _run(self, program: Program[T]) -> T:
        """Run one program of `operations` with this client's calls."""

        async def send(step: Call) -> Receipt:
            return await self.call(step.operation, step.payload, step.run_id, step.idempotency_key)

        return await ops.run_async(program, send)

    # -- server -----------------------------------------------------------------------

    async def status(self) -> JsonObject:
        """`server.status`: pid, epoch, runners, runs by status, claims, interactions."""
        return await self._run(ops.body("server.status"))

    async def stop(
        self, *, wait: bool = True, timeout: float = 30.0, drain: float | None = None
    ) -> Receipt:
        """`server.stop`: ask the server to stop (never starts one); see `Client.stop`."""
        async with self._lock:
            hello = (await self._ensure_connection(False)).hello
        process = server_process(hello)
        key = new_key()
        try:
            receipt = await self._call(
                "server.stop",
                {} if drain is None else {"drainSeconds": drain},
                run_id=None,
                idempotency_key=key,
                expected_revision=None,
                autostart=False,
            )
        except (ServerUnavailableError, ConnectionLostError, UnavailableError):
            receipt = stopping_receipt(key)  # gone, or already stopping: the stop is in effect
        await self.close()
        limit = timeout + stop_drain(receipt)
        gone = (
            True
            if not wait or process is None
            else await asyncio.to_thread(wait_gone, process, limit)
        )
        if not gone:
            raise StopTimeoutError(hello.server_pid, limit)
        return receipt

    # -- workflows and runs -----------------------------------------------------------

    async def list_workflows(self, project_dir: Path | str | None = None) -> list[JsonObject]:
        """`workflows.list` (see `Client.list_workflows`)."""
        return await self._run(ops.list_workflows(project_dir))

    async def start_run(
        self,
        workflow: str,
        input: Any = None,
        project_dir: Path | str | None = None,
        idempotency_key: str | None = None,
        *,
        origin_session: str | None = None,
        detached: bool = False,
        env: Mapping[str, str] | None = None,
        deadline: float | timedelta | None = None,
    ) -> Receipt:
        """`run.start`; the receipt (see `Client.start_run`)."""
        return await self._run(
            ops.start_run(
                workflow,
                input,
                project_dir,
                idempotency_key,
                origin_session,
                detached,
                env,
                deadline,
            )
        )

    async def list_runs(
        self, status: Iterable[str] | str | None = None, limit: int | None = None
    ) -> list[JsonObject]:
        """`run.list`: the first page of run summaries, newest first (see `Client.list_runs`)."""
        return await self._run(ops.list_runs(status, limit))

    async def get_run(self, run_id: str) -> JsonObject:
        """`run.get`: the run's `RunView`."""
        return await self._run(ops.get_run(run_id))

    async def read_value(self, ref: Mapping[str, Any]) -> Any:
        """The value behind a `*Ref`, read in chunks and checked against its digest."""
        return await self._run(ops.read_value(ref))

    async def get_run_complete(self, run_id: str) -> JsonObject:
        """`run.get` with every value sent by reference (`inputRef`, `outputRef`) read in."""
        return await self._run(ops.get_run_complete(run_id))

    async def pause(
        self, run_id: str, reason: str | None = None, *, idempotency_key: str | None = None
    ) -> Receipt:
        """`run.pause`: park the run with `userPaused` (and `reason` as its detail)."""
        payload: JsonObject = {} if reason is None else {"reason": reason}
        return await self.call("run.pause", payload, run_id=run_id, idempotency_key=idempotency_key)

    async def resume(self, run_id: str, *, idempotency_key: str | None = None) -> Receipt:
        """`run.resume`: continue a paused or parked run."""
        return await self.call("run.resume", run_id=run_id, idempotency_key=idempotency_key)

    async def cancel(
        self, run_id: str, reason: str | None = None, *, idempotency_key: str | None = None
    ) -> Receipt:
        """`run.cancel`: end the run as cancelled, with an optional reason."""
        payload: JsonObject = {} if reason is None else {"reason": reason}
        return await self.call(
            "run.cancel", payload, run_id=run_id, idempotency_key=idempotency_key
        )

    async def restart(self, run_id: str, *, idempotency_key: str | None = None) -> Receipt:
        """`run.restart`: run the workflow again from its start as a new generation."""
        return await self.call("run.restart", run_id=run_id, idempotency_key=idempotency_key)

    async def fork(
        self,
        run_id: str,
        node: str,
        *,
        visit: int | None = None,
        input: Any = None,
        session: str | None = None,
        detached: bool | None = None,
        idempotency_key: str | None = None,
        outputs: Mapping[str, Any] | None = None,
    ) -> Receipt:
        """`run.fork`: a new run starting at `node` of `run_id` (see `Client.fork`)."""
        return await self._run(
            ops.fork(run_id, node, visit, input, session, detached, idempotency_key, outputs)
        )

    async def retry(
        self,
        run_id: str,
        *,
        session: str | None = None,
        detached: bool | None = None,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """`run.retry`: a fork from the node whose failure ended `run_id` (see `Client.retry`)."""
        payload = ops.placement_payload(session, detached)
        return await self.call("run.retry", payload, run_id=run_id, idempotency_key=idempotency_key)

    async def upgrade(
        self, run_id: str, *, dry_run: bool = False, idempotency_key: str | None = None
    ) -> Receipt:
        """`run.upgrade`: continue a parked run on current code (see `Client.upgrade`)."""
        payload: JsonObject = {"dryRun": True} if dry_run else {}
        return await self.call(
            "run.upgrade", payload, run_id=run_id, idempotency_key=idempotency_key
        )

    async def signal(
        self,
        run_id: str,
        name: str,
        data: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """`run.signal`: send the event `name` to the run (see `Client.signal`)."""
        payload = ops.signal_payload(name, data, idempotency_key)
        return await self.call("run.signal", payload, run_id=run_id)

    async def settings(self, run_id: str) -> JsonObject:
        """`run.settings`: the run's live settings (see `Client.settings`)."""
        return (await self.call("run.settings", None, run_id=run_id)).body

    async def change_settings(
        self,
        run_id: str,
        patch: list[Any],
        *,
        expect_change: int | None = None,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """`run.changeSettings`: change the run's settings (see `Client.change_settings`)."""
        payload = ops.settings_payload(patch, expect_change)
        return await self.call(
            "run.changeSettings", payload, run_id=run_id, idempotency_key=idempotency_key
        )

    async def follow_up(
        self, run_id: str, text: str, *, idempotency_key: str | None = None
    ) -> Receipt:
        """`run.followUp`: queue a follow-up prompt (see `Client.follow_up`)."""
        return await self.call(
            "run.followUp", {"text": text}, run_id=run_id, idempotency_key=idempotency_key
        )

    async def follow_ups(self, run_id: str) -> JsonObject:
        """`run.followUps`: the run's follow-ups in queue order."""
        return (await self.call("run.followUps", None, run_id=run_id)).body

    async def remove_follow_up(
        self,
        follow_up_id: str,
        *,
        run_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """`run.removeFollowUp`: remove a queued follow-up (see `Client.remove_follow_up`)."""
        return await self.call(
            "run.removeFollowUp",
            {"followUpId": follow_up_id},
            run_id=run_id,
            idempotency_key=idempotency_key,
        )

    async def answer_checkpoint(
        self,
        run_id: str,
        value: Any,
        request_id: str | None = None,
        *,
        idempotency_key: str | None = None,
        wait: float | None = 120.0,
        child: str | None = None,
    ) -> Receipt:
        """`checkpoint.answer`, held until the answer's validation settled (see `Client`)."""
        return await self._run(
            ops.answer_checkpoint(run_id, value, request_id, idempotency_key, wait, child)
        )

    async def answer_decision(
        self,
        run_id: str,
        choice: str,
        request_id: str | None = None,
        *,
        idempotency_key: str | None = None,
        child: str | None = None,
        person: str | None = None,
    ) -> Receipt:
        """`decision.answer`: choose `choice` in the run's pending human decision (see
        `Client.answer_decision`)."""
        return await self._run(
            ops.answer_decision(run_id, choice, request_id, idempotency_key, child, person)
        )

    # -- effects ----------------------------------------------------------------------

    async def list_effects(self, run_id: str | None = None) -> list[JsonObject]:
        """`effect.list`: the managed effects of one run, or of every run (every page)."""
        return await self._run(ops.list_effects(run_id))

    async def resolve_effect(
        self,
        effect_id: str,
        resolution: str,
        *,
        result: Any = None,
        reason: str | None = None,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """`effect.resolve`: settle an ambiguous effect as `applied`, `rejected` or `retry`."""
        return await self._run(
            ops.resolve_effect(effect_id, resolution, result, reason, idempotency_key)
        )

    async def get_effect(self, effect_id: str) -> JsonObject:
        """`effect.get`: the effect as `list_effects` gives it, with `evidence`: what its
        runner left on disk about its body when its report was lost (null unless it is
        ambiguous and there is some)."""
        return await self._run(ops.get_effect(effect_id))

    async def resolve_effect_from_evidence(
        self, effect_id: str, *, idempotency_key: str | None = None
    ) -> Receipt:
        """`effect.resolve` with `fromEvidence`: settle the ambiguous effect as the evidence
        its runner left says (applied with its result, or rejected with its error); refused
        (`noEvidence`) when there is none."""
        return await self._run(ops.resolve_effect_from_evidence(effect_id, idempotency_key))

    # -- state ------------------------------------------------------------------------

    async def diagnose(self, *, full: bool = False) -> list[JsonObject]:
        """`state.diagnose`: the problems found, each `{code, runId, message, repairable}`;
        a damaged file is `stateFileDamaged` (SQLite's `quick_check`; `full`: its whole
        `integrity_check`)."""
        return await self._run(ops.diagnose(full))

    async def repair(self, *, idempotency_key: str | None = None) -> Receipt:
        """`state.repair`: fix what has exact evidence; receipt `{fixed, remaining}`."""
        return await self.call("state.repair", idempotency_key=idempotency_key)

    async def backup(self, path: Path | str, *, idempotency_key: str | None = None) -> Receipt:
        """`state.backup`: write a verified copy of the database to `path` (made absolute)."""
        return await self.call(
            "state.backup", {"path": absolute(path)}, idempotency_key=idempotency_key
        )

    # -- internals --------------------------------------------------------------------

    async def _open(self, autostart: bool) -> AsyncConnection:
        try:
            return await AsyncConnection.open(self.socket_path, timeout=self.start_timeout)
        except ServerUnavailableError as exc:
            if not (autostart and exc.startable):
                raise
        info = await asyncio.to_thread(ensure_server, self.home, timeout=self.start_timeout)
        self.started_server = self.started_server or info.started
        return await AsyncConnection.open(self.socket_path, timeout=self.start_timeout)

    async def _ensure_connection(self, autostart: bool) -> AsyncConnection:
        if self._connection is None or self._connection.closed:
            self._connection = await self._open(autostart)
        return self._connection

    async def _call(
        self,
        operation: str,
        payload: JsonObject,
        *,
        run_id: str | None,
        idempotency_key: str | None,
        expected_revision: int | None,
        autostart: bool,
    ) -> Receipt:
        idempotency_key = checked_key(operation, payload, idempotency_key)
        lost: ConnectionLostError | None = None
        for attempt in range(MAX_RETRIES + 1):
            if attempt:
                await asyncio.sleep(RETRY_BACKOFF[min(attempt - 1, len(RETRY_BACKOFF) - 1)])
            request = request_for(
                self.client_id,
                operation,
                payload,
                run_id=run_id,
                idempotency_key=idempotency_key,
                expected_revision=expected_revision,
            )
            async with self._lock:
                try:
                    connection = await self._ensure_connection(autostart)
                    response = await connection.exchange(request, timeout=self.timeout)
                except ConnectionLostError as exc:
                    await self.close()
                    lost = exc
                    continue
            try:
                return ops.receipt_of(operation, request, response)
            except UnavailableError as exc:
                if exc.code != SERVER_STOPPING or not autostart or attempt == MAX_RETRIES:
                    raise  # without auto-start nobody brings the next server up
                stopping = server_process(connection.hello)
                await self.close()  # the next server answers the same command (same key)
                if stopping is not None:  # it drains its runs first: wait until it has gone
                    await asyncio.to_thread(wait_gone, stopping, self.timeout)
                lost = ConnectionLostError(exc.message, operation=operation)
        assert lost is not None
        raise ConnectionLostError(
            lost.reason,
            operation=operation,
            attempts=MAX_RETRIES + 1,
            idempotency_key=idempotency_key,
        )
