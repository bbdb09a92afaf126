"""The lineage operations: fork a run from a node (``run.fork``) or from the node whose
failure ended it (``run.retry``), and let a parked run
continue on changed workflow code (``run.upgrade``, or only what it would change with
``dryRun``).

Runs in the server. Each resolves the run's workflow as it is now (``runs.describe``: a
resolver child, or its cached description while the sources are unchanged), then commits
one store change (``forks.fork``, ``forks.retry``,
``upgrades.upgrade``) with its receipt; a dry run commits nothing and stores no receipt.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from pi_workflows.protocol import Outcome, Request, canonical_json, json_schema
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError
from pi_workflows.server.handlers.registry import (
    bad,
    operation,
    receipted,
    run_id_of,
    stored_receipt,
    text,
)
from pi_workflows.server.handlers.runs import describe, start_input
from pi_workflows.store import carry, forks, upgrades, values
from pi_workflows.store.lifecycle import NewRun
from pi_workflows.store.runs import read_run

_UNSET = object()

MAX_SET_OUTPUTS: Final = 20
"""The most carried outputs one fork may replace (``run fork --set``)."""
MAX_SET_BYTES: Final = 512 * 1024
"""The largest replaced output, as canonical JSON (a larger one fits no request anyway)."""


def _recorded(server: ServerContext, run_id: str) -> tuple[str, str | None, Any, str, str | None]:
    """The run's source ref, project, input, execution mode and origin session."""
    with server.db.read() as conn:
        read_run(conn, run_id)  # RunNotFoundError first: an unknown run is notFound
        row = conn.execute(
            "SELECT s.source_ref, s.project_dir, r.input_json, r.input_ref, r.execution_mode,"
            " r.origin_session FROM run_sources s JOIN runs r USING (run_id) WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        return row[0], row[1], values.load(conn, row[2], row[3]), row[4], row[5]


async def _current(server: ServerContext, run_id: str, run_input: Any = _UNSET) -> NewRun:
    """The run's workflow resolved as it is now, with ``run_input`` (default: the run's).
    The cached description serves only while every source file is byte-for-byte the one it
    described (``DescriptionCache``), so it is the code as it is now either way."""
    ref, project, recorded, _, _ = _recorded(server, run_id)
    return await describe(server, ref, project, recorded if run_input is _UNSET else run_input)


def _visit_of(payload: dict[str, Any]) -> int | None:
    visit = payload.get("visit")
    if visit is not None and (not isinstance(visit, int) or isinstance(visit, bool) or visit < 1):
        raise bad("payload field 'visit' must be a whole number from 1")
    return visit


def _placement(server: ServerContext, request: Request, source_id: str, fresh: NewRun) -> NewRun:
    """``fresh`` to run where the source did (its session, or detached) unless the payload's
    ``originSession`` or ``detached`` says otherwise."""
    payload = request.payload
    session = text(payload, "originSession", required=False)
    detached = payload.get("detached")
    if detached is not None and not isinstance(detached, bool):
        raise bad("payload field 'detached' must be true or false")
    _, _, _, mode, source_session = _recorded(server, source_id)
    if detached is None:
        detached = session is None and mode == "detached"
    if detached and session is not None:
        raise bad("a run is either detached or presented in an origin session, not both")
    return dataclasses.replace(
        fresh,
        origin=f"client:{request.client_id}",
        origin_session=None if detached else (session or source_session),
        detached=detached,
    )


def _fork_receipt(forked: forks.Forked, new_run: NewRun) -> tuple[str | None, dict[str, Any]]:
    """The receipt of a fork (``run.fork`` and ``run.retry``)."""
    again = {(e["nodeId"], e["type"]) for e in forked.applied_again}
    ahead = [
        {**effect, "appliedInSource": (effect["nodeId"], effect["type"]) in again}
        for effect in carry.effects_ahead(new_run.definition, forked.node_id)
    ]
    fork_id = forked.result.run_id
    return fork_id, {
        "runId": fork_id,
        "sourceRunId": forked.source_run_id,
        "nodeId": forked.node_id,
        "visit": forked.visit,
        "workflow": new_run.workflow_name,
        "status": forked.result.status.value,
        "revision": forked.result.revision,
        "carriedAttempts": forked.carried_attempts,
        "carriedEffects": forked.carried_effects,
        "effectsAhead": ahead,
        "appliedAgain": forked.applied_again,
        "outputsSet": forked.outputs_set,
    }


def _refused(node_id: str, problem: str) -> RequestError:
    return RequestError(
        Outcome.REJECTED.value,
        "outputRefused",
        f"cannot set the output of node {node_id}: {problem}",
    )


def _set_outputs(payload: dict[str, Any], definition: dict[str, Any]) -> dict[str, Any]:
    """The ``set`` field (node id -> replacement output), each value checked against the
    node's output contract in ``definition`` (the code the fork runs): an agent's
    ``outputSchema``, a checkpoint's ``answerSchema``, a decision's declared choices. A node
    without a contract takes any JSON value. Refused in one line naming the node."""
    raw = payload.get("set")
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not raw:
        raise bad("payload field 'set' must be an object of node id to output")
    if len(raw) > MAX_SET_OUTPUTS:
        raise bad(f"payload field 'set' names {len(raw)} nodes; the limit is {MAX_SET_OUTPUTS}")
    found = definition.get("nodes")
    nodes: dict[str, Any] = found if isinstance(found, dict) else {}
    for node_id, value in raw.items():
        spec = nodes.get(node_id)
        if not isinstance(spec, dict):
            raise _refused(
                node_id, f"the workflow has no such node (its nodes: {', '.join(sorted(nodes))})"
            )
        size = len(canonical_json(value))
        if size > MAX_SET_BYTES:
            raise _refused(
                node_id, f"the value is {size} bytes of JSON; the limit is {MAX_SET_BYTES}"
            )
        problem = _contract_problem(spec, value)
        if problem is not None:
            raise _refused(node_id, f"it breaks the node's output contract: {problem}")
    return dict(raw)


def _contract_problem(spec: dict[str, Any], value: Any) -> str | None:
    """Why ``value`` breaks the contract a node's ``spec`` records, or None."""
    for key in ("outputSchema", "answerSchema"):
        schema = spec.get(key)
        if isinstance(schema, dict):
            return json_schema.value_problem(schema, value, "output")
    choices = spec.get("choices")
    if spec.get("kind") == "human_decision" and isinstance(choices, list):
        ids = [str(c.get("id")) for c in choices if isinstance(c, dict)]
        chosen = value.get("choice") if isinstance(value, dict) else None
        if chosen not in ids:
            return f'output: a decision\'s output is {{"choice": ...}} with one of {", ".join(ids)}'
    return None


@operation("run.fork", command=True)
async def run_fork(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{fromNode, visit?, input? | inputRef?, set?, originSession?, detached?}``: a new run of
    the source's workflow as it is now, starting at ``visit`` (default: the latest) of
    ``fromNode`` with what the source settled before it carried (``forks.fork``). ``set``
    replaces carried outputs, each checked by its node's contract (``_set_outputs``) and
    recorded as set by a person. ``input`` (when present)
    replaces the source's input (``inputRef``: one this connection uploaded, as for
    ``run.start``, up to 16 MiB). It runs where the source did (its session, or detached)
    unless ``originSession`` or ``detached`` says otherwise. The receipt names the fork
    (``runId``), what it carried and the managed effects ahead of it."""
    source_id = run_id_of(request)
    stored = stored_receipt(server, request)
    if stored is not None:
        return stored
    payload = request.payload
    node_id = text(payload, "fromNode")
    assert node_id is not None
    visit = _visit_of(payload)
    replaced = "input" in payload or "inputRef" in payload
    fresh = await _current(server, source_id, start_input(server, payload) if replaced else _UNSET)
    new_run = _placement(server, request, source_id, fresh)
    outputs = _set_outputs(payload, new_run.definition)

    def change() -> tuple[str | None, dict[str, Any]]:
        forked = forks.fork(server.db, source_id, node_id, new_run, visit=visit, outputs=outputs)
        return _fork_receipt(forked, new_run)

    return receipted(server, request, change)


@operation("run.retry", command=True)
async def run_retry(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{originSession?, detached?}``: ``run.fork`` from the visit whose failure ended the
    run (a failed or timed-out one), with its input, on its workflow as it is now
    (``forks.retry``); the receipt is a fork's. Refused (``invalidTransition``, one line
    naming what to use instead) for a run that did not fail."""
    source_id = run_id_of(request)
    stored = stored_receipt(server, request)
    if stored is not None:
        return stored
    with server.db.read() as conn:  # refuse a run that did not fail before resolving code
        forks.failure_point(conn, read_run(conn, source_id))
    new_run = _placement(server, request, source_id, await _current(server, source_id))

    def change() -> tuple[str | None, dict[str, Any]]:
        return _fork_receipt(forks.retry(server.db, source_id, new_run), new_run)

    return receipted(server, request, change)


@operation("run.upgrade", command=True)
async def run_upgrade(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{dryRun?}``: let a paused or waiting run continue on its workflow's code as it is
    now (``upgrades.upgrade``); the receipt is the plan that was carried out. With
    ``dryRun`` the plan is returned and nothing is stored (no receipt)."""
    run_id = run_id_of(request)
    dry = request.payload.get("dryRun", False)
    if not isinstance(dry, bool):
        raise bad("payload field 'dryRun' must be true or false")
    if not dry:
        stored = stored_receipt(server, request)
        if stored is not None:
            return stored
    fresh = await _current(server, run_id)
    if dry:
        with server.db.read() as conn:
            return {"dryRun": True, **upgrades.plan(conn, run_id, fresh).to_json()}

    def change() -> tuple[str | None, dict[str, Any]]:
        result, found = upgrades.upgrade(server.db, run_id, fresh)
        after = read_run(server.db.conn, run_id)
        return run_id, {
            "dryRun": False,
            **found.to_json(),
            "status": after.status.value,
            "revision": result.revision,
        }

    return receipted(server, request, change)
