"""The blocking Python client: one method per client-protocol v1 operation, with durable retries.

Owns building requests (request ids, the client id, idempotency keys), the retry policy, and
turning outcomes into `Receipt`s or `CommandError`s. A state-changing call always carries an
idempotency key (a fresh uuid4 unless the caller gives one); when the connection is lost before
the reply arrives, the SAME key, client id and payload are sent again with a new request id, so
a command that had committed is adopted instead of applied twice. It never interprets run
state (that is the server's) and never reads the database.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import psutil

from pi_workflows.client.autostart import connect_or_start
from pi_workflows.client.connection import Connection
from pi_workflows.client.errors import (
    ClaimLostError,
    CommandError,
    ConflictError,
    ConnectionLostError,
    InvalidPayloadError,
    NotFoundError,
    RejectedError,
    ServerProtocolError,
    ServerUnavailableError,
    StopTimeoutError,
    UnavailableError,
)
from pi_workflows.client.interactions import InteractionMethods
from pi_workflows.client.paths import socket_path, state_home
from pi_workflows.client.run_methods import RunMethods
from pi_workflows.protocol import (
    CLIENT_SCHEMA,
    Hello,
    NotJsonError,
    Outcome,
    Request,
    Response,
    canonical_json,
)

__all__ = ["MAX_RETRIES", "READ_OPERATIONS", "Client", "JsonObject", "Receipt"]

JsonObject = dict[str, Any]
"""A decoded JSON object as the server sent it (camelCase keys)."""

MAX_RETRIES: Final = 3
"""How many times a request is sent again after a lost connection (so at most 4 sends)."""

READ_OPERATIONS: Final = frozenset(
    {
        "server.status",
        "workflows.list",
        "run.list",
        "run.get",
        "state.diagnose",
        "effect.list",
        "blob.read",
        "interaction.list",
        "session.get",
        "session.watch",
        "workflowMessage.report",
        "workflowTurn.report",
        "run.history",
        "run.logs",
        "run.output",
        "run.watch",
        "runs.watch",
        "workflows.show",
        "workflows.check",
    }
)
"""Operations sent without an idempotency key: reads, and the idempotent session reports.
Everything else carries one."""

_RETRY_BACKOFF: Final = (0.05, 0.1, 0.2)
_STOP_POLL: Final = 0.02

_ERROR_TYPES: Final[dict[Outcome, type[CommandError]]] = {
    Outcome.REJECTED: RejectedError,
    Outcome.CONFLICT: ConflictError,
    Outcome.NOT_FOUND: NotFoundError,
    Outcome.UNAVAILABLE: UnavailableError,
    Outcome.CLAIM_LOST: ClaimLostError,
}


@dataclass(frozen=True)
class Receipt:
    """A successful answer: the command committed (or the read succeeded).

    `body` is the server's receipt object, e.g. `{"runId": ..., "status": ..., "revision": ...}`;
    `receipt["runId"]` reads from it.
    """

    operation: str
    outcome: Outcome
    """`accepted` (done now) or `adopted` (a retry of a command that had committed before)."""
    revision: int | None
    """The run revision after the command, when it concerns a run."""
    body: JsonObject = field(default_factory=dict)
    idempotency_key: str | None = None
    """The key the command was sent with (None for reads); reuse it to retry safely."""

    @property
    def adopted(self) -> bool:
        """True when the server returned the stored receipt of an earlier, committed try."""
        return self.outcome is Outcome.ADOPTED

    def __getitem__(self, key: str) -> Any:
        return self.body[key]

    def get(self, key: str, default: Any = None) -> Any:
        """`body.get(key, default)`."""
        return self.body.get(key, default)


class Client(InteractionMethods, RunMethods):
    """A blocking client for one state directory's server. Not thread-safe.

    Args:
        home: the state directory; default `state_home()` (the `PI_WORKFLOWS_HOME` rule).
        client_id: names this client for receipts; default `py-<uuid4>`, new per instance.
            Reuse an id (with the same idempotency key) to retry a command across processes.
        autostart: start a server when none answers (not for `stop`, which never starts one).
        timeout: seconds to wait for each reply before treating the connection as lost.
        start_timeout: seconds to wait for a server to connect to or to start.

    Use it as a context manager, or call `close()`, to release the connection.
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
        self._connection: Connection | None = None
        self.started_server = False
        """True once this client has spawned a server (auto-start found none answering)."""

    # -- connection ---------------------------------------------------------------------

    @property
    def hello(self) -> Hello | None:
        """The current connection's hello (server pid, epoch, version), if connected."""
        return self._connection.hello if self._connection is not None else None

    def connect(self, *, autostart: bool | None = None) -> Hello:
        """Connect now (starting a server if allowed) and return its hello.

        Raises:
            ServerUnavailableError: nobody answers and auto-start is off.
            ServerStartError, ProtocolMismatchError: see `ensure_server`.
        """
        return self._ensure_connection(self.autostart if autostart is None else autostart).hello

    def close(self) -> None:
        """Close the connection, if any; the client reconnects on its next call."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the generic call -------------------------------------------------------------

    def call(
        self,
        operation: str,
        payload: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        *,
        expected_revision: int | None = None,
    ) -> Receipt:
        """Send one operation and return its receipt, retrying a lost connection.

        Reads (`READ_OPERATIONS`) carry no key unless one is given; every other operation
        carries `idempotency_key`, or a fresh uuid4 key. Retries (at most `MAX_RETRIES`)
        reuse the key, the client id and the payload with a new request id.

        Raises:
            RejectedError, ConflictError, NotFoundError, UnavailableError, ClaimLostError:
                the server refused (see `client.errors`).
            ConnectionLostError: the connection broke on every attempt.
            ServerUnavailableError, ServerStartError, ProtocolMismatchError,
            ServerProtocolError, RequestTooLargeError, InvalidPayloadError.
        """
        return self._call(
            operation,
            dict(payload or {}),
            run_id=run_id,
            idempotency_key=idempotency_key,
            expected_revision=expected_revision,
            autostart=self.autostart,
        )

    # -- server -----------------------------------------------------------------------

    def status(self) -> JsonObject:
        """`server.status`: pid, epoch, runners, runs by status, claims, interactions."""
        return self.call("server.status").body

    def stop(self, *, wait: bool = True, timeout: float = 30.0) -> Receipt:
        """`server.stop`: ask the server to stop; never starts one.

        With `wait`, return only once the server process has exited (at most `timeout`
        seconds), so a new server can start on the same state directory at once. If the
        connection drops after the request was sent and no server answers any more, the stop
        took effect: the receipt is then `{"stopping": true}` with outcome `adopted`.

        Raises:
            ServerUnavailableError: no server was running.
            StopTimeoutError: `wait` and the server was still running after `timeout`.

        A server that answers `unavailable` is already stopping; that counts as success.
        """
        hello = self._ensure_connection(autostart=False).hello
        # A server embedded in this very process cannot be waited for from here.
        process = _process(hello.server_pid) if hello.server_pid != os.getpid() else None
        key = _new_key()
        try:
            receipt = self._call(
                "server.stop",
                {},
                run_id=None,
                idempotency_key=key,
                expected_revision=None,
                autostart=False,
            )
        except (ServerUnavailableError, ConnectionLostError, UnavailableError):
            # Gone, or already stopping: either way the stop is in effect.
            receipt = Receipt("server.stop", Outcome.ADOPTED, None, {"stopping": True}, key)
        self.close()
        if wait and process is not None and not _wait_gone(process, timeout):
            raise StopTimeoutError(hello.server_pid, timeout)
        return receipt

    # -- workflows and runs -----------------------------------------------------------

    def list_workflows(self, project_dir: Path | str | None = None) -> list[JsonObject]:
        """`workflows.list`: the workflows visible from `project_dir` (made absolute)."""
        payload: JsonObject = {}
        if project_dir is not None:
            payload["projectDir"] = _absolute(project_dir)
        return list(self.call("workflows.list", payload).body.get("workflows", []))

    def start_run(
        self,
        workflow: str,
        input: Any = None,
        project_dir: Path | str | None = None,
        idempotency_key: str | None = None,
        *,
        origin_session: str | None = None,
        detached: bool = False,
    ) -> Receipt:
        """`run.start`: start `workflow` (a name, `builtin:NAME` or a file path) with `input`.

        `input` defaults to `{}`; `origin_session` names the Pi session that presents the
        run's requests and messages; `detached` runs them in a headless Pi the server runs.
        The receipt holds `runId`, `workflow`, `originSession` and `revision`.
        """
        payload: JsonObject = {"workflow": workflow, "input": {} if input is None else input}
        if project_dir is not None:
            payload["projectDir"] = _absolute(project_dir)
        if origin_session is not None:
            payload["originSession"] = origin_session
        if detached:
            payload["detached"] = True
        return self.call("run.start", payload, idempotency_key=idempotency_key)

    def list_runs(
        self, status: Iterable[str] | str | None = None, limit: int | None = None
    ) -> list[JsonObject]:
        """`run.list`: run summaries, newest first, optionally filtered by status."""
        payload: JsonObject = {}
        if status is not None:
            payload["status"] = [status] if isinstance(status, str) else list(status)
        if limit is not None:
            payload["limit"] = limit
        return list(self.call("run.list", payload).body.get("runs", []))

    def get_run(self, run_id: str) -> JsonObject:
        """`run.get`: the run's `RunView` (see docs/protocol.md)."""
        run = self.call("run.get", run_id=run_id).body.get("run")
        return dict(run) if isinstance(run, dict) else {}

    def read_value(self, ref: Mapping[str, Any]) -> Any:
        """The value behind a `*Ref` (`{digest, bytes}`) of a view, read with `blob.read` in
        chunks and checked against its digest."""
        digest, size = str(ref["digest"]), int(ref["bytes"])
        data = bytearray()
        while len(data) < size:
            chunk = self.call("blob.read", {"digest": digest, "offset": len(data)}).body
            piece = base64.b64decode(str(chunk.get("data", "")))
            if not piece:
                break
            data += piece
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            raise ServerProtocolError(f"the stored value {digest} does not match its digest")
        return json.loads(data)

    def get_run_complete(self, run_id: str) -> JsonObject:
        """`run.get` with every value sent by reference (`inputRef`, `outputRef`) read in."""
        view = self.get_run(run_id)
        for name in ("input", "output"):
            ref = view.get(f"{name}Ref")
            if isinstance(ref, dict):
                view[name] = self.read_value(ref)
                view[f"{name}Ref"] = None
        return view

    def pause(self, run_id: str, *, idempotency_key: str | None = None) -> Receipt:
        """`run.pause`: park the run with `userPaused`; receipt `{runId, status, revision}`."""
        return self.call("run.pause", run_id=run_id, idempotency_key=idempotency_key)

    def resume(self, run_id: str, *, idempotency_key: str | None = None) -> Receipt:
        """`run.resume`: continue a paused or parked run."""
        return self.call("run.resume", run_id=run_id, idempotency_key=idempotency_key)

    def cancel(
        self, run_id: str, reason: str | None = None, *, idempotency_key: str | None = None
    ) -> Receipt:
        """`run.cancel`: end the run as cancelled, with an optional reason."""
        payload: JsonObject = {} if reason is None else {"reason": reason}
        return self.call("run.cancel", payload, run_id=run_id, idempotency_key=idempotency_key)

    def restart(self, run_id: str, *, idempotency_key: str | None = None) -> Receipt:
        """`run.restart`: run the workflow again from its start as a new generation."""
        return self.call("run.restart", run_id=run_id, idempotency_key=idempotency_key)

    def answer_checkpoint(
        self,
        run_id: str,
        value: Any,
        request_id: str | None = None,
        *,
        idempotency_key: str | None = None,
        wait: float = 120.0,
    ) -> Receipt:
        """`checkpoint.answer`: answer the run's pending checkpoint with a JSON `value`.

        The answer is validated like a submission (`validate` of the node, in a runner):
        returns once it is accepted (or still `validating` after `wait` seconds); raises
        `RejectedError` with code `validationRejected` when it was refused.
        """
        payload: JsonObject = {"value": value}
        if request_id is not None:
            payload["requestId"] = request_id
        key = idempotency_key or _new_key()
        until = time.monotonic() + wait
        while True:
            receipt = self.call("checkpoint.answer", payload, run_id=run_id, idempotency_key=key)
            if receipt.get("status") != "validating" or time.monotonic() >= until:
                return receipt
            time.sleep(0.2)

    def answer_decision(
        self,
        run_id: str,
        choice: str,
        request_id: str | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """`decision.answer`: choose `choice` (a choice id) in the run's pending human decision."""
        payload: JsonObject = {"choice": choice}
        if request_id is not None:
            payload["requestId"] = request_id
        return self.call("decision.answer", payload, run_id=run_id, idempotency_key=idempotency_key)

    # -- effects ----------------------------------------------------------------------

    def list_effects(self, run_id: str | None = None) -> list[JsonObject]:
        """`effect.list`: the managed effects of one run, or of every run (every page)."""
        found: list[JsonObject] = []
        payload: JsonObject = {"limit": 1000}
        while True:
            page = self.call("effect.list", payload, run_id=run_id).body
            found.extend(page.get("effects", []))
            cursor = page.get("next")
            if cursor is None:
                return found
            payload = {"limit": 1000, "after": cursor}

    def resolve_effect(
        self,
        effect_id: str,
        resolution: str,
        *,
        result: Any = None,
        reason: str | None = None,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """`effect.resolve`: settle an ambiguous effect as `applied`, `rejected` or `retry`."""
        payload: JsonObject = {"effectId": effect_id, "resolution": resolution}
        if result is not None:
            payload["result"] = result
        if reason is not None:
            payload["reason"] = reason
        return self.call("effect.resolve", payload, idempotency_key=idempotency_key)

    # -- state ------------------------------------------------------------------------

    def diagnose(self) -> list[JsonObject]:
        """`state.diagnose`: the problems found, each `{code, runId, message, repairable}`."""
        return list(self.call("state.diagnose").body.get("problems", []))

    def repair(self, *, idempotency_key: str | None = None) -> Receipt:
        """`state.repair`: fix what has exact evidence; receipt `{fixed, remaining}`."""
        return self.call("state.repair", idempotency_key=idempotency_key)

    def backup(self, path: Path | str, *, idempotency_key: str | None = None) -> Receipt:
        """`state.backup`: write a verified copy of the database to `path` (made absolute)."""
        return self.call("state.backup", {"path": _absolute(path)}, idempotency_key=idempotency_key)

    # -- internals --------------------------------------------------------------------

    def _ensure_connection(self, autostart: bool) -> Connection:
        if self._connection is not None and not self._connection.closed:
            return self._connection
        if autostart:
            connection, started = connect_or_start(self.home, timeout=self.start_timeout)
            self.started_server = self.started_server or started
        else:
            connection = Connection.open(self.socket_path, timeout=self.start_timeout)
        self._connection = connection
        return connection

    def _call(
        self,
        operation: str,
        payload: JsonObject,
        *,
        run_id: str | None,
        idempotency_key: str | None,
        expected_revision: int | None,
        autostart: bool,
    ) -> Receipt:
        try:
            canonical_json(payload)
        except NotJsonError as exc:
            raise InvalidPayloadError(operation, exc.path, exc.reason) from None
        if idempotency_key is None and operation not in READ_OPERATIONS:
            idempotency_key = _new_key()
        lost: ConnectionLostError | None = None
        for attempt in range(MAX_RETRIES + 1):
            if attempt:
                time.sleep(_RETRY_BACKOFF[min(attempt - 1, len(_RETRY_BACKOFF) - 1)])
            request = Request(
                schema=CLIENT_SCHEMA,
                request_id=f"req-{uuid.uuid4().hex}",
                client_id=self.client_id,
                operation=operation,
                idempotency_key=idempotency_key,
                run_id=run_id,
                expected_revision=expected_revision,
                payload=payload,
            )
            try:
                connection = self._ensure_connection(autostart)
                response = connection.exchange(request, timeout=self.timeout)
            except ConnectionLostError as exc:
                self.close()
                lost = exc
                continue
            return _result(operation, request, response)
        assert lost is not None
        raise ConnectionLostError(
            lost.reason,
            operation=operation,
            attempts=MAX_RETRIES + 1,
            idempotency_key=idempotency_key,
        )


def _result(operation: str, request: Request, response: Response) -> Receipt:
    """Turn a response into a receipt, or raise the `CommandError` its outcome names."""
    if response.outcome.ok:
        return Receipt(
            operation=operation,
            outcome=response.outcome,
            revision=response.revision,
            body=dict(response.receipt or {}),
            idempotency_key=request.idempotency_key,
        )
    error_type = _ERROR_TYPES[response.outcome]
    if response.error is not None:
        code, message = response.error.code, response.error.message
    else:
        code, message = str(response.outcome), f"{operation} was answered {response.outcome}"
    raise error_type(
        message,
        code=code,
        operation=operation,
        run_id=request.run_id,
        request_id=request.request_id,
    )


def _new_key() -> str:
    return f"key-{uuid.uuid4()}"


def _absolute(path: Path | str) -> str:
    """`path` as an absolute, normalised path (`..` removed, symlinks kept)."""
    return os.path.abspath(Path(path).expanduser())


def _process(pid: int) -> psutil.Process | None:
    """The server process by pid (its start time pins it), or None if it is already gone."""
    try:
        return psutil.Process(pid)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _wait_gone(process: psutil.Process, timeout: float) -> bool:
    """Poll until `process` has exited (a zombie counts as exited); False at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_STOP_POLL)
