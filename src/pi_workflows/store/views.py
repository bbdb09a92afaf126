"""Read models: the run view clients show, run summaries, the runner's narrow state, counts.

Owns no table; reads only. Shapes are the wire shapes of ``docs/protocol.md`` (camelCase).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from pi_workflows.store import (
    attempt_logs,
    children,
    cleanups,
    deadlines,
    delivery,
    effects,
    interactions,
    jsoncol,
    lineage,
    next_steps,
    progress,
    published,
    run_rows,
    schedules,
    settings,
    signals,
    tree_view,
    values,
    view_bounds,
    waits,
)
from pi_workflows.store.errors import RunNotFoundError
from pi_workflows.store.runs import read_run
from pi_workflows.store.states import view_status

VIEW_INLINE_LIMIT = 64 * 1024
"""Largest input or output ``run.get`` includes inline; larger ones come as a ``*Ref``."""

VIEW_MAX_ITEMS = 500
"""Most attempts and effects ``run.get`` lists (the newest); the rest are counted."""

VIEW_MAX_TRACEBACKS = 5
"""Tracebacks ``run.get`` includes (of the newest attempts that have one); ``run.logs``
has every attempt's."""


def _view_value(
    conn: sqlite3.Connection, inline: str | None, ref: str | None
) -> tuple[Any, dict[str, Any] | None]:
    """A stored value for ``run.get``: ``(value, None)``, or ``(None, ref)`` when large."""
    if ref is not None:
        stored = values.reference(conn, ref)
        if stored.size > VIEW_INLINE_LIMIT:
            return None, stored.to_json()
    return values.load(conn, inline, ref), None


SUMMARY_COLUMNS = (
    "run_id, workflow_name, status, run_status, queue_status, park_reason, current_node,"
    " revision, created_at, updated_at, finished_at, parent_run_id, forked_from"
)


def _summary(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "runId": row[0],
        "workflow": row[1],
        "status": row[2],
        "runStatus": row[3],
        "queueStatus": row[4],
        "parkReason": row[5],
        "currentNode": row[6],
        "revision": row[7],
        "createdAt": row[8],
        "updatedAt": row[9],
        "finishedAt": row[10],
        "parentRunId": row[11],
        "forkedFrom": row[12],
    }


def _with_children(conn: sqlite3.Connection, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each waiting run's progress through the join it waits on (``children``: ``{total,
    ended, failed, ...}``), or None: a parent in ``run list`` shows ``3/10 done``."""
    for run in runs:
        found = None
        if run.get("runStatus") in ("waiting", "paused"):
            row = conn.execute(
                "SELECT j.wait_id FROM run_joins j JOIN run_waits w USING (wait_id)"
                " WHERE j.parent_run_id = ? AND w.status = 'pending'",
                (run["runId"],),
            ).fetchone()
            join = None if row is None else children.read_join(conn, row[0])
            if join is not None:
                found = {**join.progress(), "counts": tree_view.join_counts(conn, join.wait_id)}
        run["children"] = found
    return runs


def list_runs(
    conn: sqlite3.Connection, statuses: list[str] | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    """Run summaries from the viewer projection, newest first."""
    if statuses:
        marks = ", ".join("?" for _ in statuses)
        rows = conn.execute(
            f"SELECT {SUMMARY_COLUMNS} FROM viewer_runs WHERE status IN ({marks})"
            " ORDER BY created_at DESC, run_id DESC LIMIT ?",
            (*statuses, limit),
        ).fetchall()
    else:
        rows = conn.execute(
            f"SELECT {SUMMARY_COLUMNS} FROM viewer_runs ORDER BY created_at DESC, run_id DESC"
            " LIMIT ?",
            (limit,),
        ).fetchall()
    return _with_schedules(conn, [_summary(row) for row in rows])


def _with_schedules(conn: sqlite3.Connection, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each summary with ``schedule``: ``{scheduleId, name, fireAt}`` of the schedule that
    started the run, or null."""
    started = schedules.provenance(conn, [str(run["runId"]) for run in runs])
    for run in runs:
        run["schedule"] = started.get(str(run["runId"]))
    return runs


def list_session_runs(conn: sqlite3.Connection, session_id: str, limit: int = 20) -> list[Any]:
    """Summaries of the session's runs: every unfinished one and the newest finished ones;
    a parent waiting on its children carries their progress (``children``), and a child
    run its ``parentRunId``; root runs come before children, so a fan_out's children never
    push their parent out of the list (the widget shows the parent's progress); a run whose
    unfinished attempt published progress carries it (``progress``: ``{nodeId, text, at,
    updates, published}``, else None)."""
    rows = conn.execute(
        f"SELECT {SUMMARY_COLUMNS} FROM viewer_runs WHERE run_id IN (SELECT run_id FROM runs"
        " WHERE origin_session = ?) ORDER BY finished_at IS NOT NULL, parent_run_id IS NOT NULL,"
        " created_at DESC LIMIT ?",
        (session_id, limit),
    ).fetchall()
    runs = _with_children(conn, [_summary(row) for row in rows])
    for run in runs:
        run["progress"] = (
            None if run["finishedAt"] is not None else progress.current(conn, str(run["runId"]))
        )
    return runs


def list_interactions(
    conn: sqlite3.Connection, session_id: str | None = None, limit: int = 1000
) -> list[dict[str, Any]]:
    """Open requests (pending or validating), oldest first; of one session, or of all."""
    sql = (
        "SELECT q.request_id, q.run_id, r.workflow_name, q.node_id, q.kind, q.status,"
        " q.request_json, q.deadline_at, q.origin_session, q.created_at, r.status, q.for_person"
        " FROM interactive_requests q JOIN runs r USING (run_id)"
        " WHERE q.status IN ('pending', 'validating')"
    )
    args: tuple[Any, ...] = (limit,)
    if session_id is not None:
        sql += " AND q.origin_session = ?"
        args = (session_id, limit)
    rows = conn.execute(f"{sql} ORDER BY q.created_at, q.rowid LIMIT ?", args).fetchall()
    return [
        {
            "requestId": row[0],
            "runId": row[1],
            "workflow": row[2],
            "nodeId": row[3],
            "kind": row[4],
            "forPerson": bool(row[11]),
            "status": row[5],
            "request": interactions.request_for_clients(jsoncol.loads(row[6]), row[0]),
            "deadlineAt": row[7],
            "originSession": row[8],
            "createdAt": row[9],
            "runStatus": row[10],
        }
        for row in rows
    ]


def run_view(conn: sqlite3.Connection, run_id: str) -> dict[str, Any]:
    """The full ``RunView`` of one run (``run show --json``)."""
    run = read_run(conn, run_id)
    view = conn.execute(
        "SELECT queue_status, generation FROM viewer_runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    if view is None:
        raise RunNotFoundError(run_id)
    value_row = conn.execute(
        "SELECT input_json, input_ref, output_json, output_ref FROM runs WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    run_input, input_ref = _view_value(conn, value_row[0], value_row[1])
    run_output, output_ref = _view_value(conn, value_row[2], value_row[3])
    waiting = conn.execute(
        "SELECT request_id, node_id, kind, request_json, deadline_at, status,"
        " for_person"
        " FROM interactive_requests"
        " WHERE run_id = ? AND status IN ('pending', 'validating')",
        (run_id,),
    ).fetchone()
    attempt_total = conn.execute(
        "SELECT COUNT(*) FROM node_attempts WHERE run_id = ?", (run_id,)
    ).fetchone()[0]
    attempt_rows = conn.execute(
        "SELECT * FROM (SELECT attempt_id, node_id, visit, attempt_no, status, round, rowid AS r,"
        " started_at, finished_at, error, try_no, retry_outcome, carried_from, settings_change,"
        " output_set_by FROM node_attempts WHERE run_id = ?"
        " ORDER BY started_at DESC, rowid DESC LIMIT ?) ORDER BY r",
        (run_id, VIEW_MAX_ITEMS),
    ).fetchall()
    logs = attempt_logs.summaries(conn, run_id)
    progressed = progress.of_attempts(conn, run_id)
    newest_failures = [r[0] for r in reversed(attempt_rows) if logs.get(r[0], {}).get("traceback")]
    shown_tracebacks = set(newest_failures[:VIEW_MAX_TRACEBACKS])
    effect_rows = effects.list_for_run(conn, run_id)
    runner = conn.execute(
        "SELECT pid, status, runner_epoch FROM run_runners WHERE run_id = ? AND status != 'exited'"
        " ORDER BY runner_epoch DESC LIMIT 1",
        (run_id,),
    ).fetchone()
    shown = {
        "runId": run.run_id,
        "workflow": run.workflow_name,
        "status": view_status(run.status, run.park_reason),
        "runStatus": run.status.value,
        "queueStatus": view[0],
        "parkReason": run.park_reason,
        "parkDetail": run.park_detail,
        "revision": run.revision,
        "generation": view[1],
        "round": run.round,
        "currentNode": run.current_node,
        "waitingOn": None
        if waiting is None
        else {
            "requestId": waiting[0],
            "nodeId": waiting[1],
            "kind": waiting[2],
            "forPerson": bool(waiting[6]),
            "request": interactions.request_for_clients(jsoncol.loads(waiting[3]), waiting[0]),
            "deadlineAt": waiting[4],
            "status": waiting[5],
            "delivery": _delivery(conn, waiting[0]),
        },
        "wait": _wait_view(conn, run_id),
        "signals": [s.summary() for s in signals.list_signals(conn, run_id, VIEW_MAX_ITEMS)],
        "signalsPending": signals.pending_count(conn, run_id),
        "originSession": run.origin_session,
        "executionMode": conn.execute(
            "SELECT execution_mode FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()[0],
        "origin": run.origin,
        "environment": _environment_view(conn, run_id),
        **tree_view.tree_fields(conn, run_id),
        "lineage": lineage.lineage_of(conn, run_id),
        "schedule": schedules.provenance(conn, [run_id]).get(run_id),
        "messages": run_messages(conn, run_id),
        "input": run_input,
        "inputRef": input_ref,
        "output": run_output,
        "outputRef": output_ref,
        "error": run.error,
        "stepCount": run.step_count,
        "progress": progress.latest(conn, run_id),
        # What its callbacks published with ctx.publish (store/published.py): keys only.
        "published": published.keys(conn, run_id),
        # Live settings (store/settings.py): None when the workflow declares none.
        "settings": settings.run_view(conn, run_id),
        # The run deadline (store/deadlines.py): None when the run has none.
        "deadline": deadlines.view(conn, run_id),
        # Its newest cleanup after a cancel or a run deadline (store/cleanups.py), or None.
        "cleanup": _cleanup_view(conn, run_id),
        "attempts": [
            {
                "attemptId": row[0],
                "nodeId": row[1],
                "visit": row[2],
                "attemptNo": row[3],
                "status": row[4],
                "round": row[5],
                "startedAt": row[7],
                "finishedAt": row[8],
                "error": row[9],
                "tryNo": row[10],
                "retryOutcome": row[11],
                "carriedFrom": row[12],
                "settingsChange": row[13],
                "outputSetBy": row[14],
                **_attempt_log_fields(logs.get(row[0]), row[0] in shown_tracebacks),
                "progress": progressed.get(row[0]),
            }
            for row in attempt_rows
        ],
        "attemptsOmitted": attempt_total - len(attempt_rows),
        "effects": [
            {
                "effectId": e.effect_id,
                "type": e.effect_type,
                "kind": e.effect_kind,
                "nodeId": e.node_id,
                "visit": e.visit,
                "status": e.status.value,
            }
            for e in effect_rows[-VIEW_MAX_ITEMS:]
        ],
        "effectsOmitted": max(0, len(effect_rows) - VIEW_MAX_ITEMS),
        "runner": None
        if runner is None
        else {"pid": runner[0], "status": runner[1], "runnerEpoch": runner[2]},
        "createdAt": run.created_at,
        "roundStartedAt": _round_started(conn, run_id, run.created_at),
        "updatedAt": run.updated_at,
        "finishedAt": run.finished_at,
    }
    shown["nextStep"] = next_steps.next_step(shown)
    return shown


def _cleanup_view(conn: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    found = cleanups.latest(conn, run_id)
    return None if found is None else found.to_json()


def _delivery(conn: sqlite3.Connection, request_id: str) -> dict[str, Any] | None:
    """Where the open model step's delivery to its seat stands (``store/delivery.py``)."""
    found = delivery.of_request(conn, request_id)
    return None if found is None else found.to_json()


def _environment_view(conn: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    """The run's recorded working directory and the names of its variables: never their
    values (a variable may hold a secret, and views are printed and pushed)."""
    try:
        recorded = run_rows.read_environment(conn, run_id)
    except LookupError:
        return None
    return {"workingDirectory": recorded.working_dir, "variables": sorted(recorded.variables)}


def _round_started(conn: sqlite3.Connection, run_id: str, created_at: int) -> int:
    """When the run's current round began: its last restart, else its creation."""
    row = conn.execute(
        "SELECT MAX(at) FROM events WHERE run_id = ? AND type = 'run.restarted'", (run_id,)
    ).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else created_at


def _attempt_log_fields(log: dict[str, Any] | None, with_traceback: bool) -> dict[str, Any]:
    """``{logBytes, hasTraceback, traceback}`` of one attempt for ``run.get``."""
    trace = None if log is None else log.get("traceback")
    return {
        "logBytes": 0 if log is None else log["logBytes"],
        "hasTraceback": trace is not None,
        "traceback": trace if with_traceback else None,
    }


def list_runs_page(
    conn: sqlite3.Connection,
    *,
    statuses: list[str] | None = None,
    workflow: str | None = None,
    since: int | None = None,
    after: str | None = None,
    limit: int = 100,
    schedule: str | None = None,
    with_children: bool = False,
    parent: str | None = None,
    needs_person: bool = False,
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of run summaries, newest first, and the cursor of the next page (or None).

    Filters: user-facing ``statuses``, ``workflow`` name, created at or after ``since``
    (epoch ms), started by the schedule ``schedule`` (a name, of deleted schedules too, or
    an id), the direct children of ``parent``, and (``needs_person``) the runs a person
    must act on (``NEEDS_PERSON``). Child runs are left out unless ``with_children``,
    ``parent`` or ``needs_person``. ``after`` is the cursor a previous page returned
    (``"<createdAt>:<runId>"`` of its last run); a malformed cursor raises ``ValueError``.
    """
    where, args = _list_filters(
        conn,
        workflow=workflow,
        since=since,
        schedule=schedule,
        with_children=with_children,
        parent=parent,
        needs_person=needs_person,
    )
    if statuses:
        where.append(f"status IN ({', '.join('?' for _ in statuses)})")
        args.extend(statuses)
    if after is not None:
        created, _, last_id = after.partition(":")
        if not created.isdigit() or not last_id:
            raise ValueError(f"{after!r} is not a run list cursor")
        where.append("(created_at < ? OR (created_at = ? AND run_id < ?))")
        args.extend([int(created), int(created), last_id])
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    rows = conn.execute(
        f"SELECT {SUMMARY_COLUMNS} FROM viewer_runs{clause}"
        " ORDER BY created_at DESC, run_id DESC LIMIT ?",
        (*args, limit + 1),
    ).fetchall()
    runs = _with_children(conn, _with_schedules(conn, [_summary(row) for row in rows[:limit]]))
    more = len(rows) > limit
    cursor = f"{runs[-1]['createdAt']}:{runs[-1]['runId']}" if more and runs else None
    return runs, cursor


NEEDS_PERSON = (
    "(park_reason IS NOT 'userPaused' AND (status IN ('paused', 'ambiguous')"
    " OR run_id IN (SELECT run_id FROM interactive_requests"
    " WHERE status IN ('pending', 'validating') AND kind IN ('checkpoint', 'decision'))))"
)
"""The runs a person must act on: parked for a reason other than a person's own pause (an
ambiguous effect, changed code, exhausted retries, a crash without progress...), or
waiting on a checkpoint or a human decision (agent steps are the model's work). A run a
person paused is theirs to resume: it is left out, whatever it waits on."""


def _list_filters(
    conn: sqlite3.Connection,
    *,
    workflow: str | None,
    since: int | None,
    schedule: str | None,
    with_children: bool,
    parent: str | None,
    needs_person: bool,
) -> tuple[list[str], list[Any]]:
    """The ``WHERE`` terms and arguments of ``run.list``'s filters other than the status
    and the cursor (``run.list``'s page and its ``counts`` share them)."""
    where: list[str] = []
    args: list[Any] = []
    if parent is not None:
        where.append("run_id IN (SELECT run_id FROM runs WHERE parent_run_id = ?)")
        args.append(parent)
    elif not (with_children or needs_person):
        where.append("parent_run_id IS NULL")
    if needs_person:
        where.append(NEEDS_PERSON)
    if workflow is not None:
        where.append("workflow_name = ?")
        args.append(workflow)
    if since is not None:
        where.append("created_at >= ?")
        args.append(since)
    if schedule is not None:
        ids = schedules.ids_named(conn, schedule) or [""]
        where.append(
            "run_id IN (SELECT run_id FROM runs WHERE schedule_id IN"
            f" ({', '.join('?' for _ in ids)}))"
        )
        args.extend(ids)
    return where, args


def count_runs(
    conn: sqlite3.Connection,
    *,
    workflow: str | None = None,
    since: int | None = None,
    schedule: str | None = None,
    with_children: bool = False,
    parent: str | None = None,
    needs_person: bool = False,
) -> dict[str, int]:
    """How many runs match ``list_runs_page``'s filters (all but the status), per
    user-facing status: what a run list shows beside its page."""
    where, args = _list_filters(
        conn,
        workflow=workflow,
        since=since,
        schedule=schedule,
        with_children=with_children,
        parent=parent,
        needs_person=needs_person,
    )
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    rows = conn.execute(
        f"SELECT status, COUNT(*) FROM viewer_runs{clause} GROUP BY status ORDER BY status",
        args,
    ).fetchall()
    return {str(status): int(count) for status, count in rows}


def list_lineage(conn: sqlite3.Connection, run_id: str, limit: int = 100) -> list[dict[str, Any]]:
    """Summaries of the runs that came from ``run_id`` (``lineage.descendants``: its children
    and forks, theirs, and so on), each with ``via`` (``child`` or ``fork``), ``from`` (the
    run it came from) and ``generation``, oldest generation first, then oldest first."""
    read_run(conn, run_id)  # RunNotFoundError for an unknown run
    found = lineage.descendants(conn, run_id, limit)
    if not found:
        return []
    facts = {item["runId"]: item for item in found}
    marks = ", ".join("?" for _ in facts)
    rows = conn.execute(
        f"SELECT {SUMMARY_COLUMNS} FROM viewer_runs WHERE run_id IN ({marks})", tuple(facts)
    ).fetchall()
    runs = [{**_summary(row), **_relation(facts[row[0]])} for row in rows]
    runs.sort(key=lambda run: (run["generation"], run["createdAt"], run["runId"]))
    return _with_children(conn, _with_schedules(conn, runs))


def _relation(item: dict[str, Any]) -> dict[str, Any]:
    return {"via": item["via"], "from": item["from"], "generation": item["generation"]}


def node_output(conn: sqlite3.Connection, run_id: str, node_id: str) -> dict[str, Any] | None:
    """The latest settled attempt of ``node_id`` in the run's current round, with its output
    (inline up to ``VIEW_INLINE_LIMIT``, else ``outputRef``), or None if it has none."""
    run = read_run(conn, run_id)
    row = conn.execute(
        "SELECT attempt_id, visit, status, output_json, output_ref, error FROM node_attempts"
        " WHERE run_id = ? AND round = ? AND node_id = ?"
        " AND status IN ('completed', 'failed', 'timed_out') ORDER BY rowid DESC LIMIT 1",
        (run_id, run.round, node_id),
    ).fetchone()
    if row is None:
        return None
    output, ref = _view_value(conn, row[3], row[4])
    return {
        "runId": run_id,
        "nodeId": node_id,
        "attemptId": row[0],
        "visit": row[1],
        "status": row[2],
        "output": output,
        "outputRef": ref,
        "error": row[5],
    }


RUNNER_STATE_BUDGET = 256 * 1024
"""Encoded bytes of node outputs (ids, values or references) one ``state.get`` (or
``state.outputs``) reply carries at most; the rest follow in further ``state.outputs``
pages. Every value is at most ``values.INLINE_LIMIT`` inline (larger ones travel as
references), so a page stays far below a frame however many nodes a run has settled; the
rest of a ``state.get`` reply (the input and the active request, each inline only up to the
same limit, and one result and visit count per node) is what remains of the frame."""

_ENTRY_COST = 16  # quotes, colon, comma and braces around one node's entry
_REF_COST = 96  # one output reference: {"digest": <64 hex>, "bytes": N}


def _settled_outputs(
    conn: sqlite3.Connection, run_id: str, round_no: int
) -> tuple[dict[str, tuple[str | None, str | None]], dict[str, Any], dict[str, int]]:
    """The latest settled visit of each node of round ``round_no``: its stored output
    (inline text, blob digest) when it completed, every node's result, and visit counts."""
    settled = conn.execute(
        "SELECT node_id, status, output_json, error, output_ref FROM node_attempts"
        " WHERE run_id = ? AND round = ? AND status IN ('completed', 'failed', 'timed_out')"
        " ORDER BY finished_at, rowid",
        (run_id, round_no),
    ).fetchall()
    stored: dict[str, tuple[str | None, str | None]] = {}
    results: dict[str, Any] = {}
    visits: dict[str, int] = {}
    for node_id, status, output_json, error, output_ref in settled:
        visits[node_id] = visits.get(node_id, 0) + 1
        stored.pop(node_id, None)  # a node's output is that of its latest settled visit
        if status == "completed":
            stored[node_id] = (output_json, output_ref)
            results[node_id] = {"outcome": "ok"}
        else:
            results[node_id] = {
                "outcome": "failed" if status == "failed" else "timed_out",
                "error": error,
            }
    return stored, results, visits


def _outputs_page(
    conn: sqlite3.Connection,
    stored: dict[str, tuple[str | None, str | None]],
    after: str | None,
) -> dict[str, Any]:
    """``{outputs, outputRefs, moreOutputs}``: the outputs of the nodes after ``after`` in
    node-id order, up to ``RUNNER_STATE_BUDGET`` bytes; ``moreOutputs`` is the cursor of
    the next page (the last node id included) or None."""
    outputs: dict[str, Any] = {}
    refs: dict[str, Any] = {}
    spent = 0
    for node_id in sorted(stored):
        if after is not None and node_id <= after:
            continue
        inline, ref = stored[node_id]
        value = _REF_COST if ref is not None else len((inline or "null").encode("utf-8"))
        cost = len(node_id.encode("utf-8")) + _ENTRY_COST + value
        if (outputs or refs) and spent + cost > RUNNER_STATE_BUDGET:
            last = max([*outputs, *refs])
            return {"outputs": outputs, "outputRefs": refs, "moreOutputs": last}
        spent += cost
        if ref is None:
            outputs[node_id] = jsoncol.loads(inline)
        else:
            refs[node_id] = values.reference(conn, ref).to_json()
    return {"outputs": outputs, "outputRefs": refs, "moreOutputs": None}


def runner_outputs(conn: sqlite3.Connection, run_id: str, after: str) -> dict[str, Any]:
    """A further page of node outputs (``state.outputs``) after the cursor ``after``, with
    the run's execution revision so the runner can check nothing moved between pages."""
    run = read_run(conn, run_id)
    stored, _, _ = _settled_outputs(conn, run_id, run.round)
    return {**_outputs_page(conn, stored, after), "revision": run.execution_revision}


def runner_state(conn: sqlite3.Connection, run_id: str) -> dict[str, Any]:
    """What a runner needs to continue a run (``state.get``): never whole histories, and
    node outputs only up to ``RUNNER_STATE_BUDGET`` (``moreOutputs`` says a page follows)."""
    run = read_run(conn, run_id)
    input_row = conn.execute(
        "SELECT input_json, input_ref FROM runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    stored, results, visits = _settled_outputs(conn, run_id, run.round)
    active_id = run.unrouted_attempt
    if active_id is None:
        row = conn.execute(
            "SELECT attempt_id FROM node_attempts WHERE run_id = ?"
            " AND status IN ('running', 'waiting')",
            (run_id,),
        ).fetchone()
        active_id = None if row is None else row[0]
    return {
        "input": jsoncol.loads(input_row[0]),
        "inputRef": None
        if input_row[1] is None
        else values.reference(conn, input_row[1]).to_json(),
        "stepCount": run.step_count,
        "round": run.round,
        "currentNode": run.current_node,
        **_outputs_page(conn, stored, None),
        "results": results,
        "visits": visits,
        "active": None if active_id is None else _active(conn, active_id),
        # A runner is fenced by the execution revision (the revision rule, store/runs.py).
        "revision": run.execution_revision,
        **_tree_and_schedule(conn, run_id),
        # Set while the run's cleanup node is due: the runner runs only that node.
        "cleanup": cleanups.runner_view(conn, run_id),
    }


def _tree_and_schedule(conn: sqlite3.Connection, run_id: str) -> dict[str, Any]:
    """``{depth, fireAt}``: how deep the run nests, and the fire time of the schedule fire
    that started it (``ctx.fire_at``; None for a run no schedule started)."""
    row = conn.execute(
        "SELECT depth, schedule_fire_at FROM runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    return {"depth": row[0], "fireAt": row[1]}


def _active(conn: sqlite3.Connection, attempt_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT attempt_id, node_id, visit, attempt_no, status, error, try_no, settings_change,"
        " run_id FROM node_attempts WHERE attempt_id = ?",
        (attempt_id,),
    ).fetchone()
    wait = waits.of_attempt(conn, attempt_id) if row[4] == "waiting" else None
    request = conn.execute(
        "SELECT request_id, kind, status, answer_json, answer_ref FROM interactive_requests"
        " WHERE attempt_id = ? ORDER BY created_at DESC, rowid DESC LIMIT 1",
        (attempt_id,),
    ).fetchone()
    return {
        "attemptId": row[0],
        "nodeId": row[1],
        "visit": row[2],
        "attemptNo": row[3],
        "status": row[4],
        "error": row[5],
        "tryNo": row[6],
        # The settings it started with (a later change reaches only later attempts).
        "settingsChange": row[7],
        "settings": settings.of_change(conn, row[8], row[7]),
        "wait": None if wait is None else wait.to_json(),
        "request": None
        if request is None
        else {
            "requestId": request[0],
            "kind": request[1],
            "status": request[2],
            "answer": jsoncol.loads(request[3]),
            "answerRef": None
            if request[4] is None
            else values.reference(conn, request[4]).to_json(),
            "submission": _validating(conn, request[0]) if request[2] == "validating" else None,
        },
    }


def _validating(conn: sqlite3.Connection, request_id: str) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT submission_id, value_json, value_ref FROM interactive_submissions"
        " WHERE request_id = ? AND status = 'validating'",
        (request_id,),
    ).fetchone()
    if row is None:
        return None
    return {
        "submissionId": row[0],
        "value": jsoncol.loads(row[1]),
        "valueRef": None if row[2] is None else values.reference(conn, row[2]).to_json(),
    }


def _wait_view(conn: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    """The run's pending durable wait (sleep, retry delay, event wait), with one line for
    people, or None."""
    wait = waits.pending_of(conn, run_id)
    if wait is None:
        return None
    return {**wait.to_json(), "text": wait.describe()}


def run_messages(conn: sqlite3.Connection, run_id: str, limit: int = 100) -> list[dict[str, Any]]:
    """The run's newest workflow messages (oldest first), as ``run show`` lists them: each
    text cut to ``RUN_VIEW_TEXT_BYTES`` (``textBytes``, ``textTruncated``; the whole one is
    ``workflowMessage.get``'s), so a run with many large notifications still fits a frame."""
    rows = conn.execute(
        "SELECT * FROM (SELECT message_id, kind, status, body_json, created_at, rowid AS r"
        " FROM workflow_messages WHERE run_id = ? ORDER BY created_at DESC, rowid DESC LIMIT ?)"
        " ORDER BY r",
        (run_id, limit),
    ).fetchall()
    return [
        {
            "workflowMessageId": row[0],
            "kind": row[1],
            "status": row[2],
            **view_bounds.bounded_text(
                _message_text(row[1], jsoncol.loads(row[3])), view_bounds.RUN_VIEW_TEXT_BYTES
            ),
            "createdAt": row[4],
        }
        for row in rows
    ]


def _message_text(kind: str, body: Any) -> str:
    if not isinstance(body, dict):
        return str(body)
    if kind == "terminal":
        error = body.get("error")
        return f"run {body.get('status')}" + (f": {error}" if error else "")
    return str(body.get("text", ""))


def status_counts(conn: sqlite3.Connection, now: int) -> dict[str, Any]:
    """Counts for ``server status``: runs by status, expired claims, open work. No payloads."""
    by_status = dict(
        conn.execute("SELECT status, COUNT(*) FROM viewer_runs GROUP BY status").fetchall()
    )
    expired = conn.execute(
        "SELECT COUNT(*) FROM leases WHERE status = 'held' AND expires_at <= ?", (now,)
    ).fetchone()[0]
    pending = conn.execute(
        "SELECT COUNT(*) FROM interactive_requests WHERE status IN ('pending', 'validating')"
    ).fetchone()[0]
    ambiguous = conn.execute("SELECT COUNT(*) FROM effects WHERE status = 'ambiguous'").fetchone()[
        0
    ]
    return {
        "runsByStatus": by_status,
        "expiredClaims": expired,
        "pendingInteractions": pending,
        "ambiguousEffects": ambiguous,
    }
