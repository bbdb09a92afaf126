"""Taking over runs whose runner is gone: recovery, node deadlines, request deadlines, and
durable waits that came due.

Each operation is one transaction that changes every projection of the run together, like
the rest of the lifecycle (it uses ``transitions.apply_transition``). None of them ever takes
a live claim: they need the claim's own holder, an expired or released lease, or the exact
evidence that the claim's server is dead (a newer server epoch holds the lock).
"""

from __future__ import annotations

import functools
import logging

from pi_workflows.store import attempts, children, effects, interactions, waits
from pi_workflows.store.claims import Claim, OwnerType, acquire, read_lease
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidTransitionError, StoreError
from pi_workflows.store.ids import new_id
from pi_workflows.store.runs import RunRow, WriteResult, read_run, write_run
from pi_workflows.store.states import AttemptStatus, NextCommand, Operation, RunStatus
from pi_workflows.store.transitions import apply_transition
from pi_workflows.store.waits import Wait


def recover(db: Database, run_id: str, *, claim: Claim | None = None) -> WriteResult:
    """Make a running run whose runner is gone claimable again.

    With ``claim`` (the server's claim for a runner it saw exit) the write is fenced by it;
    without, a control claim is taken in the same transaction (refused while a claim is
    live). Either way it closes a running attempt as interrupted and settles applying
    effects (``effects.settle_on_exit``): idempotent ones become pending; if a manual one
    becomes ambiguous the run parks with ``effectAmbiguous`` instead of being queued.
    """
    with db.atomic("lifecycle.recover") as tx:
        run = read_run(tx.conn, run_id)
        if run.status is not RunStatus.RUNNING:
            raise InvalidTransitionError(run_id, Operation.RECOVER.value, run.status.value)
        fence = claim or acquire(tx, run_id, OwnerType.CONTROL, new_id("ctl"), db.lease_ms)

        def apply(tx: Transaction, run: RunRow) -> None:
            apply_transition(tx, run, Operation.RECOVER, next_command=NextCommand.RESUME)

        return write_run(
            db,
            run_id,
            name="lifecycle.recover",
            event_type="run.recovered",
            event_data={"generation": fence.generation},
            claim=fence,
            apply=apply,
        )


def time_out_node(db: Database, claim: Claim, attempt_id: str, error: str) -> WriteResult:
    """The server's node deadline passed: settle the attempt timed out and queue the run.

    Used after the server killed a runner that did not finish the node in time. The attempt
    becomes ``runs.unrouted_attempt``: the next runner routes it with the engine (a
    ``$result.outcome`` switch may continue) instead of running the node again. An
    idempotent effect the killed body was applying is rejected as timed out with it.

    A manual effect the killed body was applying may or may not have happened, so the node
    is *not* timed out: the attempt is interrupted and the run parks with
    ``effectAmbiguous``. Once an operator resolves the effect and resumes, the same visit
    runs again and adopts the resolution (applied: its result; rejected: a failure; retry:
    the body runs again under the same key). No timeout route can repeat the body unseen.

    An effect of the attempt already settled ``applied`` (its body returned and the runner
    recorded it, but was killed before it finished the node) is past the deadline's reach:
    the side effect happened and its result is stored, so the node is not timed out either
    (a ``timed_out`` route would repeat it under a new visit). The attempt is interrupted,
    the run queued, and the same visit adopts the stored result at once.
    """
    with db.atomic("lifecycle.time_out_node") as tx:
        adopted = tx.conn.execute(
            "SELECT effect_id FROM effects WHERE node_attempt_id = ? AND status = 'applied'",
            (attempt_id,),
        ).fetchone()
        return _time_out(db, claim, attempt_id, error, None if adopted is None else adopted[0])


def _time_out(
    db: Database, claim: Claim, attempt_id: str, error: str, adopted: str | None
) -> WriteResult:
    run_id = claim.run_id

    def apply(tx: Transaction, run: RunRow) -> None:
        active = attempts.unfinished(tx.conn, run_id)
        if run.status is not RunStatus.RUNNING or active is None:
            raise InvalidTransitionError(run_id, "time out a node of", run.status.value)
        if active.attempt_id != attempt_id:
            raise InvalidTransitionError(
                run_id, "time out a node of", run.status.value, f"{attempt_id} is not active"
            )
        if adopted is not None:
            apply_transition(tx, run, Operation.RECOVER, next_command=NextCommand.RESUME)
            return
        if any(kind == "manual" for _, kind in effects.applying(tx.conn, run_id)):
            apply_transition(tx, run, Operation.PARK, park_reason=None, park_detail=error)
            return
        effects.reject_timed_out(tx, run_id, error)
        attempts.settle(tx, active, AttemptStatus.TIMED_OUT, error=error)
        tx.conn.execute(
            "UPDATE runs SET step_count = step_count + 1, unrouted_attempt = ? WHERE run_id = ?",
            (attempt_id, run_id),
        )
        apply_transition(tx, run, Operation.RECOVER, next_command=NextCommand.RESUME)

    return write_run(
        db,
        run_id,
        name="lifecycle.time_out_node",
        event_type="node.timedOut",
        event_data={"attemptId": attempt_id}
        if adopted is None
        else {"attemptId": attempt_id, "effectApplied": adopted},
        claim=claim,
        apply=apply,
    )


def expire_request(db: Database, request_id: str) -> WriteResult:
    """An open request's deadline passed while no runner held its run: close it and queue
    the run.

    A decision with a default choice resolves to it (``timedOut`` resolution, the choice in
    the request's answer); any other request closes as ``timed_out``, rejecting a submission
    still waiting for validation. The waiting attempt stays open: the next runner records
    that same attempt as timed out (or the decision's default) and routes it. A run that
    was already queued for validation stays queued; a paused run stays paused (its route
    runs after ``run resume``); one whose validation runner is live is refused (the server
    stops that runner first, see ``interaction_writes.abandon``).
    """
    with db.read() as conn:
        request = interactions.read_request(conn, request_id)
    if request is None:
        raise InvalidTransitionError(request_id, "expire request", "unknown")

    def apply(tx: Transaction, run: RunRow) -> None:
        current = interactions.read_request(tx.conn, request_id)
        if current is None or current.status not in ("pending", "validating"):
            raise InvalidTransitionError(
                run.run_id, f"expire request {request_id}", run.status.value, "already settled"
            )
        if current.deadline_at is None or current.deadline_at > tx.now:
            raise InvalidTransitionError(
                run.run_id, f"expire request {request_id}", run.status.value, "not yet due"
            )
        if run.status is RunStatus.RUNNING:
            raise InvalidTransitionError(
                run.run_id, f"expire request {request_id}", run.status.value,
                "its validation runner is stopped first",
            )  # fmt: skip
        default = interactions.timeout_choice(tx.conn, request_id)
        answer = {"choice": default} if current.kind == "decision" and default else None
        interactions.settle_request(
            tx, request_id, "timed_out", answer,
            submission_error="the step's deadline passed before the submission was validated",
        )  # fmt: skip
        if current.kind == "decision":
            interactions.resolve_decision(tx, request_id, "timedOut", default, None)
        # Queued: a runner already comes to route it. Paused: a person's pause is durable,
        # the expiry is recorded and the route runs only after ``run resume``.
        if run.status is RunStatus.WAITING:
            apply_transition(tx, run, Operation.RESUME, next_command=NextCommand.RESUME)

    return write_run(
        db,
        request.run_id,
        name="lifecycle.expire_request",
        event_type="interaction.timedOut",
        event_data={"requestId": request_id},
        claim=None,
        apply=apply,
    )


def release_claims_of_dead_servers(db: Database, server_epoch: int) -> list[str]:
    """Expire every runner claim taken by an earlier server epoch; return their run ids.

    Runner claims are named ``s<epoch>-r<runner epoch>`` and their tokens lived only in that
    server's memory. Once a newer server holds the state directory's lock the older one is
    dead, so its claims can never be used again: this is the exact evidence that lets
    recovery take them without waiting for the lease to run out.
    """
    with db.atomic("lifecycle.release_dead_claims") as tx:
        rows = tx.conn.execute(
            "SELECT run_id, owner_id FROM leases WHERE status = 'held' AND owner_type = 'runner'"
        ).fetchall()
        stale = [run_id for run_id, owner in rows if _owner_epoch(owner) < server_epoch]
        for run_id in stale:
            tx.conn.execute(
                "UPDATE leases SET expires_at = MIN(expires_at, ?) WHERE run_id = ?",
                (tx.now, run_id),
            )
        return stale


def runner_owner_id(server_epoch: int, runner_epoch: int) -> str:
    """The owner id of a runner claim taken by server ``server_epoch``."""
    return f"s{server_epoch}-r{runner_epoch}"


def _owner_epoch(owner_id: str) -> int:
    head = owner_id.split("-", 1)[0]
    return int(head[1:]) if head.startswith("s") and head[1:].isdigit() else -1


def expired_running(db: Database) -> list[str]:
    """Run ids that are running under a claim that has expired or was released."""
    now = db.clock.now_ms()
    rows = db.conn.execute(
        "SELECT r.run_id FROM runs r LEFT JOIN leases l USING (run_id)"
        " WHERE r.status = 'running' AND (l.run_id IS NULL OR l.status = 'released'"
        " OR l.expires_at <= ?)",
        (now,),
    ).fetchall()
    return [row[0] for row in rows]


def recover_all_expired(db: Database) -> list[WriteResult]:
    """Startup recovery: recover every expired running run; live ones are left alone."""
    results = []
    for run_id in expired_running(db):
        lease = read_lease(db.conn, run_id)
        if lease is not None and lease.live_at(db.clock.now_ms()):
            continue
        results.append(recover(db, run_id))
    return results


log = logging.getLogger(__name__)

FIRE_BATCH = 500
"""The most due waits one sweep fires in one transaction (the next sweep takes the rest)."""


def fire_due_waits(db: Database, limit: int = FIRE_BATCH) -> list[str]:
    """Fire the waits whose time has come, oldest due first, in one transaction (one commit
    for many timers that come due together); return the ids of the runs it queued.

    A fired wait of a waiting run queues the run (its next runner routes the sleep, tries
    the node again, or times the event wait out); a paused run records the firing and stays
    paused (a person's pause is durable: it continues after ``run resume``). A due
    ``children`` wait is a rate-limited ``fan_out``'s next start (``children.pace_due``): its
    parent waits on, and the children it started are queued. Each run is
    changed through ``write_run`` (its own revision and event). A wait whose run is in any
    other status is a contradiction ``state diagnose`` reports; it is left alone here rather
    than guessed at, and never breaks the batch.
    """
    queued: list[str] = []
    with db.atomic("waits.fire") as tx:
        rows = tx.conn.execute(
            f"SELECT {waits.COLUMNS} FROM run_waits WHERE status = 'pending'"
            " AND due_at IS NOT NULL AND due_at <= ? ORDER BY due_at LIMIT ?",
            (tx.now, limit),
        ).fetchall()
        for wait in map(waits.from_row, rows):
            status = read_run(tx.conn, wait.run_id).status
            if status not in (RunStatus.WAITING, RunStatus.PAUSED):
                continue  # waits.next_due skips it too: it never holds the scheduler
            tx.conn.execute("SAVEPOINT fire_one")
            try:
                write_run(
                    db,
                    wait.run_id,
                    name="waits.fire",
                    event_type="wait.fired",
                    event_data={
                        "waitId": wait.wait_id,
                        "kind": wait.kind,
                        "nodeId": wait.node_id,
                        "dueAt": wait.due_at,
                        "lateMs": max(0, tx.now - (wait.due_at or tx.now)),
                    },
                    claim=None,
                    apply=functools.partial(_fire, wait=wait),
                )
            except StoreError as exc:  # this run's contradiction; the other waits still fire
                tx.conn.execute("ROLLBACK TO fire_one")
                log.error("wait %s of run %s could not fire: %s", wait.wait_id, wait.run_id, exc)
            else:
                if status is RunStatus.WAITING and wait.kind != "children":
                    queued.append(wait.run_id)
            finally:
                tx.conn.execute("RELEASE fire_one")
    return queued


def _fire(tx: Transaction, run: RunRow, *, wait: Wait) -> None:
    if wait.kind == "children":  # a rate-limited join's next start: the parent waits on
        children.pace_due(tx, wait.wait_id)
        return
    waits.end(tx, wait.wait_id, "fired")
    if run.status is RunStatus.WAITING:
        apply_transition(tx, run, Operation.RESUME, next_command=NextCommand.RESUME)
