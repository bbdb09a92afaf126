"""Forking a run: a new run that starts at one visit of a node of its source, on the
workflow's current code, with what the source settled before that visit carried over.

Owns the fork columns of ``runs`` (``forked_from``, ``fork_node``, ``fork_visit``) and the
carried rows (``node_attempts.carried_from``, ``effects.carried_from``). ``fork`` is one
transaction (``lifecycle.fork``): it checks the source (not queued or running, no effect
applying or ambiguous), finds the fork point in the source's current round, checks that the
new definition carries the recorded nodes (``carry``), inserts the fork through
``run_rows.insert_run`` (revision 1, ``run.reserved``), copies every attempt the source
settled before the fork point (round 0 of the fork, generation 0, ``carried_from``) and the
effects those visits applied or rejected, as receipts under the fork's own keys, sets the
fork's current node and step count, and appends ``run.forked`` (revision 2). ``retry``
(``run retry``) is the same fork from the visit whose failure
ended a failed or timed-out run, found in the same transaction. ``outputs`` (``run fork
--set NODE=JSON``) replaces the output of the latest carried visit of each named node in the
copy (``node_attempts.output_set_by`` says a person set it); the source's rows stay as they
were. The server checked each value against the node's output contract before; this
module checks that the node is carried and has an output to replace.

A fork is a root run: ``parent_run_id`` stays NULL, so the tree operations (cancel, pause,
resume, diagnose's tree invariants) never reach it from its source. It never writes a row
of the source run, so forking moves none of the source's revisions and no runner of it (or
of anything else) can see a conflict. ``carry_again`` lets a fork's restart start from its
fork point again.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pi_workflows.protocol.effects import effect_key
from pi_workflows.store import carry, children, deadlines, settings, values
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import (
    ForkOutputError,
    ForkPointError,
    GraphCarryError,
    InvalidTransitionError,
)
from pi_workflows.store.ids import new_id
from pi_workflows.store.run_rows import (
    NewRun,
    insert_run,
    read_environment,
    store_definition,
    stored_definition,
)
from pi_workflows.store.runs import RunRow, WriteResult, finish_change, read_run
from pi_workflows.store.states import RunStatus

__all__ = ["Forked", "carry_again", "failure_point", "fork", "retry", "unsettled_effects"]

_SETTLED = ("completed", "failed", "timed_out")


@dataclass(frozen=True)
class Forked:
    """A committed fork: the new run and what it carried.

    ``applied_again``: the source's applied effects at or after the fork point (as
    ``{effectId, nodeId, visit, type, kind}``): their nodes run again in the fork, as new
    effects under the fork's keys. ``outputs_set``: the carried outputs a person replaced
    (``{nodeId, visit, setBy}``).
    """

    result: WriteResult
    source_run_id: str
    node_id: str
    visit: int
    carried_attempts: int
    carried_effects: int
    applied_again: list[dict[str, Any]]
    outputs_set: list[dict[str, Any]] = dataclasses.field(default_factory=list)


@dataclass(frozen=True)
class _Carried:
    """A settled attempt to copy (from the source, or from a fork's round 0)."""

    attempt_id: str
    node_id: str
    visit: int
    attempt_no: int
    status: str
    try_no: int
    output_json: str | None
    output_ref: str | None
    error: str | None
    started_at: int
    finished_at: int
    carried_from: str  # what the copy records: the source attempt's id
    output_set_by: str | None = None  # 'person': a fork's --set replaced the output


def unsettled_effects(conn: sqlite3.Connection, run_id: str) -> list[str]:
    """The ids of the effects of the run and of every run below it (its child runs, theirs,
    ...) that are applying or ambiguous, oldest first: what a fork or a restart would
    repeat before anyone knows whether they applied."""
    tree = [run_id, *children.descendants(conn, run_id)]
    marks = ", ".join("?" for _ in tree)
    rows = conn.execute(
        f"SELECT effect_id FROM effects WHERE run_id IN ({marks})"
        " AND status IN ('applying', 'ambiguous') ORDER BY created_at, rowid",
        tree,
    ).fetchall()
    return [str(row[0]) for row in rows]


def _check_source(conn: sqlite3.Connection, source: RunRow) -> None:
    if source.status in (RunStatus.QUEUED, RunStatus.RUNNING):
        raise InvalidTransitionError(
            source.run_id, "fork", source.status.value,
            f"pause it first ('pi-workflows run pause {source.run_id}'), then fork it",
        )  # fmt: skip
    below = children.descendants(conn, source.run_id)
    live = [
        run_id
        for run_id in below
        if read_run(conn, run_id).status in (RunStatus.QUEUED, RunStatus.RUNNING)
    ]
    if live:
        raise InvalidTransitionError(
            source.run_id, "fork", source.status.value,
            f"run(s) below it are still working ({', '.join(live[:5])}); pause it first"
            f" ('pi-workflows run pause {source.run_id}' pauses its whole tree), then fork it",
        )  # fmt: skip
    open_effects = unsettled_effects(conn, source.run_id)
    if open_effects:
        raise InvalidTransitionError(
            source.run_id, "fork", source.status.value,
            f"effect(s) {', '.join(open_effects)} of it or of a run below it are applying or"
            " ambiguous; resolve them with 'pi-workflows effect resolve' first",
        )  # fmt: skip


def _fork_point(
    conn: sqlite3.Connection, source: RunRow, node_id: str, visit: int | None
) -> tuple[int, int]:
    """``(visit, rowid)`` of the first attempt of the fork visit in the source's current
    round; ``visit`` None means the latest visit of the node."""
    rows = conn.execute(
        "SELECT visit, MIN(rowid) FROM node_attempts WHERE run_id = ? AND round = ?"
        " AND node_id = ? GROUP BY visit ORDER BY visit",
        (source.run_id, source.round, node_id),
    ).fetchall()
    if not rows:
        ran = conn.execute(
            "SELECT DISTINCT node_id FROM node_attempts WHERE run_id = ? AND round = ?"
            " ORDER BY node_id",
            (source.run_id, source.round),
        ).fetchall()
        names = ", ".join(str(row[0]) for row in ran) or "none"
        raise ForkPointError(
            source.run_id, node_id, visit,
            f"run {source.run_id} never reached node {node_id} (in its current round); fork"
            f" from a node it ran: {names}",
        )  # fmt: skip
    visits = {int(row[0]): int(row[1]) for row in rows}
    chosen = max(visits) if visit is None else visit
    if chosen not in visits:
        raise ForkPointError(
            source.run_id, node_id, visit,
            f"run {source.run_id} ran node {node_id} {len(visits)} time(s) (visits"
            f" {_ranges(sorted(visits))}); there is no visit {visit}",
        )  # fmt: skip
    return chosen, visits[chosen]


def _ranges(numbers: list[int]) -> str:
    if numbers == list(range(numbers[0], numbers[-1] + 1)) and len(numbers) > 2:
        return f"{numbers[0]}-{numbers[-1]}"
    return ", ".join(str(n) for n in numbers)


def _settled_before(
    conn: sqlite3.Connection, run_id: str, round_no: int, rowid: int
) -> list[_Carried]:
    rows = conn.execute(
        "SELECT attempt_id, node_id, visit, attempt_no, status, try_no, output_json,"
        " output_ref, error, started_at, finished_at FROM node_attempts"
        " WHERE run_id = ? AND round = ? AND rowid < ? AND status IN (?, ?, ?) ORDER BY rowid",
        (run_id, round_no, rowid, *_SETTLED),
    ).fetchall()
    return [_carried(row, str(row[0])) for row in rows]


def _carried(row: sqlite3.Row, origin: str, set_by: str | None = None) -> _Carried:
    return _Carried(
        attempt_id=row[0], node_id=row[1], visit=row[2], attempt_no=row[3], status=row[4],
        try_no=row[5], output_json=row[6], output_ref=row[7], error=row[8],
        started_at=row[9], finished_at=row[10], carried_from=origin, output_set_by=set_by,
    )  # fmt: skip


def _set_outputs(
    tx: Transaction,
    source: RunRow,
    rows: list[_Carried],
    outputs: Mapping[str, Any],
    fork_point: str,
) -> tuple[list[_Carried], list[dict[str, Any]]]:
    """``rows`` with the output of each node of ``outputs`` replaced in its latest carried
    visit, and what was set (for the event). ``ForkOutputError`` for a node not carried or
    whose latest carried visit failed."""
    latest: dict[str, int] = {}
    for position, settled in enumerate(rows):
        latest[settled.node_id] = position  # rows are in execution order: the last one wins
    carried = ", ".join(sorted(latest)) or "none"
    changed = list(rows)
    done: list[dict[str, Any]] = []
    for node_id, value in outputs.items():
        found = latest.get(node_id)
        if found is None:
            raise ForkOutputError(
                source.run_id, node_id,
                f"cannot set the output of node {node_id}: it is not carried (only nodes that"
                f" ran before {fork_point} can be set; carried: {carried})",
            )  # fmt: skip
        row = changed[found]
        if row.status != "completed":
            raise ForkOutputError(
                source.run_id, node_id,
                f"cannot set the output of node {node_id}: its latest carried visit"
                f" ({row.visit}) {row.status.replace('_', ' ')} and has no output to replace",
            )  # fmt: skip
        inline, ref = values.store(tx, value)
        changed[found] = dataclasses.replace(
            row, output_json=inline, output_ref=ref, output_set_by="person"
        )
        done.append({"nodeId": node_id, "visit": row.visit, "setBy": "person"})
    return changed, done


def _copy_attempts(
    tx: Transaction, run_id: str, round_no: int, rows: list[_Carried]
) -> dict[tuple[str, int], str]:
    """Insert the carried attempts into ``run_id``'s round ``round_no`` in order; the new
    attempt id of each (node, visit). Their ``finished_revision`` is 0, no event of the
    fork: they ran in the source, whose trace has their spans, so the OpenTelemetry
    exporter never exports them again."""
    copied: dict[tuple[str, int], str] = {}
    for row in rows:
        attempt_id = new_id("att")
        tx.conn.execute(
            "INSERT INTO node_attempts (attempt_id, run_id, round, node_id, visit, attempt_no,"
            " generation, status, try_no, output_json, output_ref, error, carried_from,"
            " output_set_by, started_at, finished_at, finished_revision, settings_change)"
            " VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL)",
            (
                attempt_id, run_id, round_no, row.node_id, row.visit, row.attempt_no,
                row.status, row.try_no, row.output_json, row.output_ref, row.error,
                row.carried_from, row.output_set_by, row.started_at, row.finished_at,
            ),
        )  # fmt: skip
        copied[(row.node_id, row.visit)] = attempt_id
    return copied


_EFFECT_COLUMNS = (
    "e.effect_id, e.effect_type, e.effect_kind, e.node_id, e.visit, e.fingerprint, e.status,"
    " e.attempt_count, e.result_json, e.result_ref, e.error, e.created_at, e.updated_at,"
    " a.round, e.carried_from"
)


def _effects_of(conn: sqlite3.Connection, run_id: str) -> list[sqlite3.Row]:
    return conn.execute(
        f"SELECT {_EFFECT_COLUMNS} FROM effects e"
        " LEFT JOIN node_attempts a ON a.attempt_id = e.node_attempt_id"
        " WHERE e.run_id = ? ORDER BY e.created_at, e.rowid",
        (run_id,),
    ).fetchall()


def _copy_effect(
    tx: Transaction,
    row: sqlite3.Row,
    run_id: str,
    round_no: int,
    attempt_id: str,
    origin: str,
) -> None:
    """One settled effect (``row``, with its attempts) as a receipt of ``attempt_id`` under
    ``run_id``'s own key, recording ``origin`` as where it came from: a reservation of that
    visit finds it applied (or rejected) and never runs its body."""
    effect_id = new_id("eff")
    node_id, visit, effect_type = str(row[3]), int(row[4]), str(row[1])
    tx.conn.execute(
        "INSERT INTO effects (effect_id, run_id, effect_key, node_attempt_id, effect_type,"
        " effect_kind, node_id, visit, fingerprint, status, attempt_count, result_json,"
        " result_ref, error, carried_from, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            effect_id, run_id, effect_key(run_id, round_no, node_id, visit, effect_type),
            attempt_id, effect_type, row[2], node_id, visit, row[5], row[6], row[7], row[8],
            row[9], row[10], origin, row[11], row[12],
        ),
    )  # fmt: skip
    tx.conn.execute(
        "INSERT INTO effect_attempts (effect_id, attempt_no, generation, node_attempt_id,"
        " status, receipt_json, started_at, finished_at) SELECT ?, attempt_no, 0, ?, status,"
        " receipt_json, started_at, finished_at FROM effect_attempts WHERE effect_id = ?"
        " AND status IN ('applied', 'rejected')",
        (effect_id, attempt_id, row[0]),
    )


def fork(
    db: Database,
    source_id: str,
    node_id: str,
    new_run: NewRun,
    *,
    visit: int | None = None,
    run_id: str | None = None,
    outputs: Mapping[str, Any] | None = None,
) -> Forked:
    """Create a fork of ``source_id`` at ``visit`` of ``node_id`` (its latest visit when
    None), to run ``new_run`` (the workflow as it is now, with the input the fork takes).
    ``outputs`` (node id to a value its contract accepts) replaces carried outputs.

    Refused (nothing stored) when the source is queued or running
    (``InvalidTransitionError``: pause it first), has an effect applying or ambiguous (the
    ids are named), never reached that visit or the new code has no such node
    (``ForkPointError``), or the new code cannot carry what the source recorded before it
    (``GraphCarryError``), or an output of ``outputs`` cannot be set (``ForkOutputError``).
    """
    with db.atomic("lifecycle.fork") as tx:
        source = read_run(tx.conn, source_id)
        fork_id = run_id or new_id("run")
        return _fork(tx, source, node_id, new_run, visit, fork_id, {}, outputs or {})


def retry(db: Database, source_id: str, new_run: NewRun, *, run_id: str | None = None) -> Forked:
    """``run retry``: a fork of ``source_id`` from the visit whose failure ended it, with
    ``new_run`` (the workflow as it is now, with the source's input); ``run.forked`` records
    ``retry: true``. Refused (``InvalidTransitionError``, one line saying what to use
    instead) for a run that did not fail, and as ``fork`` is otherwise."""
    with db.atomic("lifecycle.fork") as tx:
        source = read_run(tx.conn, source_id)
        node_id, visit = failure_point(tx.conn, source)
        fork_id = run_id or new_id("run")
        return _fork(tx, source, node_id, new_run, visit, fork_id, {"retry": True}, {})


_NOT_FAILED = {
    RunStatus.COMPLETED: "it completed; to run a node of it again use"
    " 'pi-workflows run fork {run} --from NODE'",
    RunStatus.CANCELLED: "it was cancelled, not failed; 'pi-workflows run restart {run}' runs it"
    " again from the start, 'pi-workflows run fork {run} --from NODE' from a node",
    RunStatus.PAUSED: "it has not failed; 'pi-workflows run resume {run}' continues it",
}


def failure_point(conn: sqlite3.Connection, source: RunRow) -> tuple[str, int]:
    """``(node, visit)`` whose failed or timed-out attempt ended ``source`` (the last attempt
    it settled in its current round). ``InvalidTransitionError`` (one line naming what to
    use instead) for a run that did not fail, or failed after its last node succeeded (a
    step limit, code that no longer loads)."""
    run_id = source.run_id
    if source.status not in (RunStatus.FAILED, RunStatus.TIMED_OUT):
        advice = _NOT_FAILED.get(
            source.status,
            "it has not ended; follow it with 'pi-workflows run show {run}', or pause it"
            " and fork it with 'pi-workflows run fork {run} --from NODE'",
        )
        raise InvalidTransitionError(
            run_id, "retry", source.status.value, advice.format(run=run_id)
        )
    row = conn.execute(
        "SELECT node_id, visit, status FROM node_attempts WHERE run_id = ? AND round = ?"
        " AND status IN (?, ?, ?) ORDER BY rowid DESC LIMIT 1",
        (run_id, source.round, *_SETTLED),
    ).fetchone()
    if row is None or row[2] == "completed":
        raise InvalidTransitionError(
            run_id, "retry", source.status.value,
            "no node failed (the run ended for another reason, see 'pi-workflows run show"
            f" {run_id}'); 'pi-workflows run restart {run_id}' runs it again from the start,"
            f" 'pi-workflows run fork {run_id} --from NODE' from a node",
        )  # fmt: skip
    return str(row[0]), int(row[1])


def _fork(
    tx: Transaction,
    source: RunRow,
    node_id: str,
    new_run: NewRun,
    visit: int | None,
    fork_id: str,
    extra: dict[str, Any],
    outputs: Mapping[str, Any],
) -> Forked:
    """The fork, inside ``tx`` (``fork`` and ``retry``); ``extra`` goes into the event,
    ``outputs`` replace carried outputs (``_set_outputs``)."""
    source_id = source.run_id
    _check_source(tx.conn, source)
    nodes = carry.node_kinds(new_run.definition)
    if node_id not in nodes:
        raise ForkPointError(
            source_id, node_id, visit,
            f"workflow {new_run.workflow_name} has no node {node_id} (its nodes:"
            f" {', '.join(sorted(nodes))})",
        )  # fmt: skip
    chosen, rowid = _fork_point(tx.conn, source, node_id, visit)
    rows = _settled_before(tx.conn, source_id, source.round, rowid)
    old = stored_definition(tx.conn, source.definition_digest)
    problems = carry.carry_problems(
        old, new_run.definition, recorded=[r.node_id for r in rows], resume_at=node_id
    )
    if problems:
        raise GraphCarryError(source_id, "fork", problems)
    set_outputs: list[dict[str, Any]] = []
    if outputs:
        point = f"{node_id} (visit {chosen})"
        rows, set_outputs = _set_outputs(tx, source, rows, outputs, point)
    store_definition(tx, new_run)
    # The fork starts with the source's settings when its code accepts them.
    carried_settings, settings_note = settings.for_fork(tx.conn, source_id, new_run.definition)
    insert_run(
        tx,
        dataclasses.replace(
            new_run, forked_from=source_id, fork_node=node_id, fork_visit=chosen,
            parent_run_id=None, root_run_id=None, depth=0,
            environment=new_run.environment or read_environment(tx.conn, source_id),
            settings=carried_settings,
            # The source's run deadline (an override too), armed from the fork's start.
            deadline_ms=new_run.deadline_ms or deadlines.duration_of(tx.conn, source_id),
        ),
        fork_id,
    )  # fmt: skip
    copied = _copy_attempts(tx, fork_id, 0, rows)
    carried, again = 0, []
    for row in _effects_of(tx.conn, source_id):
        if row[13] != source.round:
            continue
        target = copied.get((str(row[3]), int(row[4])))
        if target is not None and row[6] in ("applied", "rejected"):
            _copy_effect(tx, row, fork_id, 0, target, str(row[0]))
            carried += 1
        elif target is None and row[6] == "applied":
            again.append(
                {"effectId": row[0], "nodeId": row[3], "visit": row[4], "type": row[1],
                 "kind": row[2]}
            )  # fmt: skip
    tx.conn.execute(
        "UPDATE runs SET current_node = ?, step_count = ? WHERE run_id = ?",
        (node_id, len(rows), fork_id),
    )
    data: dict[str, Any] = {
        "sourceRunId": source_id,
        "nodeId": node_id,
        "visit": chosen,
        "carriedAttempts": len(rows),
        "carriedEffects": carried,
        **extra,
    }
    if set_outputs:
        data["outputsSet"] = set_outputs
    if settings_note is not None:
        data["settings"] = settings_note
    result = finish_change(tx, fork_id, 1, "run.forked", data)
    return Forked(result, source_id, node_id, chosen, len(rows), carried, again, set_outputs)


def carry_again(
    tx: Transaction, run: RunRow, round_no: int, definition: dict[str, Any] | None
) -> bool:
    """A fork's restart: copy what the fork carried (its round 0 rows with
    ``carried_from``) into ``round_no`` and make its fork node current again, so the new
    round starts from the fork point. ``definition``: the code the new round runs (None:
    the recorded one). Returns False for a run that is not a fork (nothing done)."""
    row = tx.conn.execute(
        "SELECT fork_node FROM runs WHERE run_id = ? AND forked_from IS NOT NULL",
        (run.run_id,),
    ).fetchone()
    if row is None:
        return False
    node_id = str(row[0])
    carried = [
        _carried(found, str(found[11]), found[12])
        for found in tx.conn.execute(
            "SELECT attempt_id, node_id, visit, attempt_no, status, try_no, output_json,"
            " output_ref, error, started_at, finished_at, carried_from, output_set_by"
            " FROM node_attempts"
            " WHERE run_id = ? AND round = 0 AND carried_from IS NOT NULL ORDER BY rowid",
            (run.run_id,),
        )
    ]
    if definition is not None:
        old = stored_definition(tx.conn, run.definition_digest)
        problems = carry.carry_problems(
            old, definition, recorded=[c.node_id for c in carried], resume_at=node_id
        )
        if problems:
            raise GraphCarryError(run.run_id, "restart", problems)
    copied = _copy_attempts(tx, run.run_id, round_no, carried)
    for effect in _effects_of(tx.conn, run.run_id):
        target = copied.get((str(effect[3]), int(effect[4])))
        if effect[14] is not None and effect[13] == 0 and target is not None:
            _copy_effect(tx, effect, run.run_id, round_no, target, str(effect[14]))
    tx.conn.execute(
        "UPDATE runs SET current_node = ?, step_count = ? WHERE run_id = ?",
        (node_id, len(carried), run.run_id),
    )
    return True
