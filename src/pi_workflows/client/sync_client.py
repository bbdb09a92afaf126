"""The blocking Python client: one method per client-protocol v1 operation, with durable retries.

Owns building requests (request ids, the client id, idempotency keys) and the retry policy,
both also used by `AsyncClient`. A state-changing call always carries an idempotency key (a
fresh uuid4 unless the caller gives one); when the connection is lost before the reply
arrives, the SAME key, client id and payload are sent again with a new request id, so a
command that had committed is adopted instead of applied twice. What each method sends and
how its answer becomes a result (a `Receipt`, a `CommandError`) is `operations`. It never
interprets run state (that is the server's) and never reads the database.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import psutil

from pi_workflows.client import operations as ops
from pi_workflows.client.autostart import connect_or_start
from pi_workflows.client.connection import Connection
from pi_workflows.client.errors import (
    ConnectionLostError,
    InvalidPayloadError,
    ServerUnavailableError,
    StopTimeoutError,
    UnavailableError,
)
from pi_workflows.client.interactions import InteractionMethods
from pi_workflows.client.operations import Call, JsonObject, Program, Receipt, T, new_key
from pi_workflows.client.paths import socket_path, state_home
from pi_workflows.client.payloads import absolute
from pi_workflows.client.run_methods import RunMethods
from pi_workflows.client.schedule_methods import ScheduleMethods
from pi_workflows.protocol import (
    CLIENT_SCHEMA,
    Hello,
    NotJsonError,
    Outcome,
    Request,
    canonical_json,
)

__all__ = ["MAX_RETRIES", "READ_OPERATIONS", "Client", "JsonObject", "Receipt", "request_for"]

MAX_RETRIES: Final = 3
"""How many times a request is sent again after a lost connection (so at most 4 sends)."""

READ_OPERATIONS: Final = frozenset(
    {
        "server.status",
        "upload.put",
        "workflows.list",
        "run.list",
        "run.get",
        "run.settings",
        "run.followUps",
        "state.diagnose",
        "effect.list",
        "blob.read",
        "interaction.list",
        "session.get",
        "session.watch",
        "workflowMessage.get",
        "workflowMessage.report",
        "workflowTurn.report",
        "run.history",
        "run.logs",
        "run.output",
        "run.value",
        "run.watch",
        "runs.watch",
        "workflows.show",
        "workflows.check",
        "schedule.list",
        "schedule.get",
    }
)
"""Operations sent without an idempotency key: reads, the idempotent session reports, and
`upload.put` (it changes no durable state). Everything else carries one."""

RETRY_BACKOFF: Final = (0.05, 0.1, 0.2)
"""Seconds to wait before each resend after a lost connection."""
SERVER_STOPPING: Final = "serverStopping"
"""The code of an ``unavailable`` answer a stopping server gives a held command: it is sent
again (same key) like after a lost connection, to the next server."""

_STOP_POLL: Final = 0.02


def request_for(
    client_id: str,
    operation: str,
    payload: JsonObject,
    *,
    run_id: str | None,
    idempotency_key: str | None,
    expected_revision: int | None,
) -> Request:
    """A request with a new request id (every resend gets its own)."""
    return Request(
        schema=CLIENT_SCHEMA,
        request_id=f"req-{uuid.uuid4().hex}",
        client_id=client_id,
        operation=operation,
        idempotency_key=idempotency_key,
        run_id=run_id,
        expected_revision=expected_revision,
        payload=payload,
    )


def checked_key(operation: str, payload: JsonObject, idempotency_key: str | None) -> str | None:
    """Check that `payload` is JSON (`InvalidPayloadError` before anything is sent) and give
    a command without a key a fresh one (reads go without)."""
    try:
        canonical_json(payload)
    except NotJsonError as exc:
        raise InvalidPayloadError(operation, exc.path, exc.reason) from None
    if idempotency_key is None and operation not in READ_OPERATIONS:
        return new_key()
    return idempotency_key


class Client(InteractionMethods, RunMethods, ScheduleMethods):
    """A blocking client for one state directory's server. Not thread-safe.

    Args:
        home: the state directory; default `state_home()` (the `PI_WORKFLOWS_HOME` rule).
        client_id: names this client for receipts; default `py-<uuid4>`, new per instance.
            Reuse an id (with the same idempotency key) to retry a command across processes.
        autostart: start a server when none answers (not for `stop`, which never starts one).
        timeout: seconds to wait for each reply before treating the connection as lost.
        start_timeout: seconds to wait for a server to connect to or to start.

    Use it as a context manager, or call `close()`, to release the connection.
    `AsyncClient` has the same methods for asyncio programs.
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

    def _run(self, program: Program[T]) -> T:
        """Run one program of `operations` with this client's calls."""

        def send(step: Call) -> Receipt:
            return self.call(step.operation, step.payload, step.run_id, step.idempotency_key)

        return ops.run_blocking(program, send)

    # -- server -----------------------------------------------------------------------

    def status(self) -> JsonObject:
        """`server.status`: pid, epoch, runners, runs by status, claims, interactions."""
        return self._run(ops.body("server.status"))

    def stop(
        self, *, wait: bool = True, timeout: float = 30.0, drain: float | None = None
    ) -> Receipt:
        """`server.stop`: ask the server to stop; never starts one.

        Running nodes first get `drain` seconds (default: the server's
        `PI_WORKFLOWS_DRAIN_SECONDS`) to reach their next node boundary, where their runs park
        to resume at the next start; a second stop while the first drains stops at once.
        With `wait`, return only once the server process has exited (at most `timeout`
        seconds after the drain the server announced), so a new server can start on the same
        state directory at once. If the
        connection drops after the request was sent and no server answers any more, the stop
        took effect: the receipt is then `{"stopping": true}` with outcome `adopted`.

        Raises:
            ServerUnavailableError: no server was running.
            StopTimeoutError: `wait` and the server was still running after `timeout`.

        A server that answers `unavailable` is already stopping; that counts as success.
        """
        hello = self._ensure_connection(autostart=False).hello
        process = server_process(hello)
        key = new_key()
        try:
            receipt = self._call(
                "server.stop",
                {} if drain is None else {"drainSeconds": drain},
                run_id=None,
                idempotency_key=key,
                expected_revision=None,
                autostart=False,
            )
        except (ServerUnavailableError, ConnectionLostError, UnavailableError):
            receipt = stopping_receipt(key)  # gone, or already stopping: the stop is in effect
        self.close()
        limit = timeout + stop_drain(receipt)
        if wait and process is not None and not wait_gone(process, limit):
            raise StopTimeoutError(hello.server_pid, limit)
        return receipt

    # -- workflows and runs -----------------------------------------------------------

    def list_workflows(self, project_dir: Path | str | None = None) -> list[JsonObject]:
        """`workflows.list`: the workflows visible from `project_dir` (made absolute; default:
        the nearest directory from the current one upwards with `.pi/workflows`)."""
        return self._run(ops.list_workflows(project_dir))

    def start_run(
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
        """`run.start`: start `workflow` (a name, `builtin:NAME` or a file path, relative to
        the current directory) with `input`.

        `input` defaults to `{}` and may be up to 16 MiB of JSON (over 512 KiB it is
        uploaded in slices first); `project_dir` defaults to the nearest directory from the
        current one upwards with `.pi/workflows`; `origin_session` names the Pi session that
        presents the run's requests and messages; `detached` runs them in a headless Pi the
        server runs. The run records this process's default environment variables (`PATH`,
        `HOME`, `LANG`, `LC_*`, ...; docs/authoring.md, "Environment") with `env` over them,
        and runs in the project directory (else this process's current directory).
        `deadline` (seconds or a `timedelta`) overrides the workflow's run deadline. The
        receipt holds `runId`, `workflow`, `originSession` and `revision`.

        Raises:
            InputTooLargeError: the input is over 16 MiB of canonical JSON.
            RunEnvironmentError: a variable of `env` is refused, or the environment is over
                its bounds.
        """
        return self._run(
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

    def list_runs(
        self, status: Iterable[str] | str | None = None, limit: int | None = None
    ) -> list[JsonObject]:
        """`run.list`: the first page of run summaries, newest first, optionally filtered by
        status (`list_runs_page` and `iter_runs` page further)."""
        return self._run(ops.list_runs(status, limit))

    def get_run(self, run_id: str) -> JsonObject:
        """`run.get`: the run's `RunView` (see docs/protocol.md)."""
        return self._run(ops.get_run(run_id))

    def read_value(self, ref: Mapping[str, Any]) -> Any:
        """The value behind a `*Ref` (`{digest, bytes}`) of a view, read with `blob.read` in
        chunks and checked against its digest."""
        return self._run(ops.read_value(ref))

    def get_run_complete(self, run_id: str) -> JsonObject:
        """`run.get` with every value sent by reference (`inputRef`, `outputRef`) read in."""
        return self._run(ops.get_run_complete(run_id))

    def pause(
        self, run_id: str, reason: str | None = None, *, idempotency_key: str | None = None
    ) -> Receipt:
        """`run.pause`: park the run with `userPaused` (and `reason` as its detail); receipt
        `{runId, status, revision}`. A running run parks at its next node boundary."""
        payload: JsonObject = {} if reason is None else {"reason": reason}
        return self.call("run.pause", payload, run_id=run_id, idempotency_key=idempotency_key)

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

    def fork(
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
        """`run.fork`: a new run of the workflow as it is now that starts at `visit` (default:
        the latest) of `node` of `run_id`, with the outputs, results and settled effects of
        everything the source finished before that visit carried over; receipt `{runId,
        sourceRunId, nodeId, visit, carriedAttempts, carriedEffects, effectsAhead, ...}`.

        `input` (not None) replaces the source's input (the carried outputs are kept as
        they are). The fork runs in the source's session, or detached like it, unless
        `session` or `detached` says otherwise. Refused while the source runs or has an
        effect applying or ambiguous.

        `outputs` (node id -> value) replaces the carried output of each node (LangGraph's
        `update_state`): only nodes carried (settled before the fork point) may be set, each
        value is checked by the node's output contract, and the fork records that a person
        set it. A refused value raises `RejectedError` (code `outputRefused`, one line
        naming the node); nothing is stored.
        """
        return self._run(
            ops.fork(run_id, node, visit, input, session, detached, idempotency_key, outputs)
        )

    def retry(
        self,
        run_id: str,
        *,
        session: str | None = None,
        detached: bool | None = None,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """`run.retry`: `fork` from the visit whose failure ended `run_id` (a failed or
        timed-out run), with its input, on the workflow as it is now: what it settled
        before that visit is carried, and the failed node runs again. The receipt is a
        fork's. Refused (`RejectedError`, code `invalidTransition`, one line naming what to
        use instead) for a run that did not fail.
        """
        payload = ops.placement_payload(session, detached)
        return self.call("run.retry", payload, run_id=run_id, idempotency_key=idempotency_key)

    def upgrade(
        self, run_id: str, *, dry_run: bool = False, idempotency_key: str | None = None
    ) -> Receipt:
        """`run.upgrade`: let a paused or waiting run continue on its workflow's code as it
        is now; receipt: the plan carried out (`{from, to, changes, recreatesRequest,
        continues, status, ...}`). With `dry_run` only the plan, and nothing changes.
        Refused, with the reasons, when the new graph cannot carry the run.
        """
        payload: JsonObject = {"dryRun": True} if dry_run else {}
        return self.call("run.upgrade", payload, run_id=run_id, idempotency_key=idempotency_key)

    def signal(
        self,
        run_id: str,
        name: str,
        data: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """`run.signal`: send the event `name` with JSON `data` to the run, for its
        `wait_event(name)` node; receipt `{runId, signalId, name, seq, status, woke}`.

        Events are kept until a wait takes them, oldest first. The same `idempotency_key`
        for the same run (from any client) returns the first event instead of sending
        another. When the wait validates events the call returns once the event was taken
        (`status` `consumed`) or raises `RejectedError` (code `validationRejected`) with the
        node's message; otherwise it returns at once with `status` `pending`.
        """
        payload = ops.signal_payload(name, data, idempotency_key)
        return self.call("run.signal", payload, run_id=run_id)

    def settings(self, run_id: str) -> JsonObject:
        """`run.settings`: the run's live settings `{runId, settings, change, declared,
        changedBy, schema, history}` (docs/authoring.md, "Settings")."""
        return self.call("run.settings", None, run_id=run_id).body

    def change_settings(
        self,
        run_id: str,
        patch: list[Any],
        *,
        expect_change: int | None = None,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """`run.changeSettings`: apply the RFC 6902 JSON Patch `patch` to the run's settings
        as its next change; receipt `{runId, change, settings, changedBy, revision}`.

        Attempts that start after the change see it. A patch that does not apply or whose
        result the settings schema refuses raises `RejectedError` (code `settingsRefused`)
        and changes nothing; with `expect_change`, settings at another change number raise
        `ConflictError` (code `settingsConflict`, the message names the current number).
        """
        payload = ops.settings_payload(patch, expect_change)
        return self.call(
            "run.changeSettings", payload, run_id=run_id, idempotency_key=idempotency_key
        )

    def follow_up(self, run_id: str, text: str, *, idempotency_key: str | None = None) -> Receipt:
        """`run.followUp`: queue `text` (at most 65,536 characters) as the run's next
        follow-up prompt; receipt `{followUpId, runId, seq, text, status, ...}`.

        Follow-ups are sent in order to the run's origin Pi session as user messages, each
        once, after the run completed and its result was delivered there; a run that fails,
        times out or is cancelled cancels them. A run with no origin session (started
        outside Pi, detached, a child run) or that has ended raises `RejectedError` (code
        `followUpRefused`) saying why.
        """
        return self.call(
            "run.followUp", {"text": text}, run_id=run_id, idempotency_key=idempotency_key
        )

    def follow_ups(self, run_id: str) -> JsonObject:
        """`run.followUps`: the run's follow-ups in queue order `{runId, status, followUps}`
        (each `{followUpId, seq, text, textChars, status, reason, ...}`)."""
        return self.call("run.followUps", None, run_id=run_id).body

    def remove_follow_up(
        self,
        follow_up_id: str,
        *,
        run_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """`run.removeFollowUp`: remove a follow-up that is still queued (not yet being
        sent); `RejectedError` (code `followUpRefused`) otherwise."""
        return self.call(
            "run.removeFollowUp",
            {"followUpId": follow_up_id},
            run_id=run_id,
            idempotency_key=idempotency_key,
        )

    def answer_checkpoint(
        self,
        run_id: str,
        value: Any,
        request_id: str | None = None,
        *,
        idempotency_key: str | None = None,
        wait: float | None = 120.0,
        child: str | None = None,
    ) -> Receipt:
        """`checkpoint.answer`: answer the run's pending checkpoint with a JSON `value`.

        The answer is validated like a submission (`validate` of the node, in a runner):
        returns once it is accepted (or still `validating` after `wait` seconds; None: no
        bound); raises `RejectedError` with code `validationRejected` when it was refused.
        A run that waits on its child runs: the answer goes to the one child run below it
        that waits on a checkpoint (the receipt's `runId`, with `via` the run addressed);
        `child` names it when several wait (`RejectedError` code `childAmbiguous`
        otherwise, naming each).
        """
        return self._run(
            ops.answer_checkpoint(run_id, value, request_id, idempotency_key, wait, child)
        )

    def answer_decision(
        self,
        run_id: str,
        choice: str,
        request_id: str | None = None,
        *,
        idempotency_key: str | None = None,
        child: str | None = None,
        person: str | None = None,
    ) -> Receipt:
        """`decision.answer`: choose `choice` (a choice id) in the run's pending human
        decision, or in the one child run's below it (`child` picks one of several, as for
        `answer_checkpoint`); `person` names who answered on the seat (kept in the history)."""
        return self._run(
            ops.answer_decision(run_id, choice, request_id, idempotency_key, child, person)
        )

    # -- effects ----------------------------------------------------------------------

    def list_effects(self, run_id: str | None = None) -> list[JsonObject]:
        """`effect.list`: the managed effects of one run, or of every run (every page)."""
        return self._run(ops.list_effects(run_id))

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
        return self._run(ops.resolve_effect(effect_id, resolution, result, reason, idempotency_key))

    def get_effect(self, effect_id: str) -> JsonObject:
        """`effect.get`: the effect as `list_effects` gives it, with `evidence`: what its
        runner left on disk about its body when its report was lost (null unless it is
        ambiguous and there is some)."""
        return self._run(ops.get_effect(effect_id))

    def resolve_effect_from_evidence(
        self, effect_id: str, *, idempotency_key: str | None = None
    ) -> Receipt:
        """`effect.resolve` with `fromEvidence`: settle the ambiguous effect as the evidence
        its runner left says (applied with its result, or rejected with its error); refused
        (`noEvidence`) when there is none."""
        return self._run(ops.resolve_effect_from_evidence(effect_id, idempotency_key))

    # -- state ------------------------------------------------------------------------

    def diagnose(self, *, full: bool = False) -> list[JsonObject]:
        """`state.diagnose`: the problems found, each `{code, runId, message, repairable}`;
        a damaged file is `stateFileDamaged` (SQLite's `quick_check`; `full`: its whole
        `integrity_check`)."""
        return self._run(ops.diagnose(full))

    def repair(self, *, idempotency_key: str | None = None) -> Receipt:
        """`state.repair`: fix what has exact evidence; receipt `{fixed, remaining}`."""
        return self.call("state.repair", idempotency_key=idempotency_key)

    def backup(self, path: Path | str, *, idempotency_key: str | None = None) -> Receipt:
        """`state.backup`: write a verified copy of the database to `path` (made absolute)."""
        return self.call("state.backup", {"path": absolute(path)}, idempotency_key=idempotency_key)

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
        idempotency_key = checked_key(operation, payload, idempotency_key)
        lost: ConnectionLostError | None = None
        for attempt in range(MAX_RETRIES + 1):
            if attempt:
                time.sleep(RETRY_BACKOFF[min(attempt - 1, len(RETRY_BACKOFF) - 1)])
            request = request_for(
                self.client_id,
                operation,
                payload,
                run_id=run_id,
                idempotency_key=idempotency_key,
                expected_revision=expected_revision,
            )
            try:
                connection = self._ensure_connection(autostart)
                response = connection.exchange(request, timeout=self.timeout)
            except ConnectionLostError as exc:
                self.close()
                lost = exc
                continue
            try:
                return ops.receipt_of(operation, request, response)
            except UnavailableError as exc:
                if exc.code != SERVER_STOPPING or not autostart or attempt == MAX_RETRIES:
                    raise  # without auto-start nobody brings the next server up
                stopping = server_process(connection.hello)
                self.close()  # the next server answers the same command (same key)
                if stopping is not None:  # it drains its runs first: wait until it has gone
                    wait_gone(stopping, self.timeout)
                lost = ConnectionLostError(exc.message, operation=operation)
        assert lost is not None
        raise ConnectionLostError(
            lost.reason,
            operation=operation,
            attempts=MAX_RETRIES + 1,
            idempotency_key=idempotency_key,
        )


def stop_drain(receipt: Receipt) -> float:
    """The seconds a stopping server said it lets running nodes drain (0 if it did not)."""
    drain = receipt.body.get("drainSeconds")
    return float(drain) if isinstance(drain, int | float) and not isinstance(drain, bool) else 0.0


def stopping_receipt(key: str) -> Receipt:
    """The receipt of a `server.stop` whose server is gone or already stopping."""
    return Receipt("server.stop", Outcome.ADOPTED, None, {"stopping": True}, key)


def server_process(hello: Hello) -> psutil.Process | None:
    """The server process by pid (its start time pins it), or None if it is already gone or
    is this very process (an embedded server cannot be waited for from here)."""
    import psutil  # noqa: PLC0415 - only `stop` needs it; other commands start faster

    if hello.server_pid == os.getpid():
        return None
    try:
        return psutil.Process(hello.server_pid)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def wait_gone(process: psutil.Process, timeout: float) -> bool:
    """Poll until `process` has exited (a zombie counts as exited); False at the timeout."""
    import psutil  # noqa: PLC0415 - see server_process

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
