"""Client operations: validate a request, call the store, answer with one response.

Runs in the server. State-changing operations go through ``receipts.run_command`` so their
receipt commits with their change; reads store nothing. Store errors become outcomes and
one-line messages here, and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from pi_workflows.protocol import (
    MAX_FRAME_BYTES,
    ErrorInfo,
    Outcome,
    Request,
    Response,
    safe_message,
)
from pi_workflows.server import resolver
from pi_workflows.server.errors import RequestError, ResolveError
from pi_workflows.store import effects, lifecycle, receipts, values, views
from pi_workflows.store.database import Database, ddl_digest
from pi_workflows.store.diagnose import diagnose, repair
from pi_workflows.store.effect_writes import resolve_effect
from pi_workflows.store.errors import (
    ClaimLostError,
    EffectConflictError,
    EffectNotFoundError,
    ReceiptConflictError,
    RevisionConflictError,
    RunNotFoundError,
    StoreError,
)
from pi_workflows.store.interactions import open_request_of
from pi_workflows.store.lifecycle import NewRun, SourceRecord
from pi_workflows.store.receipts import CommandRequest
from pi_workflows.store.runs import read_run
from pi_workflows.store.states import ParkReason, RunStatus

if TYPE_CHECKING:
    from pi_workflows.server.app import Server

log = logging.getLogger(__name__)

Handler = Callable[["Server", Request], Awaitable[dict[str, Any]]]
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
        return handler

    return register


def _bad(message: str) -> RequestError:
    return RequestError(Outcome.REJECTED.value, "badRequest", message)


def _text(payload: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = payload.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise _bad(f"payload field {name!r} must be a non-empty string")
    return value


def _limit(payload: dict[str, Any], *, default: int) -> int:
    limit = payload.get("limit", default)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIST:
        raise _bad(f"payload field 'limit' must be an integer from 1 to {MAX_LIST}")
    return limit


def _run_id(request: Request) -> str:
    if not request.run_id:
        raise _bad(f"{request.operation} needs a runId")
    return request.run_id


def _command(request: Request) -> CommandRequest:
    assert request.idempotency_key is not None
    payload = dict(request.payload)
    if request.expected_revision is not None:
        payload["expectedRevision"] = request.expected_revision
    return CommandRequest(
        request.client_id, request.idempotency_key, request.operation, request.run_id, payload
    )


async def dispatch(server: Server, request: Request) -> Response:
    """Answer one request. Never raises: every failure becomes an outcome."""
    handler = _HANDLERS.get(request.operation)
    try:
        if handler is None:
            raise _bad(f"unknown operation {request.operation!r}")
        if server.stopping and request.operation != "server.status":
            raise RequestError(Outcome.UNAVAILABLE.value, "stopping", "the server is stopping")
        if request.operation in _COMMANDS and not request.idempotency_key:
            raise _bad(f"{request.operation} changes state and needs an idempotencyKey")
        body = await handler(server, request)
    except RequestError as exc:
        return _error(request, Outcome(exc.outcome), exc.code, str(exc))
    except ResolveError as exc:
        return _error(request, Outcome.REJECTED, exc.code, str(exc))
    except StoreError as exc:
        return _error(request, _outcome_of(exc), exc.code, str(exc))
    except sqlite3.Error as exc:
        log.error("operation %s could not use the state database: %s", request.operation, exc)
        return _error(
            request,
            Outcome.UNAVAILABLE,
            "storageError",
            f"the state database at {server.db.path} cannot be used right now ({exc}); nothing"
            " was changed: free disk space or fix the file system, then retry",
        )
    except Exception:
        log.exception("operation %s failed", request.operation)
        return _error(request, Outcome.REJECTED, "internal", "internal server error; see the log")
    adopted = bool(body.pop("_adopted", False))
    if len(_ENCODER.encode(body)) > MAX_RESPONSE_BYTES:
        return _error(
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


def _outcome_of(exc: StoreError) -> Outcome:
    if isinstance(exc, RunNotFoundError | EffectNotFoundError):
        return Outcome.NOT_FOUND
    if isinstance(exc, ReceiptConflictError | RevisionConflictError | EffectConflictError):
        return Outcome.CONFLICT
    if isinstance(exc, ClaimLostError):
        return Outcome.CLAIM_LOST
    return Outcome.REJECTED


def _error(request: Request, outcome: Outcome, code: str, message: str) -> Response:
    return Response(
        request_id=request.request_id,
        outcome=outcome,
        error=ErrorInfo(code=code, message=safe_message(message)),
    )


def _receipted(
    server: Server,
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
                raise _bad(f"{request.operation} has no run to check expectedRevision against")
            actual = read_run(server.db.conn, run_id).revision
            if actual != expected:
                raise RevisionConflictError(run_id, expected, actual)
        return change()

    receipt = receipts.run_command(server.db, _command(request), checked)
    server.wake()
    return {**receipt.body, "_adopted": receipt.adopted}


def _stored_receipt(server: Server, request: Request) -> dict[str, Any] | None:
    """A stored receipt for this exact command, checked before slow work (resolving)."""
    with server.db.atomic("command.lookup") as tx:
        found = receipts.lookup(tx, _command(request))
    return None if found is None else {**found.body, "_adopted": True}


# --- server ------------------------------------------------------------------------------


@operation("server.status")
async def server_status(server: Server, request: Request) -> dict[str, Any]:
    """Safe counters: no tokens, no payloads."""
    with server.db.read() as conn:
        counts = views.status_counts(conn, server.db.clock.now_ms())
    return {
        "pid": os.getpid(),
        "epoch": server.epoch,
        "version": server.version,
        "socket": str(server.socket_path),
        "stateDir": str(server.config.home),
        "capacity": server.config.max_runners,
        "connections": server.connection_count,
        "slowClientsDropped": server.slow_clients_dropped,
        "runners": [
            {
                "runId": handle.run_id,
                "pid": handle.pid,
                "status": "ready" if handle.ready else "starting",
                "runnerEpoch": handle.identity.runner_epoch,
            }
            for handle in server.supervisor.handles.values()
        ],
        **counts,
    }


@operation("server.stop")
async def server_stop(server: Server, request: Request) -> dict[str, Any]:
    """Begin an orderly shutdown after this response is sent."""
    server.request_stop()
    return {"stopping": True}


# --- workflows and runs ------------------------------------------------------------------


def _project(payload: dict[str, Any]) -> str | None:
    project = _text(payload, "projectDir", required=False)
    if project is not None and not Path(project).is_absolute():
        raise _bad("payload field 'projectDir' must be an absolute path")
    return project


@operation("workflows.list")
async def workflows_list(server: Server, request: Request) -> dict[str, Any]:
    """Discover workflows in a resolver child."""
    reply = await resolver.call(
        {"op": "list", "projectDir": _project(request.payload)},
        limit_seconds=server.config.resolve_seconds,
        tail_bytes=server.config.runner_output_tail_bytes,
    )
    return {"workflows": reply.get("workflows", [])}


async def _describe(server: Server, spec: str, project: str | None, run_input: Any) -> NewRun:
    reply = await resolver.call(
        {"op": "describe", "workflow": spec, "projectDir": project, "input": run_input},
        limit_seconds=server.config.resolve_seconds,
        tail_bytes=server.config.runner_output_tail_bytes,
    )
    source = reply["source"]
    return NewRun(
        workflow_name=str(reply["workflow"]),
        definition=reply["definition"],
        definition_digest=str(reply["definitionDigest"]),
        input=run_input,
        input_hash=str(reply["inputHash"]),
        source=SourceRecord(
            kind=str(source["kind"]),
            ref=str(source["ref"]),
            revision=str(source["revision"]),
            project_dir=source.get("projectDir", project),
            mounted={str(k): str(v) for k, v in dict(source.get("mounted", {})).items()},
        ),
    )


@operation("run.start", command=True)
async def run_start(server: Server, request: Request) -> dict[str, Any]:
    """Resolve the workflow in a child, then reserve the run with its receipt."""
    stored = _stored_receipt(server, request)
    if stored is not None:
        return stored
    spec = _text(request.payload, "workflow")
    assert spec is not None
    new_run = await _describe(server, spec, _project(request.payload), request.payload.get("input"))
    new_run = dataclasses.replace(new_run, origin=f"client:{request.client_id}")

    def change() -> tuple[str | None, dict[str, Any]]:
        result = lifecycle.reserve(server.db, new_run)
        return result.run_id, {
            "runId": result.run_id,
            "workflow": new_run.workflow_name,
            "revision": result.revision,
        }

    return _receipted(server, request, change)


@operation("run.list")
async def run_list(server: Server, request: Request) -> dict[str, Any]:
    """Run summaries, newest first."""
    statuses = request.payload.get("status")
    if statuses is not None and (
        not isinstance(statuses, list) or not all(isinstance(s, str) for s in statuses)
    ):
        raise _bad("payload field 'status' must be a list of statuses")
    limit = _limit(request.payload, default=100)
    with server.db.read() as conn:
        return {"runs": views.list_runs(conn, statuses, limit)}


@operation("run.get")
async def run_get(server: Server, request: Request) -> dict[str, Any]:
    """The full run view."""
    with server.db.read() as conn:
        return {"run": views.run_view(conn, _run_id(request))}


def _status_receipt(server: Server, run_id: str) -> tuple[str | None, dict[str, Any]]:
    run = read_run(server.db.conn, run_id)
    return run_id, {"runId": run_id, "status": run.status.value, "revision": run.revision}


@operation("run.pause", command=True)
async def run_pause(server: Server, request: Request) -> dict[str, Any]:
    """Pause a queued run, or park a running one and stop its runner."""
    run_id = _run_id(request)
    handle = server.supervisor.handle_of(run_id)

    def change() -> tuple[str | None, dict[str, Any]]:
        run = read_run(server.db.conn, run_id)
        if run.status is RunStatus.RUNNING:
            claim = handle.identity.claim if handle is not None else None
            lifecycle.park(
                server.db, lifecycle.live_or_control(server.db, run_id, claim),
                ParkReason.USER_PAUSED,
            )  # fmt: skip
        else:
            lifecycle.pause(server.db, run_id)
        return _status_receipt(server, run_id)

    body = _receipted(server, request, change)
    if handle is not None and not body["_adopted"]:
        server.supervisor.terminate(handle, "cancelled")
    return body


@operation("run.resume", command=True)
async def run_resume(server: Server, request: Request) -> dict[str, Any]:
    """Queue a paused run again from its last durable boundary."""
    run_id = _run_id(request)

    def change() -> tuple[str | None, dict[str, Any]]:
        lifecycle.resume(server.db, run_id)
        return _status_receipt(server, run_id)

    return _receipted(server, request, change)


@operation("run.cancel", command=True)
async def run_cancel(server: Server, request: Request) -> dict[str, Any]:
    """Commit the cancellation (with its receipt) first, then stop the runner."""
    run_id = _run_id(request)
    reason = _text(request.payload, "reason", required=False) or "cancelled by request"
    handle = server.supervisor.handle_of(run_id)

    def change() -> tuple[str | None, dict[str, Any]]:
        claim = handle.identity.claim if handle is not None else None
        lifecycle.cancel(server.db, run_id, claim=claim, reason=reason)
        return _status_receipt(server, run_id)

    body = _receipted(server, request, change)
    if handle is not None and not body["_adopted"]:
        server.supervisor.terminate(handle, "cancelled")
    return body


@operation("run.restart", command=True)
async def run_restart(server: Server, request: Request) -> dict[str, Any]:
    """Re-resolve the run's workflow as it is now and queue the run from its start."""
    run_id = _run_id(request)
    stored = _stored_receipt(server, request)
    if stored is not None:
        return stored
    with server.db.read() as conn:
        read_run(conn, run_id)
        row = conn.execute(
            "SELECT s.source_ref, s.project_dir, r.input_json, r.input_ref FROM run_sources s"
            " JOIN runs r USING (run_id) WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        run_input = values.load(conn, row[2], row[3])
    fresh = await _describe(server, row[0], row[1], run_input)

    def change() -> tuple[str | None, dict[str, Any]]:
        lifecycle.restart(server.db, run_id, new_source=(fresh, fresh.definition_digest))
        return _status_receipt(server, run_id)

    return _receipted(server, request, change)


def _open_request(server: Server, run_id: str, kinds: set[str], wanted: str | None) -> str:
    with server.db.read() as conn:
        read_run(conn, run_id)
        request = open_request_of(conn, run_id)
    if request is None or request.kind not in kinds:
        raise RequestError(
            Outcome.REJECTED.value,
            "invalidTransition",
            f"run {run_id} is not waiting on a {' or '.join(sorted(kinds))}",
        )
    if wanted is not None and wanted != request.request_id:
        raise RequestError(
            Outcome.REJECTED.value,
            "invalidTransition",
            f"request {wanted} is not the open request of run {run_id}",
        )
    return request.request_id


@operation("checkpoint.answer", command=True)
async def checkpoint_answer(server: Server, request: Request) -> dict[str, Any]:
    """Answer a run's open checkpoint; the run resumes from that boundary."""
    run_id = _run_id(request)
    if "value" not in request.payload:
        raise _bad("checkpoint.answer needs payload field 'value'")
    stored = _stored_receipt(server, request)
    if stored is not None:
        return stored
    request_id = _open_request(
        server, run_id, {"checkpoint"}, _text(request.payload, "requestId", required=False)
    )

    def change() -> tuple[str | None, dict[str, Any]]:
        result = lifecycle.answer(server.db, request_id, request.payload["value"])
        return run_id, {"runId": run_id, "requestId": request_id, "revision": result.revision}

    return _receipted(server, request, change)


@operation("decision.answer", command=True)
async def decision_answer(server: Server, request: Request) -> dict[str, Any]:
    """A person's answer to a human decision (the model-facing path never reaches here)."""
    run_id = _run_id(request)
    choice = _text(request.payload, "choice")
    stored = _stored_receipt(server, request)
    if stored is not None:
        return stored
    request_id = _open_request(
        server, run_id, {"decision"}, _text(request.payload, "requestId", required=False)
    )

    def change() -> tuple[str | None, dict[str, Any]]:
        result = lifecycle.answer(
            server.db,
            request_id,
            {"choice": choice},
            kinds=frozenset({"decision"}),
            answered_by=f"client:{request.client_id}",
        )
        return run_id, {"runId": run_id, "requestId": request_id, "revision": result.revision}

    return _receipted(server, request, change)


@operation("blob.read")
async def blob_read(server: Server, request: Request) -> dict[str, Any]:
    """``{digest, offset?, length?}``: a base64 slice of a stored value (a ``*Ref``)."""
    digest = _text(request.payload, "digest")
    offset = request.payload.get("offset", 0)
    length = request.payload.get("length", values.CHUNK_BYTES)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (offset, length)):
        raise _bad("payload fields 'offset' and 'length' must be non-negative integers")
    with server.db.read() as conn:
        try:
            return values.read_chunk(conn, str(digest), offset, length)
        except LookupError as exc:
            raise RequestError(Outcome.NOT_FOUND.value, "notFound", str(exc)) from None


# --- effects -----------------------------------------------------------------------------


@operation("effect.list")
async def effect_list(server: Server, request: Request) -> dict[str, Any]:
    """Effects of one run, or of all runs, oldest first, a page at a time.

    ``{after?, limit?}``: the page after cursor ``after`` (the ``next`` of the previous
    page), at most ``limit`` (1 to 1000, default 200) effects; ``next`` is null on the last.
    """
    after = request.payload.get("after", 0)
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise _bad("payload field 'after' must be a cursor from an earlier page")
    limit = _limit(request.payload, default=200)
    with server.db.read() as conn:
        if request.run_id:
            read_run(conn, request.run_id)
        page = effects.list_effects(conn, request.run_id, after=after, limit=limit + 1)
    more = len(page) > limit
    page = page[:limit]
    return {"effects": page, "next": page[-1]["cursor"] if more else None}


@operation("effect.resolve", command=True)
async def effect_resolve(server: Server, request: Request) -> dict[str, Any]:
    """An operator settles an ambiguous effect: applied (with result), rejected, or retry."""
    effect_id = _text(request.payload, "effectId")
    assert effect_id is not None
    resolution = _text(request.payload, "resolution")
    if resolution not in ("applied", "rejected", "retry"):
        raise _bad("payload field 'resolution' must be applied, rejected or retry")
    reason = _text(request.payload, "reason", required=resolution == "rejected")
    with server.db.read() as conn:
        effect_run = effects.run_of(conn, effect_id)
    if server.supervisor.handle_of(effect_run) is not None:
        raise RequestError(
            Outcome.REJECTED.value,
            "runnerLive",
            f"run {effect_run} still has a runner; resolve its effects once it has stopped",
        )

    def change() -> tuple[str | None, dict[str, Any]]:
        result = resolve_effect(
            server.db, effect_id, resolution, result=request.payload.get("result"), reason=reason
        )
        return result.run_id, {
            "effectId": effect_id,
            "runId": result.run_id,
            "resolution": resolution,
            "revision": result.revision,
        }

    return _receipted(server, request, change, revision_of=effect_run)


# --- state -------------------------------------------------------------------------------


def _diagnose_snapshot(db: Database, now: int) -> list[dict[str, Any]]:
    """Diagnose on a read-only connection of its own (runs in a worker thread)."""
    conn = db.reader()
    try:
        conn.execute("BEGIN")
        problems = diagnose(conn, now)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return [problem.to_json() for problem in problems]


@operation("state.diagnose")
async def state_diagnose(server: Server, request: Request) -> dict[str, Any]:
    """Contradictory rows, read-only, read in a worker thread so the loop keeps renewing."""
    problems = await asyncio.to_thread(_diagnose_snapshot, server.db, server.db.clock.now_ms())
    return {"problems": problems[:MAX_PROBLEMS], "total": len(problems)}


@operation("state.repair")
async def state_repair(server: Server, request: Request) -> dict[str, Any]:
    """Fix what exact evidence proves; report the rest."""
    report = repair(server.db)
    server.wake()
    return {
        "fixed": [p.to_json() for p in report.fixed],
        "remaining": [p.to_json() for p in report.remaining],
    }


@operation("state.backup")
async def state_backup(server: Server, request: Request) -> dict[str, Any]:
    """An online copy of the database, verified before it is put in place.

    Copying and the integrity check run in a worker thread on a connection of their own,
    so the loop keeps serving and renewing claims meanwhile.
    """
    target = Path(_text(request.payload, "path") or "")
    return await asyncio.to_thread(_backup, server.db, target)


def _backup(db: Database, target: Path) -> dict[str, Any]:
    if not target.is_absolute():
        raise _bad("payload field 'path' must be an absolute path")
    if target.exists():
        raise _bad(f"{target} already exists; choose a new path")
    if not target.parent.is_dir():
        raise _bad(f"directory {target.parent} does not exist")
    partial = target.with_name(f".{target.name}.partial")
    fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    try:
        copy = sqlite3.connect(partial)
        source = db.reader()
        try:
            source.backup(copy)
            check = copy.execute("PRAGMA integrity_check").fetchone()[0]
            digest = copy.execute("SELECT ddl_digest FROM schema_identity").fetchone()[0]
        finally:
            source.close()
            copy.close()
        if check != "ok" or digest != ddl_digest():
            raise RequestError(Outcome.REJECTED.value, "backupFailed", "the copy did not verify")
        os.link(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return {"path": str(target), "bytes": target.stat().st_size, "verified": True}


__all__ = ["dispatch", "operation"]
