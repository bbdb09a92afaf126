"""Child runs and their joins: a parent's ``subworkflow`` or ``fan_out`` node starts child
runs, waits with no runner and no claim, and is queued once, when its last child ends.

Owns ``run_joins`` and ``run_children``, and reads the tree columns of ``runs``
(``parent_run_id``, ``root_run_id``, ``depth``). Three moments, each inside a transaction
that already changes a run:

- ``spawn`` (the parent runner's fenced ``node.spawn``): records the join, one row per
  child in item order, and starts the first ``concurrency`` children
  (``run_rows.insert_run``);
- ``child_ended`` (``transitions.apply_transition`` of a child's terminal transition,
  whatever ended it): records the child's end in its row and its join, starts the next
  waiting child, skips the rest after a ``fail_fast`` failure, and, when no child is
  waiting or active any more, fires the parent's wait and returns the parent for the
  caller to queue: the child's end and the parent's wake are one commit;
- ``parent_ended`` (a parent's terminal transition): its joins are cancelled and their
  waiting children skipped.

A ``fan_out`` with a ``rate`` (``rate_count`` starts per ``rate_period_ms``) starts a child
only while fewer than ``rate_count`` children of its join started in the window before now
(the ``started_at`` of its rows, so the bound survives a server restart). When the rate
holds a waiting child back while the concurrency has room, ``_pace`` sets the join's wait's
due time to the moment the window allows the next start; ``pace_due`` (fired like any due
wait, ``takeover.fire_due_waits``) starts what the window and the concurrency then allow,
and paces again. The parent stays waiting throughout.

While a parent or any run above it is paused its joins start no new child: a join
recorded then (a child that was draining for a tree pause spawned its own children) keeps
them all waiting, and an ending child leaves its slot empty. ``refill``, called by the
resume of a run (and of the runs below a resumed root), fills the slots again. So a pause
reaches the whole tree, at any depth, even a part of it spawned while the pause was under
way.

The caller (``transitions``) changes run statuses; this module never does, and never
imports ``transitions``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from pi_workflows.protocol import fingerprint
from pi_workflows.store import jsoncol, values, waits
from pi_workflows.store.database import Transaction
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.ids import new_id
from pi_workflows.store.run_rows import NewRun, SourceRecord, insert_run, store_definition
from pi_workflows.store.runs import RunRow, read_run
from pi_workflows.store.states import TERMINAL_STATUSES, RunStatus

MAX_CHILDREN: Final = 1000
"""The most children one join has (``fan_out``'s documented limit)."""

MAX_DEPTH: Final = 8
"""How deep runs may nest (a root is 0); the authoring API's ``MAX_DEPTH`` is the same."""


@dataclass(frozen=True)
class ChildWorkflow:
    """What every child of one join runs: the workflow the parent's runner described."""

    workflow_name: str
    definition: dict[str, Any]
    definition_digest: str
    source: SourceRecord


@dataclass(frozen=True)
class Join:
    """A ``run_joins`` row."""

    wait_id: str
    parent_run_id: str
    node_id: str
    kind: str  # subworkflow | fan_out
    workflow_name: str
    definition_digest: str
    source: SourceRecord
    detached: bool
    concurrency: int
    fail_fast: bool
    total: int
    started: int
    ended: int
    failed: int
    status: str  # running | failing | joined | cancelled
    rate_count: int | None = None  # fan_out(rate=...): starts per rate_period_ms
    rate_period_ms: int | None = None

    def progress(self) -> dict[str, Any]:
        """The wire form of its progress (``run.get``'s ``children``)."""
        return {
            "waitId": self.wait_id,
            "nodeId": self.node_id,
            "kind": self.kind,
            "workflow": self.workflow_name,
            "total": self.total,
            "started": self.started,
            "ended": self.ended,
            "failed": self.failed,
            "status": self.status,
            "detached": self.detached,
            "rate": None
            if self.rate_count is None
            else {"count": self.rate_count, "periodMs": self.rate_period_ms},
        }


_JOIN_COLUMNS = (
    "wait_id, parent_run_id, node_id, kind, workflow_name, definition_digest, source_kind,"
    " source_ref, source_revision, project_dir, mounted_json, detached, concurrency,"
    " fail_fast, total, started, ended, failed, status, rate_count, rate_period_ms"
)


def _join(row: sqlite3.Row | tuple[Any, ...]) -> Join:
    return Join(
        wait_id=row[0],
        parent_run_id=row[1],
        node_id=row[2],
        kind=row[3],
        workflow_name=row[4],
        definition_digest=row[5],
        source=SourceRecord(row[6], row[7], row[8], row[9], jsoncol.loads(row[10]) or {}),
        detached=bool(row[11]),
        concurrency=row[12],
        fail_fast=bool(row[13]),
        total=row[14],
        started=row[15],
        ended=row[16],
        failed=row[17],
        status=row[18],
        rate_count=row[19],
        rate_period_ms=row[20],
    )


def read_join(conn: sqlite3.Connection, wait_id: str) -> Join | None:
    """One join by its wait id."""
    row = conn.execute(f"SELECT {_JOIN_COLUMNS} FROM run_joins WHERE wait_id = ?", (wait_id,))
    found = row.fetchone()
    return None if found is None else _join(found)


def joins_of(conn: sqlite3.Connection, parent_run_id: str) -> list[Join]:
    """Every join of a parent run, oldest first."""
    rows = conn.execute(
        f"SELECT {_JOIN_COLUMNS} FROM run_joins WHERE parent_run_id = ? ORDER BY created_at, rowid",
        (parent_run_id,),
    ).fetchall()
    return [_join(row) for row in rows]


def failing(conn: sqlite3.Connection) -> list[Join]:
    """The fail_fast joins whose active children must be cancelled (an index range)."""
    rows = conn.execute(
        f"SELECT {_JOIN_COLUMNS} FROM run_joins WHERE status = 'failing'"
    ).fetchall()
    return [_join(row) for row in rows]


def active_children(conn: sqlite3.Connection, wait_id: str) -> list[str]:
    """The run ids of a join's children that have started and not ended."""
    rows = conn.execute(
        "SELECT child_run_id FROM run_children WHERE wait_id = ? AND status = 'started'",
        (wait_id,),
    ).fetchall()
    return [row[0] for row in rows]


def spawn(
    tx: Transaction,
    parent: RunRow,
    attempt_id: str,
    node_id: str,
    *,
    kind: str,
    child: ChildWorkflow,
    inputs: list[Any],
    concurrency: int,
    fail_fast: bool,
    detached: bool,
    depth: int,
    rate: tuple[int, int] | None = None,
) -> waits.Wait:
    """Record the join of ``node_id``'s attempt and start its first children (the caller
    moves the parent to ``waiting`` in the same write). ``depth`` is the parent's; ``rate``
    is ``(starts, period ms)`` of a ``fan_out(rate=...)``."""
    if kind not in ("subworkflow", "fan_out"):
        raise ValueError(f"unknown join kind {kind!r}")
    if not 1 <= len(inputs) <= MAX_CHILDREN:
        raise InvalidTransitionError(
            parent.run_id, f"start the children of node {node_id} of", parent.status.value,
            f"a join has 1 to {MAX_CHILDREN} children, not {len(inputs)}",
        )  # fmt: skip
    if depth + 1 > MAX_DEPTH:
        raise InvalidTransitionError(
            parent.run_id, f"start the children of node {node_id} of", parent.status.value,
            f"runs nest at most {MAX_DEPTH} levels deep",
        )  # fmt: skip
    wait = waits.open_wait(tx, parent.run_id, attempt_id, node_id, "children", due_at=None)
    store_definition(tx, _new_run(child, None, None, None, 0, False, None))
    source = child.source
    tx.conn.execute(
        f"INSERT INTO run_joins ({_JOIN_COLUMNS}, created_at) VALUES"
        " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0, 'running', ?, ?, ?)",
        (
            wait.wait_id, parent.run_id, node_id, kind, child.workflow_name,
            child.definition_digest, source.kind, source.ref, source.revision,
            source.project_dir, jsoncol.dumps(source.mounted), int(detached), concurrency,
            int(fail_fast), len(inputs), None if rate is None else rate[0],
            None if rate is None else rate[1], tx.now,
        ),
    )  # fmt: skip
    for item, value in enumerate(inputs):
        inline, ref = ("null", None) if value is None else values.store(tx, value)
        tx.conn.execute(
            "INSERT INTO run_children (wait_id, item, input_json, input_ref, input_hash,"
            " status) VALUES (?, ?, ?, ?, ?, 'waiting')",
            (wait.wait_id, item, inline, ref, fingerprint(value)),
        )
    join = read_join(tx.conn, wait.wait_id)
    assert join is not None
    _start_next(tx, join, concurrency)
    return wait


def _new_run(
    child: ChildWorkflow,
    run_input: Any,
    input_hash: str | None,
    parent: str | None,
    depth: int,
    detached: bool,
    origin_session: str | None,
    root: str | None = None,
) -> NewRun:
    return NewRun(
        workflow_name=child.workflow_name,
        definition=child.definition,
        definition_digest=child.definition_digest,
        input=run_input,
        input_hash=input_hash or fingerprint(run_input),
        source=child.source,
        origin=None if parent is None else f"run:{parent}",
        origin_session=None if detached else origin_session,
        detached=detached,
        parent_run_id=parent,
        root_run_id=root,
        depth=depth,
    )


def paused_above(conn: sqlite3.Connection, run_id: str) -> str | None:
    """The nearest run at or above ``run_id`` in its tree that is paused, or None: the
    children of such a run's subtree wait (no new child starts under a paused run)."""
    row = conn.execute(
        "WITH RECURSIVE up(run_id, status, parent_run_id, level) AS ("
        " SELECT run_id, status, parent_run_id, 0 FROM runs WHERE run_id = ?"
        " UNION ALL SELECT r.run_id, r.status, r.parent_run_id, up.level + 1 FROM runs r"
        " JOIN up ON r.run_id = up.parent_run_id)"
        " SELECT run_id FROM up WHERE status = 'paused' ORDER BY level LIMIT 1",
        (run_id,),
    ).fetchone()
    return None if row is None else str(row[0])


def _recent_starts(tx: Transaction, join: Join) -> list[int]:
    """The start times of ``join``'s children inside its rate window before now, newest
    first (at most ``rate_count``: no more are ever needed)."""
    assert join.rate_count is not None
    assert join.rate_period_ms is not None
    rows = tx.conn.execute(
        "SELECT started_at FROM run_children WHERE wait_id = ? AND started_at > ?"
        " ORDER BY started_at DESC LIMIT ?",
        (join.wait_id, tx.now - join.rate_period_ms, join.rate_count),
    ).fetchall()
    return [int(row[0]) for row in rows]


def _pace(tx: Transaction, join: Join) -> None:
    """Set the due time of a rate-limited join's wait: when the window next allows a start,
    if a child waits for it and the concurrency has room (otherwise none: a child's end,
    or a resume, starts the next one and paces again)."""
    if join.rate_count is None or join.rate_period_ms is None:
        return
    due = None
    current = read_join(tx.conn, join.wait_id)
    if (
        current is not None
        and current.status == "running"
        and paused_above(tx.conn, join.parent_run_id) is None
        and len(active_children(tx.conn, join.wait_id)) < join.concurrency
        and tx.conn.execute(
            "SELECT 1 FROM run_children WHERE wait_id = ? AND status = 'waiting' LIMIT 1",
            (join.wait_id,),
        ).fetchone()
        is not None
    ):
        recent = _recent_starts(tx, join)
        if len(recent) >= join.rate_count:
            due = recent[-1] + join.rate_period_ms  # the oldest start leaves the window
    tx.conn.execute(
        "UPDATE run_waits SET due_at = ? WHERE wait_id = ? AND status = 'pending'",
        (due, join.wait_id),
    )


def pace_due(tx: Transaction, wait_id: str) -> int:
    """A rate-limited join's wait came due: start what its window and concurrency allow now
    and pace again; how many started (inside the ``waits.fire`` write of its parent)."""
    join = read_join(tx.conn, wait_id)
    if join is None:
        return 0
    if join.status != "running":
        _pace(tx, join)
        return 0
    room = join.concurrency - len(active_children(tx.conn, join.wait_id))
    return _start_next(tx, join, room)  # which paces again, whatever it started


def _start_next(tx: Transaction, join: Join, count: int) -> int:
    """Start up to ``count`` waiting children of ``join`` in item order (fewer when its rate
    allows fewer now); how many started. None while the parent or a run above it is
    paused: they start at its resume."""
    if count <= 0 or paused_above(tx.conn, join.parent_run_id) is not None:
        _pace(tx, join)
        return 0
    if join.rate_count is not None:
        count = min(count, join.rate_count - len(_recent_starts(tx, join)))
        if count <= 0:
            _pace(tx, join)
            return 0
    rows = tx.conn.execute(
        "SELECT item, input_json, input_ref, input_hash FROM run_children WHERE wait_id = ?"
        " AND status = 'waiting' ORDER BY item LIMIT ?",
        (join.wait_id, count),
    ).fetchall()
    if not rows:
        _pace(tx, join)
        return 0
    parent = tx.conn.execute(
        "SELECT origin_session, execution_mode, root_run_id, depth FROM runs WHERE run_id = ?",
        (join.parent_run_id,),
    ).fetchone()
    # A detached parent has no person's session to lend: its children are detached too,
    # each presented by a headless Pi of its own (the parent's own agent does not live
    # while it waits on them).
    detached = join.detached or parent[1] == "detached"
    session = None if detached else parent[0]
    root = parent[2] or join.parent_run_id
    definition = values.load(tx.conn, None, join.definition_digest)
    child = ChildWorkflow(join.workflow_name, definition, join.definition_digest, join.source)
    for item, inline, ref, input_hash in rows:
        run_input = values.load(tx.conn, inline, ref)
        child_id = new_id("run")
        insert_run(
            tx,
            _new_run(
                child, run_input, input_hash, join.parent_run_id, parent[3] + 1, detached,
                session, root,
            ),
            child_id,
        )  # fmt: skip
        tx.conn.execute(
            "UPDATE run_children SET status = 'started', child_run_id = ?, started_at = ?"
            " WHERE wait_id = ? AND item = ?",
            (child_id, tx.now, join.wait_id, item),
        )
    tx.conn.execute(
        "UPDATE run_joins SET started = started + ? WHERE wait_id = ?", (len(rows), join.wait_id)
    )
    _pace(tx, join)
    return len(rows)


@dataclass(frozen=True)
class ChildEnded:
    """What a child's end did to its parent's join: ``parent`` is the parent run to queue
    (its join completed and it waits), or None; ``event`` is the event to append to the
    parent (its join's progress), with its data."""

    parent: RunRow | None
    parent_id: str
    event: str
    data: dict[str, Any]


def child_ended(tx: Transaction, child: RunRow, status: RunStatus) -> ChildEnded | None:
    """Record that ``child`` ended with ``status`` (inside its terminal transition), and
    move its parent's join on. None for a run that is no join's child."""
    row = tx.conn.execute(
        "SELECT wait_id, item FROM run_children WHERE child_run_id = ? AND status = 'started'",
        (child.run_id,),
    ).fetchone()
    if row is None:
        return None
    wait_id, item = row
    failed = status is not RunStatus.COMPLETED
    tx.conn.execute(
        "UPDATE run_children SET status = ?, ended_at = ? WHERE wait_id = ? AND item = ?",
        (status.value, tx.now, wait_id, item),
    )
    tx.conn.execute(
        "UPDATE run_joins SET ended = ended + 1, failed = failed + ? WHERE wait_id = ?",
        (int(failed), wait_id),
    )
    join = read_join(tx.conn, wait_id)
    assert join is not None
    data: dict[str, Any] = {
        "childRunId": child.run_id,
        "item": item,
        "status": status.value,
        "ended": join.ended,
        "total": join.total,
    }
    parent = read_run(tx.conn, join.parent_run_id)
    if join.status == "cancelled" or parent.status in TERMINAL_STATUSES:
        return ChildEnded(None, join.parent_run_id, "child.ended", data)
    if join.status == "running" and failed and join.fail_fast:
        tx.conn.execute("UPDATE run_joins SET status = 'failing' WHERE wait_id = ?", (wait_id,))
        _skip_waiting(tx, wait_id)
    elif join.status == "running":
        _start_next(tx, join, 1)  # under a paused run, the next children start at its resume
    open_rows = tx.conn.execute(
        "SELECT COUNT(*) FROM run_children WHERE wait_id = ? AND status IN ('waiting', 'started')",
        (wait_id,),
    ).fetchone()[0]
    if open_rows:
        return ChildEnded(None, join.parent_run_id, "child.ended", data)
    tx.conn.execute(
        "UPDATE run_joins SET status = 'joined', joined_at = ? WHERE wait_id = ?",
        (tx.now, wait_id),
    )
    waits.end(tx, wait_id, "fired")
    ready = parent if parent.status is RunStatus.WAITING else None  # paused: it waits on
    return ChildEnded(ready, join.parent_run_id, "children.joined", data)


def refill(tx: Transaction, run_id: str) -> int:
    """A paused parent resumed: each of its running joins starts as many waiting children
    as its concurrency has room for (a child that ended during the pause started none).
    Returns how many started."""
    started = 0
    for join in joins_of(tx.conn, run_id):
        if join.status == "running":
            room = join.concurrency - len(active_children(tx.conn, join.wait_id))
            started += _start_next(tx, join, room)
    return started


def _skip_waiting(tx: Transaction, wait_id: str) -> None:
    tx.conn.execute(
        "UPDATE run_children SET status = 'skipped', ended_at = ? WHERE wait_id = ?"
        " AND status = 'waiting'",
        (tx.now, wait_id),
    )


def parent_ended(tx: Transaction, run_id: str) -> list[str]:
    """A parent ended (or restarts): its unfinished joins are cancelled and their waiting
    children skipped; returns the ids of its children still active (the caller ends them
    in the same transaction, or the server's tree cancel does)."""
    active: list[str] = []
    for join in joins_of(tx.conn, run_id):
        if join.status in ("joined", "cancelled"):
            continue
        tx.conn.execute(
            "UPDATE run_joins SET status = 'cancelled' WHERE wait_id = ?", (join.wait_id,)
        )
        _skip_waiting(tx, join.wait_id)
        active.extend(active_children(tx.conn, join.wait_id))
    return active


def descendants(conn: sqlite3.Connection, run_id: str) -> list[str]:
    """Every run below ``run_id`` in its tree, parents before their children."""
    rows = conn.execute(
        "WITH RECURSIVE tree(run_id, level) AS (SELECT run_id, 1 FROM runs"
        " WHERE parent_run_id = ? UNION ALL SELECT r.run_id, t.level + 1 FROM runs r"
        " JOIN tree t ON r.parent_run_id = t.run_id) SELECT run_id FROM tree ORDER BY level",
        (run_id,),
    ).fetchall()
    return [row[0] for row in rows]


def results(conn: sqlite3.Connection, wait_id: str, after: int, limit: int) -> dict[str, Any]:
    """A page of a join's children in item order (``join.results``): each row's run id,
    status and the child run's output (inline, or by reference past 16 KiB) and error;
    ``next`` is the ``after`` of the following page, or None."""
    rows = conn.execute(
        "SELECT c.item, c.child_run_id, c.status, r.output_json, r.output_ref, r.error"
        " FROM run_children c LEFT JOIN runs r ON r.run_id = c.child_run_id"
        " WHERE c.wait_id = ? AND c.item >= ? ORDER BY c.item LIMIT ?",
        (wait_id, after, limit + 1),
    ).fetchall()
    more = len(rows) > limit
    items = []
    for item, run_id, status, output_json, output_ref, error in rows[:limit]:
        items.append(
            {
                "item": item,
                "runId": run_id,
                "status": status,
                "output": jsoncol.loads(output_json) if output_json else None,
                "outputRef": None
                if output_ref is None
                else values.reference(conn, output_ref).to_json(),
                "error": error,
            }
        )
    return {"items": items, "next": rows[limit][0] if more else None}


def of_node(
    conn: sqlite3.Connection, run_id: str, node_id: str, after: int, limit: int
) -> dict[str, Any]:
    """A page of the child runs of ``node_id``'s latest join in the run's current round, in
    item order (``children.of``, ``ctx.children``): ``{items: [{item, runId, status}],
    next}``; no items when the node started no children in this round."""
    join = conn.execute(
        "SELECT j.wait_id FROM run_joins j JOIN run_waits w USING (wait_id)"
        " JOIN node_attempts a ON a.attempt_id = w.attempt_id JOIN runs r"
        " ON r.run_id = j.parent_run_id WHERE j.parent_run_id = ? AND j.node_id = ?"
        " AND a.round = r.round ORDER BY j.created_at DESC, j.rowid DESC LIMIT 1",
        (run_id, node_id),
    ).fetchone()
    if join is None:
        return {"items": [], "next": None}
    rows = conn.execute(
        "SELECT item, child_run_id, status FROM run_children WHERE wait_id = ? AND item >= ?"
        " ORDER BY item LIMIT ?",
        (join[0], after, limit + 1),
    ).fetchall()
    items = [{"item": r[0], "runId": r[1], "status": r[2]} for r in rows[:limit]]
    return {"items": items, "next": rows[limit][0] if len(rows) > limit else None}
