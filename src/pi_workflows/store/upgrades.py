"""Upgrading a parked run: it continues on the workflow's current code when the new graph
can carry it.

Owns the ``run.upgraded`` transition (``lifecycle.upgrade``): the run's definition
snapshot and source identity (``runs.definition_digest``, ``run_sources``) are replaced by
the ones the server just resolved, and the event records both identities. ``plan`` is the
read-only half (``run upgrade --dry-run``, ``run show`` of a run parked on changed code).

The rules, each decided here once:

- only a ``paused`` or ``waiting`` run is upgraded (a queued or running one is paused
  first; an ended one is forked or restarted instead);
- the new graph must carry the run (``carry.carry_problems``): the node it waits at or
  resumes at still exists (with the same kind when its attempt is open), and every node
  with a recorded result still exists with the same kind; otherwise it is refused with
  the reasons (``GraphCarryError``) and nothing changes;
- an open (pending) request is re-created for the new contract: its attempt closes as
  interrupted (``parked (upgraded)``, not a crash), the request is cancelled (a decision
  resolved ``cancelled``), and the next runner runs the same visit again on the new code,
  which renders the prompt and contract afresh and opens a new request (its deadline
  starts again). A request whose submission is being validated is refused (wait for it);
- the run's current round's effect keys are released to the new code
  (``effects.release_fingerprints``): the visit it re-runs may reserve its key with the new
  code's request (a pending effect runs its body again, the next try of a retried one too,
  an applied one is adopted) instead of conflicting with the old request;
- a run parked because its code changed (``workflowSourceChanged``,
  ``workflowLoadFailed``) continues as ``run resume`` would; a run paused for another
  reason stays paused (``run resume`` continues it); a waiting run keeps waiting on its
  durable wait, or is queued when its request was re-created.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from pi_workflows.store import (
    attempts,
    carry,
    children,
    effects,
    interactions,
    jsoncol,
    settings,
    waits,
)
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import GraphCarryError, InvalidTransitionError
from pi_workflows.store.run_rows import NewRun, store_definition, stored_definition
from pi_workflows.store.runs import RunRow, WriteResult, read_run, write_run
from pi_workflows.store.states import (
    TERMINAL_STATUSES,
    AttemptStatus,
    NextCommand,
    Operation,
    ParkReason,
    RunStatus,
)
from pi_workflows.store.transitions import apply_transition

__all__ = ["CODE_PARKS", "UpgradePlan", "plan", "upgrade"]

CODE_PARKS = frozenset({ParkReason.WORKFLOW_SOURCE_CHANGED, ParkReason.WORKFLOW_LOAD_FAILED})
"""Park reasons an upgrade removes the cause of: the run continues after it."""

UPGRADED_MARK = f"{attempts.PARKED_MARK}upgraded)"
"""The error of an attempt closed because its request is re-created on the new code."""


@dataclass(frozen=True)
class UpgradePlan:
    """What ``upgrade`` would do (or did) to one run.

    ``problems`` non-empty: refused. ``unchanged``: the run already runs that code.
    ``recreate``: the open request to re-create (``{requestId, nodeId, kind}``).
    ``continues``: the run leaves ``paused`` (its park was about its code).
    """

    run_id: str
    status: str
    before: dict[str, Any]
    after: dict[str, Any]
    changes: list[str]
    problems: list[str]
    unchanged: bool
    recreate: dict[str, Any] | None
    continues: bool
    refusal: str | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        """The wire form (``run.upgrade``'s receipt and dry run, ``run.get``'s ``upgrade``)."""
        return {
            "runId": self.run_id,
            "status": self.status,
            "from": self.before,
            "to": self.after,
            "changes": self.changes,
            "problems": self.problems,
            "unchanged": self.unchanged,
            "recreatesRequest": self.recreate,
            "continues": self.continues,
            "possible": not self.problems and not self.unchanged and self.refusal is None,
            "refusal": self.refusal,
        }


def _identity(conn: sqlite3.Connection, run: RunRow) -> dict[str, Any]:
    row = conn.execute(
        "SELECT source_kind, source_ref, source_revision, mounted_json FROM run_sources"
        " WHERE run_id = ?",
        (run.run_id,),
    ).fetchone()
    return {
        "kind": row[0],
        "ref": row[1],
        "revision": row[2],
        "mounted": jsoncol.loads(row[3]) or {},
        "definitionDigest": run.definition_digest,
    }


def _new_identity(new_run: NewRun) -> dict[str, Any]:
    source = new_run.source
    return {
        "kind": source.kind,
        "ref": source.ref,
        "revision": source.revision,
        "mounted": dict(source.mounted),
        "definitionDigest": new_run.definition_digest,
    }


def _status_refusal(run: RunRow) -> str | None:
    if run.status in (RunStatus.QUEUED, RunStatus.RUNNING):
        return f"pause it first ('pi-workflows run pause {run.run_id}'), then upgrade it"
    if run.status in TERMINAL_STATUSES:
        return (
            f"it has ended; start from it on the new code with 'pi-workflows run fork"
            f" {run.run_id} --from NODE' or 'pi-workflows run restart {run.run_id}'"
        )
    return None


def plan(conn: sqlite3.Connection, run_id: str, new_run: NewRun) -> UpgradePlan:
    """What upgrading ``run_id`` to ``new_run``'s code would change, read only."""
    run = read_run(conn, run_id)
    before, after = _identity(conn, run), _new_identity(new_run)
    old = stored_definition(conn, run.definition_digest)
    recorded = [
        str(row[0])
        for row in conn.execute(
            "SELECT DISTINCT node_id FROM node_attempts WHERE run_id = ? AND round = ?"
            # A retried or exhausted try counts too: the next try (after a retry delay, or
            # a person's resume) continues that node's visit, so its kind must stay.
            " AND status IN ('completed', 'failed', 'timed_out', 'retried', 'exhausted')",
            (run_id, run.round),
        )
    ]
    open_attempt = attempts.unfinished(conn, run_id)
    waiting_at = None if open_attempt is None else open_attempt.node_id
    if waiting_at is None and run.unrouted_attempt is not None:
        routed = attempts.read_attempt(conn, run.unrouted_attempt)
        waiting_at = None if routed is None else routed.node_id
    problems = carry.carry_problems(
        old,
        new_run.definition,
        recorded=recorded,
        waiting_at=waiting_at,
        resume_at=run.current_node if waiting_at is None else None,
    )
    settings_problem = settings.upgrade_problem(conn, run_id, new_run.definition)
    if settings_problem is not None:
        problems = [*problems, settings_problem]
    request = interactions.open_request_of(conn, run_id)
    recreate = None
    refusal = _status_refusal(run)
    if request is not None:
        recreate = {"requestId": request.request_id, "nodeId": request.node_id}
        recreate["kind"] = conn.execute(
            "SELECT kind FROM interactive_requests WHERE request_id = ?", (request.request_id,)
        ).fetchone()[0]
        if request.status == "validating" and refusal is None:
            refusal = "a submission to its step is being validated; wait until it is settled"
    return UpgradePlan(
        run_id=run_id,
        status=run.status.value,
        before=before,
        after=after,
        changes=carry.graph_changes(old, new_run.definition),
        problems=problems,
        unchanged=before == after,
        recreate=recreate,
        continues=run.status is RunStatus.PAUSED and run.park_reason in CODE_PARKS,
        refusal=refusal,
    )


def upgrade(
    db: Database, run_id: str, new_run: NewRun, *, expected_revision: int | None = None
) -> tuple[WriteResult, UpgradePlan]:
    """Let a paused or waiting run continue on ``new_run``'s code (the module docstring has
    the rules). Refused, with nothing changed: ``InvalidTransitionError`` (its status, an
    unchanged source, a validating submission, ambiguous effects of a run it would resume),
    ``GraphCarryError`` (the reasons the new graph cannot carry it)."""

    def apply(tx: Transaction, run: RunRow) -> None:
        if found.refusal is not None:
            raise InvalidTransitionError(run_id, "upgrade", run.status.value, found.refusal)
        if found.unchanged:
            raise InvalidTransitionError(
                run_id, "upgrade", run.status.value,
                "it already runs the workflow's current code"
                + (f"; resume it with 'pi-workflows run resume {run_id}'" if run.status
                   is RunStatus.PAUSED else ""),
            )  # fmt: skip
        if found.problems:
            raise GraphCarryError(run_id, "upgrade", found.problems)
        if found.continues and effects.unresolved_ambiguous(tx.conn, run_id):
            raise InvalidTransitionError(
                run_id, "upgrade", run.status.value,
                "effect(s) are ambiguous; resolve them with 'pi-workflows effect resolve' first",
            )  # fmt: skip
        _swap_source(tx, run_id, new_run)
        note = settings.rebase(tx, run_id, new_run.definition, "upgrade")
        if note is not None:
            data["settings"] = note
        effects.release_fingerprints(tx, run_id, run.round)
        if found.recreate is not None:
            attempts.close_unfinished(tx, run_id, AttemptStatus.INTERRUPTED, error=UPGRADED_MARK)
            interactions.cancel_open(tx, run_id)
        _continue(tx, run, found)

    with db.atomic("lifecycle.upgrade") as tx:
        found = plan(tx.conn, run_id, new_run)
        data: dict[str, Any] = {
            "from": found.before,
            "to": found.after,
            "changes": found.changes,
            "recreatesRequest": found.recreate,
            "continues": found.continues,
        }
        result = write_run(
            db,
            run_id,
            name="lifecycle.upgrade",
            event_type="run.upgraded",
            event_data=data,
            claim=None,
            expected_revision=expected_revision,
            apply=apply,
        )
        return result, found


def _swap_source(tx: Transaction, run_id: str, new_run: NewRun) -> None:
    store_definition(tx, new_run)
    source = new_run.source
    tx.conn.execute(
        "UPDATE runs SET definition_digest = ? WHERE run_id = ?",
        (new_run.definition_digest, run_id),
    )
    tx.conn.execute(
        "UPDATE run_sources SET source_kind = ?, source_ref = ?, source_revision = ?,"
        " mounted_json = ? WHERE run_id = ?",
        (source.kind, source.ref, source.revision, jsoncol.dumps(source.mounted), run_id),
    )


def _continue(tx: Transaction, run: RunRow, found: UpgradePlan) -> None:
    """The run's status after the swap: queued when its request is re-created (a paused
    run only when its park was about its code), else waiting again or resumed as ``run
    resume`` would, else unchanged."""
    if run.status is RunStatus.WAITING:
        if found.recreate is not None:
            apply_transition(tx, run, Operation.RESUME, next_command=NextCommand.RESUME)
        return
    if not found.continues:
        return
    if found.recreate is None and waits.pending_of(tx.conn, run.run_id) is not None:
        apply_transition(tx, run, Operation.REWAIT)
        children.refill(tx, run.run_id)
        return
    apply_transition(tx, run, Operation.RESUME, next_command=NextCommand.RESUME)
