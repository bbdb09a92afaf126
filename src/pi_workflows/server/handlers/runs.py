"""The server, workflow and run operations: status, stop, discovery, start, list, get, pause,
resume, cancel, restart, and reading values sent by reference (``blob.read``).

Runs in the server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from pi_workflows.protocol import (
    MAX_INPUT_BYTES,
    NotJsonError,
    Outcome,
    Request,
    canonical_json,
    environment,
    fingerprint,
    input_too_large,
    json_schema,
)
from pi_workflows.server import resolver
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError, ResolveError
from pi_workflows.server.handlers.effects import with_evidence
from pi_workflows.server.handlers.registry import (
    MAX_PATH_CHARS,
    MAX_REASON_CHARS,
    bad,
    limit_of,
    operation,
    receipted,
    run_id_of,
    stored_receipt,
    text,
)
from pi_workflows.server.handlers.uploads import uploaded_input
from pi_workflows.store import children, effects, lifecycle, next_steps, upgrades, values, views
from pi_workflows.store.claims import Claim
from pi_workflows.store.errors import InvalidTransitionError, StoreError
from pi_workflows.store.lifecycle import NewRun, RunEnvironment, SourceRecord
from pi_workflows.store.runs import read_run
from pi_workflows.store.states import (
    CODE_CHANGED,
    ParkReason,
    RunStatus,
    code_changed_advice,
)

log = logging.getLogger(__name__)

# --- server ------------------------------------------------------------------------------


@operation("server.status")
async def server_status(server: ServerContext, request: Request) -> dict[str, Any]:
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
        "descriptionCache": {
            "hits": server.descriptions.hits,
            "misses": server.descriptions.misses,
        },
        "uploads": server.uploads.status(),
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


MAX_DRAIN_SECONDS = 3600
"""The longest drain a ``server.stop`` may ask for."""


@operation("server.stop")
async def server_stop(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{drainSeconds?}``: begin an orderly shutdown after this response is sent; running
    nodes get ``drainSeconds`` (default ``PI_WORKFLOWS_DRAIN_SECONDS``) to reach their next
    node boundary. A second stop while the first drains stops at once."""
    drain = request.payload.get("drainSeconds")
    if drain is not None and (
        not isinstance(drain, int | float)
        or isinstance(drain, bool)
        or not 0 <= drain <= MAX_DRAIN_SECONDS
    ):
        raise bad(f"payload field 'drainSeconds' must be a number from 0 to {MAX_DRAIN_SECONDS}")
    server.request_stop(drain_seconds=None if drain is None else float(drain))
    return {"stopping": True, "drainSeconds": server.drain_seconds}


# --- workflows and runs ------------------------------------------------------------------


def _project(payload: dict[str, Any]) -> str | None:
    project = text(payload, "projectDir", required=False, limit=MAX_PATH_CHARS)
    if project is not None and not Path(project).is_absolute():
        raise bad("payload field 'projectDir' must be an absolute path")
    return project


@operation("workflows.list")
async def workflows_list(server: ServerContext, request: Request) -> dict[str, Any]:
    """Discover workflows in a resolver child."""
    reply = await resolver.call(
        {"op": "list", "projectDir": _project(request.payload), "check": True},
        limit_seconds=server.config.resolve_seconds,
        tail_bytes=server.config.runner_output_tail_bytes,
        template=server.template,
    )
    return {"workflows": reply.get("workflows", [])}


async def describe(
    server: ServerContext, spec: str, project: str | None, run_input: Any, *, fresh: bool = False
) -> NewRun:
    """The run ``spec`` would start: the cached description while its sources are unchanged
    (``DescriptionCache``), else (and always when ``fresh``) a resolver child's, which then
    replaces the cached one. The input is hashed here and never sent to the resolver (it
    may be 16 MiB; one frame is 1 MiB). An input that does not match the workflow's input
    schema (``Workflow(input=...)``, carried in the definition) is refused with
    ``inputInvalid`` naming the first wrong field, before anything is stored. Used by
    ``run.start``, ``run.restart``, ``schedule.add`` and every schedule fire
    (``server/schedules.py``)."""
    try:
        input_hash = fingerprint(run_input)  # here, not in the resolver: an input may be 16 MiB
    except NotJsonError as exc:
        raise ResolveError("inputInvalid", f"the input is not JSON: {exc}") from None
    cached = None if fresh else server.descriptions.get(spec, project)
    if cached is not None:
        reply = {**cached, "inputHash": input_hash}
    else:
        reply = await resolver.call(
            {"op": "describe", "workflow": spec, "projectDir": project, "input": None},
            limit_seconds=server.config.resolve_seconds,
            tail_bytes=server.config.runner_output_tail_bytes,
            template=server.template,
        )
        server.descriptions.put(spec, project, reply)
        reply = {**reply, "inputHash": input_hash}
    _check_input(reply, run_input)
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


def _check_input(reply: dict[str, Any], run_input: Any) -> None:
    """Refuse ``run_input`` unless it matches the described workflow's input schema."""
    definition = reply.get("definition")
    schema = definition.get("inputSchema") if isinstance(definition, dict) else None
    if not isinstance(schema, dict):
        return
    problem = json_schema.value_problem(schema, run_input, "input")
    if problem is not None:
        raise ResolveError(
            "inputInvalid",
            f"the input does not match the input schema of workflow"
            f" {reply.get('workflow')!r}: {problem}",
        )


def run_environment(payload: dict[str, Any], project: str | None) -> RunEnvironment:
    """The environment a run records from ``{environment?, workingDirectory?}`` (the client's
    recorded variables and current directory; docs/authoring.md, "Environment"): those
    variables, checked (a client that sends none gets the server's own default variables),
    and the project directory as its working directory, else the client's directory."""
    raw = payload.get("environment")
    if raw is None:
        variables = environment.snapshot(os.environ)
    elif not isinstance(raw, dict):
        raise bad("payload field 'environment' must be an object of strings")
    else:
        problem = environment.environment_problem(raw)
        if problem is not None:
            raise bad(problem)
        variables = {str(name): str(value) for name, value in raw.items()}
    directory = text(payload, "workingDirectory", required=False, limit=MAX_PATH_CHARS)
    if directory is not None and not Path(directory).is_absolute():
        raise bad("payload field 'workingDirectory' must be an absolute path")
    return RunEnvironment(project or directory, variables)


def start_input(server: ServerContext, payload: dict[str, Any]) -> Any:
    """The input of ``run.start`` (and of ``run.fork`` that replaces its source's): inline
    (``input``) or uploaded first (``inputRef``), at most ``MAX_INPUT_BYTES`` of canonical
    JSON."""
    if "inputRef" in payload:
        if "input" in payload:
            raise bad("send the input inline ('input') or uploaded ('inputRef'), not both")
        run_input = uploaded_input(server, payload["inputRef"])
    else:
        run_input = payload.get("input")
    try:
        size = len(canonical_json(run_input))
    except NotJsonError as exc:
        raise ResolveError("inputInvalid", f"the input is not JSON: {exc}") from None
    if size > MAX_INPUT_BYTES:
        raise RequestError(Outcome.REJECTED.value, "inputTooLarge", input_too_large(size))
    return run_input


MAX_DEADLINE_MS = 366 * 86_400_000
"""The longest run deadline a start may set (as ``Workflow(deadline=)``: 366 days)."""


def deadline_of(payload: dict[str, Any]) -> int | None:
    """``deadlineMs`` of ``run.start``: the run deadline that overrides the workflow's, in
    whole milliseconds from the start, above 0 and at most 366 days; None when absent."""
    value = payload.get("deadlineMs")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_DEADLINE_MS:
        raise bad(
            "payload field 'deadlineMs' must be whole milliseconds above 0 and at most 366"
            " days (--deadline takes 45s, 90m, 2h, 3d, 1w)"
        )
    return value


@operation("run.start", command=True)
async def run_start(server: ServerContext, request: Request) -> dict[str, Any]:
    """Resolve the workflow in a child, then reserve the run with its receipt."""
    stored = stored_receipt(server, request)
    if stored is not None:
        return stored
    spec = text(request.payload, "workflow", limit=MAX_PATH_CHARS)
    assert spec is not None
    session = text(request.payload, "originSession", required=False)
    if session is not None and (len(session) > 200 or not session.isprintable()):
        raise bad("payload field 'originSession' must be a session id of at most 200 characters")
    project = _project(request.payload)
    recorded = run_environment(request.payload, project)
    detached = request.payload.get("detached", False)
    if not isinstance(detached, bool):
        raise bad("payload field 'detached' must be true or false")
    if detached and session is not None:
        raise bad("a run is either detached or presented in an origin session, not both")
    deadline = deadline_of(request.payload)
    new_run = await describe(server, spec, project, start_input(server, request.payload))
    new_run = dataclasses.replace(
        new_run,
        origin=f"client:{request.client_id}",
        origin_session=session,
        detached=detached,
        environment=recorded,
        deadline_ms=deadline,
    )

    def change() -> tuple[str | None, dict[str, Any]]:
        result = lifecycle.reserve(server.db, new_run)
        return result.run_id, {
            "runId": result.run_id,
            "workflow": new_run.workflow_name,
            "originSession": f"detached-{result.run_id}" if detached else session,
            "detached": detached,
            "revision": result.revision,
        }

    return receipted(server, request, change)


@operation("run.list")
async def run_list(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{status?, workflow?, schedule?, since?, after?, limit?, children?, parent?,
    needsPerson?, counts?, lineage?}``: run summaries, newest first, and ``next``, the
    cursor of the following page (null on the last page); ``schedule`` (a name or id) keeps
    the runs that schedule started; ``parent`` the children of that run; ``needsPerson``
    the runs a person must act on (children included); child runs are otherwise left out
    unless ``children`` is true. ``counts`` adds ``counts``, the matching runs per status
    (every filter but ``status`` and the cursor). ``lineage`` (a run id, with ``limit`` only)
    lists the runs that came from that run instead: its children and forks, theirs, and so
    on, oldest generation first, each with ``via``, ``from`` and ``generation``."""
    lineage = text(request.payload, "lineage", required=False)
    if lineage is not None:
        others = sorted(set(request.payload) - {"lineage", "limit"})
        if others:
            raise bad(f"payload field 'lineage' takes no other filter (got {', '.join(others)})")
        with server.db.read() as conn:
            found = views.list_lineage(conn, lineage, limit_of(request.payload, default=100))
        return {"runs": found, "next": None}
    statuses = request.payload.get("status")
    if statuses is not None and (
        not isinstance(statuses, list) or not all(isinstance(s, str) for s in statuses)
    ):
        raise bad("payload field 'status' must be a list of statuses")
    limit = limit_of(request.payload, default=100)
    since = request.payload.get("since")
    if since is not None and (not isinstance(since, int) or isinstance(since, bool)):
        raise bad("payload field 'since' must be a time in epoch milliseconds")
    with_children, needs_person, counted = (
        _flag(request.payload, name) for name in ("children", "needsPerson", "counts")
    )
    filters: dict[str, Any] = {
        "workflow": text(request.payload, "workflow", required=False),
        "since": since,
        "schedule": text(request.payload, "schedule", required=False),
        "with_children": with_children,
        "parent": text(request.payload, "parent", required=False),
        "needs_person": needs_person,
    }
    with server.db.read() as conn:
        try:
            runs, cursor = views.list_runs_page(
                conn,
                statuses=statuses or None,
                after=text(request.payload, "after", required=False),
                limit=limit,
                **filters,
            )
        except ValueError as exc:
            raise bad(f"payload field 'after': {exc}") from None
        if counted:
            return {"runs": runs, "next": cursor, "counts": views.count_runs(conn, **filters)}
    return {"runs": runs, "next": cursor}


def _flag(payload: dict[str, Any], name: str) -> bool:
    """The optional boolean ``payload[name]`` (false when absent)."""
    value = payload.get(name, False)
    if not isinstance(value, bool):
        raise bad(f"payload field {name!r} must be true or false")
    return value


@operation("run.get")
async def run_get(server: ServerContext, request: Request) -> dict[str, Any]:
    """The full run view; an ambiguous effect carries the ``evidence`` its runner left
    (``handlers.effects.with_evidence``)."""
    with server.db.read() as conn:
        view = views.run_view(conn, run_id_of(request))
        ambiguous = [
            effects.effect_record(conn, str(e["effectId"]))
            for e in view["effects"]
            if e.get("status") == "ambiguous"
        ]
    if ambiguous:
        found = {r["effectId"]: with_evidence(server, r)["evidence"] for r in ambiguous}
        view["effects"] = [
            {**e, "evidence": found[e["effectId"]]} if e["effectId"] in found else e
            for e in view["effects"]
        ]
        view["nextStep"] = next_steps.next_step(view)  # the evidence changes what to do
    return {"run": view}


def _status_receipt(server: ServerContext, run_id: str) -> tuple[str | None, dict[str, Any]]:
    run = read_run(server.db.conn, run_id)
    return run_id, {"runId": run_id, "status": run.status.value, "revision": run.revision}


@operation("run.pause", command=True)
async def run_pause(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{reason?}``: pause a queued or waiting run; a running one parks at its runner's next
    node boundary (at most ``PI_WORKFLOWS_DRAIN_SECONDS``), else at once, and its runner
    stops. ``reason`` becomes the park detail. The runs below it in its tree are paused
    the same way, each at its own boundary, after it."""
    run_id = run_id_of(request)
    reason = text(request.payload, "reason", required=False, limit=MAX_REASON_CHARS)
    body = await _pause_root(server, request, run_id, reason)
    # No child starts under a paused run (``children.paused_above``), but a run that was
    # draining may have recorded children of its own meanwhile: read the tree again until a
    # pass finds no run below that is still active and not yet handled.
    handled: set[str] = set()
    for _ in range(children.MAX_DEPTH + 2):
        with server.db.read() as conn:
            below = [
                child
                for child in children.descendants(conn, run_id)
                if child not in handled and read_run(conn, child).status in _PAUSABLE
            ]
        if not below:
            break
        handled.update(below)
        await asyncio.gather(*(_pause_below(server, child, reason) for child in below))
    return body


_PAUSABLE = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING})


async def _pause_below(server: ServerContext, run_id: str, reason: str | None) -> None:
    """Pause one run below a paused parent: drained to its next boundary when it runs, at
    once otherwise; a run that ended or paused meanwhile is left as it is."""
    why = reason or "its parent run was paused"
    handle = server.supervisor.handle_of(run_id)
    try:
        if handle is not None and server.config.drain_seconds > 0:

            def park_here(claim: Claim) -> object:
                return lifecycle.park(server.db, claim, ParkReason.USER_PAUSED, why)

            done, _ = await server.supervisor.drain(
                handle, park_here, server.config.drain_seconds, kill_reason="cancelled"
            )
            if done:
                return
            handle = server.supervisor.handle_of(run_id)
        run = read_run(server.db.conn, run_id)
        if run.status is RunStatus.RUNNING:
            claim = handle.identity.claim if handle is not None else None
            lifecycle.park(
                server.db, lifecycle.live_or_control(server.db, run_id, claim),
                ParkReason.USER_PAUSED, why,
            )  # fmt: skip
            if handle is not None:
                server.supervisor.terminate(handle, "cancelled")
        elif run.status in (RunStatus.QUEUED, RunStatus.WAITING):
            lifecycle.pause(server.db, run_id, detail=why)
    except StoreError as exc:  # it ended, or its claim moved on: the tree pause goes on
        log.info("run %s below a paused run was not paused: %s", run_id, exc)
    server.wake(run_id)


async def _pause_root(
    server: ServerContext, request: Request, run_id: str, reason: str | None
) -> dict[str, Any]:
    handle = server.supervisor.handle_of(run_id)
    if handle is not None and server.config.drain_seconds > 0:
        stored = stored_receipt(server, request)
        if stored is not None:
            return stored

        def park_here(claim: Claim) -> dict[str, Any]:
            def parked() -> tuple[str | None, dict[str, Any]]:
                lifecycle.park(server.db, claim, ParkReason.USER_PAUSED, reason)
                return _status_receipt(server, run_id)

            return receipted(server, request, parked)

        done, body = await server.supervisor.drain(
            handle, park_here, server.config.drain_seconds, kill_reason="cancelled"
        )
        if done:
            assert isinstance(body, dict)
            return body
        handle = server.supervisor.handle_of(run_id)

    def change() -> tuple[str | None, dict[str, Any]]:
        run = read_run(server.db.conn, run_id)
        if run.status is RunStatus.PAUSED:
            return _status_receipt(server, run_id)  # already paused (by itself, or earlier)
        if run.status is RunStatus.RUNNING:
            claim = handle.identity.claim if handle is not None else None
            lifecycle.park(
                server.db, lifecycle.live_or_control(server.db, run_id, claim),
                ParkReason.USER_PAUSED, reason,
            )  # fmt: skip
        else:
            lifecycle.pause(server.db, run_id, detail=reason)
        return _status_receipt(server, run_id)

    body = receipted(server, request, change)
    if handle is not None and not body["_adopted"]:
        server.supervisor.terminate(handle, "cancelled")
    return body


@operation("run.resume", command=True)
async def run_resume(server: ServerContext, request: Request) -> dict[str, Any]:
    """Queue a paused run again from its last durable boundary, and in the same transaction
    every run below it in its tree that a pause stopped (``userPaused``); runs parked for
    another reason (an ambiguous effect, changed source) wait for their own resume.

    A run parked because its code changed (``workflowSourceChanged``) is refused, with what
    to do instead (``code_changed_advice``), unless its code is as it was again: resuming
    it would only park it again at its next runner or answer."""
    run_id = run_id_of(request)
    stored = stored_receipt(server, request)
    if stored is not None:
        return stored
    with server.db.read() as conn:
        run = read_run(conn, run_id)
    if run.status is RunStatus.PAUSED and run.park_reason == ParkReason.WORKFLOW_SOURCE_CHANGED:
        await _refuse_on_changed_code(server, run_id, run.status.value)

    def change() -> tuple[str | None, dict[str, Any]]:
        with server.db.atomic("command.run.resume"):
            lifecycle.resume(server.db, run_id)
            for child in children.descendants(server.db.conn, run_id):
                found = read_run(server.db.conn, child)
                if (found.status, found.park_reason) == (RunStatus.PAUSED, "userPaused"):
                    lifecycle.resume(server.db, child)
                elif found.status is RunStatus.WAITING:
                    # A run below that the pause did not reach in time (it was waiting on
                    # children it had just recorded): the children it held back start now.
                    lifecycle.refill(server.db, child)
        return _status_receipt(server, run_id)

    return receipted(server, request, change)


@operation("run.cancel", command=True)
async def run_cancel(server: ServerContext, request: Request) -> dict[str, Any]:
    """Commit the cancellation of the run and its whole tree (with its receipt) first, then
    stop their runners."""
    run_id = run_id_of(request)
    reason = (
        text(request.payload, "reason", required=False, limit=MAX_REASON_CHARS)
        or "cancelled by request"
    )
    handles = server.supervisor.tree_handles(run_id)
    claims = {h.run_id: h.identity.claim for h in handles}

    def change() -> tuple[str | None, dict[str, Any]]:
        lifecycle.cancel(server.db, run_id, claim=claims.get(run_id), reason=reason, claims=claims)
        return _status_receipt(server, run_id)

    body = receipted(server, request, change)
    if not body["_adopted"]:
        for handle in handles:
            server.supervisor.terminate(handle, "cancelled")
    return body


async def _resolved_now(server: ServerContext, run_id: str, *, fresh: bool) -> NewRun:
    """The run's workflow (its source ref, project and input) resolved as it is now."""
    with server.db.read() as conn:
        read_run(conn, run_id)
        row = conn.execute(
            "SELECT s.source_ref, s.project_dir, r.input_json, r.input_ref FROM run_sources s"
            " JOIN runs r USING (run_id) WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        run_input = values.load(conn, row[2], row[3])
    return await describe(server, row[0], row[1], run_input, fresh=fresh)


async def _refuse_on_changed_code(server: ServerContext, run_id: str, status: str) -> None:
    """Raise the ``run resume`` refusal of a run parked on changed code unless its code is
    byte for byte the one it recorded again (the description cache is keyed by the files'
    bytes, so this is the code as it is now)."""
    try:
        now = await _resolved_now(server, run_id, fresh=False)
    except ResolveError:
        now = None  # it does not even load now: not the code it recorded
    if now is not None:
        with server.db.read() as conn:
            if upgrades.plan(conn, run_id, now).unchanged:
                return
    raise InvalidTransitionError(
        run_id, "resume", status, f"{CODE_CHANGED}; {code_changed_advice(run_id)}"
    )


@operation("run.restart", command=True)
async def run_restart(server: ServerContext, request: Request) -> dict[str, Any]:
    """Re-resolve the run's workflow as it is now and queue the run from its start."""
    run_id = run_id_of(request)
    stored = stored_receipt(server, request)
    if stored is not None:
        return stored
    fresh = await _resolved_now(server, run_id, fresh=True)
    handles = [h for h in server.supervisor.tree_handles(run_id) if h.run_id != run_id]
    claims = {h.run_id: h.identity.claim for h in handles}

    def change() -> tuple[str | None, dict[str, Any]]:
        lifecycle.restart(
            server.db, run_id, new_source=(fresh, fresh.definition_digest), claims=claims
        )
        return _status_receipt(server, run_id)

    body = receipted(server, request, change)
    if not body["_adopted"]:
        for handle in handles:  # the old round's children, cancelled with it
            server.supervisor.terminate(handle, "cancelled")
    return body


@operation("blob.read")
async def blob_read(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{digest, offset?, length?}``: a base64 slice of a stored value (a ``*Ref``)."""
    digest = text(request.payload, "digest")
    offset = request.payload.get("offset", 0)
    length = request.payload.get("length", values.CHUNK_BYTES)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (offset, length)):
        raise bad("payload fields 'offset' and 'length' must be non-negative integers")
    with server.db.read() as conn:
        try:
            return values.read_chunk(conn, str(digest), offset, length)
        except LookupError as exc:
            raise RequestError(Outcome.NOT_FOUND.value, "notFound", str(exc)) from None
