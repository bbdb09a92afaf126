"""The client operation registry and its one dispatch: validate, run, answer once.

Runs in the server. ``operation`` registers a handler (``command=True``: it changes state,
needs an idempotency key and commits a receipt with its change through ``receipted``);
``dispatch`` answers every request with exactly one response and turns every failure into
an outcome and a one-line message, here and nowhere else. The handlers live in the modules
of this package, one per concern.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from pi_workflows.protocol import (
    MAX_FRAME_BYTES,
    ErrorInfo,
    Outcome,
    Request,
    Response,
    safe_message,
)
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError, ResolveError
from pi_workflows.store import faults, receipts
from pi_workflows.store.errors import (
    ClaimLostError,
    DecisionResolvedError,
    EffectConflictError,
    EffectNotFoundError,
    FollowUpNotFoundError,
    ReceiptConflictError,
    RevisionConflictError,
    RunNotFoundError,
    ScheduleNotFoundError,
    SettingsConflictError,
    StoreError,
)
from pi_workflows.store.receipts import CommandRequest
from pi_workflows.store.runs import read_run

log = logging.getLogger(__name__)


Handler = Callable[[ServerContext, Request], Awaitable[dict[str, Any]]]
# Run summaries per run.list answer: well inside one 1 MiB frame (a summary is ~250 bytes).
MAX_LIST = 1000
# Problems per state.diagnose answer (each at most ~700 bytes); ``total`` counts them all.
MAX_PROBLEMS = 1000
# A response body larger than this is replaced by a ``responseTooLarge`` rejection, so the
# frame stays under the protocol's 1 MiB cap and the connection always gets a reply.
MAX_RESPONSE_BYTES = MAX_FRAME_BYTES - 64 * 1024
_ENCODER = msgspec.json.Encoder()
_HANDLERS: dict[str, Handler] = {}
_COMMANDS: set[str] = set()


def operation(name: str, *, command: bool = False) -> Callable[[Handler], Handler]:
    """Register a handler; ``command`` operations need an idempotency key and get receipts."""

    def register(handler: Handler) -> Handler:
        _HANDLERS[name] = handler
        if command:
            _COMMANDS.add(name)
            faults.declare(f"command.{name}", f"command {name}: its change and its receipt")
        return handler

    return register


def bad(message: str) -> RequestError:
    return RequestError(Outcome.REJECTED.value, "badRequest", message)


MAX_ID_CHARS = 200
"""The longest id, name or cursor a payload field may carry (the default bound of ``text``)."""
MAX_REASON_CHARS = 1000
"""The longest free text a person gives (a cancellation's or a resolution's reason)."""
MAX_PATH_CHARS = 4096
"""The longest path (PATH_MAX), and workflow names given as paths."""


def text(
    payload: dict[str, Any], name: str, *, required: bool = True, limit: int = MAX_ID_CHARS
) -> str | None:
    """The non-empty string ``payload[name]`` of at most ``limit`` characters (a one-line
    refusal names the field, its length and the bound)."""
    value = payload.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise bad(f"payload field {name!r} must be a non-empty string")
    if len(value) > limit:
        raise bad(f"payload field {name!r} is {len(value)} characters long; the limit is {limit}")
    return value


def limit_of(payload: dict[str, Any], *, default: int) -> int:
    limit = payload.get("limit", default)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIST:
        raise bad(f"payload field 'limit' must be an integer from 1 to {MAX_LIST}")
    return limit


def run_id_of(request: Request) -> str:
    if not request.run_id:
        raise bad(f"{request.operation} needs a runId")
    return request.run_id


def command_of(request: Request) -> CommandRequest:
    assert request.idempotency_key is not None
    payload = dict(request.payload)
    if request.expected_revision is not None:
        payload["expectedRevision"] = request.expected_revision
    return CommandRequest(
        request.client_id, request.idempotency_key, request.operation, request.run_id, payload
    )


async def dispatch(server: ServerContext, request: Request) -> Response:
    """Answer one request. Never raises: every failure becomes an outcome."""
    handler = _HANDLERS.get(request.operation)
    try:
        if handler is None:
            raise bad(f"unknown operation {request.operation!r}")
        if server.stop_requested and request.operation not in ("server.status", "server.stop"):
            raise RequestError(
                Outcome.UNAVAILABLE.value,
                "serverStopping",
                "the server is stopping; send the command again to the next server (the Python"
                " client and the Pi extension do, with the same idempotency key)",
            )
        if request.operation in _COMMANDS and not request.idempotency_key:
            raise bad(f"{request.operation} changes state and needs an idempotencyKey")
        body = await handler(server, request)
    except RequestError as exc:
        return error_response(request, Outcome(exc.outcome), exc.code, str(exc), exc.receipt)
    except ResolveError as exc:
        # A file that does not load lists its problems beside the one line (``run.start``).
        listed = (
            {"problems": exc.problems, "problemCount": exc.problem_count} if exc.problems else None
        )
        return error_response(request, Outcome.REJECTED, exc.code, str(exc), listed)
    except DecisionResolvedError as exc:
        winner = {
            "requestId": exc.request_id,
            "resolution": exc.resolution,
            "choice": exc.choice,
            "resolvedBy": exc.resolved_by,
        }
        return error_response(request, Outcome.CONFLICT, exc.code, str(exc), winner)
    except StoreError as exc:
        return error_response(request, outcome_of(exc), exc.code, str(exc))
    except (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError):
        log.exception("operation %s broke a database rule", request.operation)
        return error_response(
            request, Outcome.REJECTED, "internal", "internal server error; see the log"
        )
    except sqlite3.Error as exc:
        if getattr(exc, "sqlite_errorname", None) in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
            log.error("operation %s found the state database damaged: %s", request.operation, exc)
            return error_response(request, Outcome.UNAVAILABLE, "stateDamaged", _damaged(server))
        log.error("operation %s could not use the state database: %s", request.operation, exc)
        return error_response(
            request,
            Outcome.UNAVAILABLE,
            "storageError",
            f"the state database at {server.db.path} cannot be used right now ({exc}); nothing"
            " was changed: free disk space or fix the file system, then retry",
        )
    except Exception:
        log.exception("operation %s failed", request.operation)
        return error_response(
            request, Outcome.REJECTED, "internal", "internal server error; see the log"
        )
    adopted = bool(body.pop("_adopted", False))
    if len(_ENCODER.encode(body)) > MAX_RESPONSE_BYTES:
        return error_response(
            request,
            Outcome.REJECTED,
            "responseTooLarge",
            f"the answer to {request.operation} would exceed the 1 MiB frame; ask for less"
            " (a smaller limit, a page cursor, or one run)",
        )
    return Response(
        request_id=request.request_id,
        outcome=Outcome.ADOPTED if adopted else Outcome.ACCEPTED,
        revision=body.get("revision") if isinstance(body.get("revision"), int) else None,
        receipt=body,
    )


def _damaged(server: ServerContext) -> str:
    """The one-line reset instruction for a state database found damaged while serving."""
    path = server.db.path
    return (
        f"the state database {path} is damaged; stop the server, back the file up and move it"
        f" away with its -wal and -shm files (mv {path} {path}-wal {path}-shm"
        " /some/backup/dir/), then run the command again to start with an empty one"
    )


def outcome_of(exc: StoreError) -> Outcome:
    """The outcome a store error answers (its code travels as ``error.code``)."""
    if isinstance(
        exc,
        RunNotFoundError | EffectNotFoundError | ScheduleNotFoundError | FollowUpNotFoundError,
    ):
        return Outcome.NOT_FOUND
    if isinstance(
        exc,
        ReceiptConflictError | RevisionConflictError | EffectConflictError | SettingsConflictError,
    ):
        return Outcome.CONFLICT
    if isinstance(exc, ClaimLostError):
        return Outcome.CLAIM_LOST
    return Outcome.REJECTED


def error_response(
    request: Request,
    outcome: Outcome,
    code: str,
    message: str,
    receipt: dict[str, Any] | None = None,
) -> Response:
    """A refusal: outcome, stable code, one safe line (and, rarely, what won instead)."""
    return Response(
        request_id=request.request_id,
        outcome=outcome,
        receipt=receipt,
        error=ErrorInfo(code=code, message=safe_message(message)),
    )


def receipted(
    server: ServerContext,
    request: Request,
    change: Callable[[], tuple[str | None, dict[str, Any]]],
    *,
    revision_of: str | None = None,
) -> dict[str, Any]:
    """Apply ``change`` and commit its receipt in one transaction (or adopt a stored one).

    Every command that carries ``expectedRevision`` is checked against the run it concerns
    (``runId``, or ``revision_of`` for commands addressed by another id) first, inside the
    same transaction: a stale revision is a ``revisionConflict`` and nothing changes.
    """
    expected = request.expected_revision
    run_id = revision_of or request.run_id

    def checked() -> tuple[str | None, dict[str, Any]]:
        if expected is not None:
            if run_id is None:
                raise bad(f"{request.operation} has no run to check expectedRevision against")
            actual = read_run(server.db.conn, run_id).revision
            if actual != expected:
                raise RevisionConflictError(run_id, expected, actual)
        return change()

    receipt = receipts.run_command(server.db, command_of(request), checked)
    server.wake(receipt.run_id)  # a command changes the run it names (None: every run)
    return {**receipt.body, "_adopted": receipt.adopted}


faults.declare("command.lookup", "a command's stored receipt is read before slow work")


def stored_receipt(server: ServerContext, request: Request) -> dict[str, Any] | None:
    """A stored receipt for this exact command, checked before slow work (resolving)."""
    with server.db.atomic("command.lookup") as tx:
        found = receipts.lookup(tx, command_of(request))
    return None if found is None else {**found.body, "_adopted": True}


def registered() -> dict[str, bool]:
    """Every registered operation, mapped to whether it is a command (for tests that must
    cover each operation, such as the revision rule's)."""
    return {name: name in _COMMANDS for name in sorted(_HANDLERS)}
