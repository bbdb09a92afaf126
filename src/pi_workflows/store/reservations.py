"""Creating a run, and starting it over: its definition snapshot, input and source identity.

``reserve`` creates a queued run (revision 1, its ``run.reserved`` event, through
``run_rows.insert_run``) with its definition snapshot, input and the source identity it
must execute; ``restart`` queues an
ended or paused run to run again from its start (a fork: its fork point) in a new round,
optionally on its re-resolved source. Each is one transaction.
"""

from __future__ import annotations

from collections.abc import Mapping

from pi_workflows.store import (
    attempts,
    cleanups,
    deadlines,
    forks,
    interactions,
    jsoncol,
    settings,
    signals,
    tree,
)
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import InvalidTransitionError
from pi_workflows.store.ids import new_id
from pi_workflows.store.run_rows import (
    NewRun,
    RunEnvironment,
    SourceRecord,
    insert_run,
    store_definition,
)
from pi_workflows.store.runs import RunRow, WriteResult, read_run, write_run
from pi_workflows.store.states import AttemptStatus, NextCommand, Operation
from pi_workflows.store.transitions import apply_transition


def reserve(db: Database, new_run: NewRun, *, run_id: str | None = None) -> WriteResult:
    """Create a queued run with its definition snapshot, input and source identity."""
    run_id = run_id or new_id("run")
    with db.atomic("lifecycle.reserve") as tx:
        store_definition(tx, new_run)
        return insert_run(tx, new_run, run_id)


def restart(
    db: Database,
    run_id: str,
    *,
    new_source: tuple[NewRun, str] | None = None,
    expected_revision: int | None = None,
    claims: Mapping[str, Claim] | None = None,
) -> WriteResult:
    """Queue a paused, waiting or ended run (completed too) to run again from its start.

    Starts a new round: earlier attempts stay as history, but the next runner sees no
    outputs, results or steps, and events the old round never took are discarded (a wait,
    a request or a sleep of the old round is cancelled). A fork's start is its fork point:
    its new round carries again what the fork carried (``forks.carry_again``). Refused
    while any effect of the run is ambiguous (an operator resolves those first); idempotent
    effects left pending by a lost runner are cancelled. The child runs of the old round
    are cancelled in the same transaction (``claims``: the live claims of those still
    running); the new round starts new children. A child run is never restarted alone (its
    parent's join counted its end): its parent's restart starts a new one.
    ``new_source`` (the re-resolved run and its definition digest) replaces the recorded
    source identity, so a restart runs the code as it is now.
    """

    def apply(tx: Transaction, run: RunRow) -> None:
        parent = tx.conn.execute(
            "SELECT parent_run_id FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()[0]
        if parent is not None:
            raise InvalidTransitionError(
                run_id,
                Operation.RESTART.value,
                run.status.value,
                f"it is a child of run {parent}, whose node already took its result; restart"
                f" the parent ('pi-workflows run restart {parent}'), which starts new children",
            )
        # Its own and its tree's: a restart cancels the runs below, and the new round's
        # children would apply again what nobody knows whether the old ones applied.
        open_effects = forks.unsettled_effects(tx.conn, run_id)
        if open_effects:
            raise InvalidTransitionError(
                run_id,
                Operation.RESTART.value,
                run.status.value,
                f"effect(s) {', '.join(open_effects[:5])} of it or of a run below it are"
                " applying or ambiguous; pause it (its tree's nodes then settle their effects)"
                " or resolve them with 'pi-workflows effect resolve' first",
            )
        # Idempotent effects a lost runner left pending belong to the old round: the new
        # round's keys differ, so they will never be reserved again.
        tx.conn.execute(
            "UPDATE effects SET status = 'cancelled', updated_at = ?"
            " WHERE run_id = ? AND status = 'pending'",
            (tx.now, run_id),
        )
        apply_transition(tx, run, Operation.RESTART, next_command=NextCommand.RESTART)
        deadlines.rearm(tx, run_id)  # a new round has the whole deadline again
        cleanups.end_with_round(tx, run_id)
        attempts.close_unfinished(tx, run_id, AttemptStatus.INTERRUPTED)
        interactions.cancel_open(tx, run_id)
        signals.discard_pending(tx, run_id)  # events of the old round are not the new one's
        tx.conn.execute(
            "UPDATE runs SET round = round + 1, step_count = 0, current_node = NULL,"
            " unrouted_attempt = NULL, output_json = NULL, output_ref = NULL, error = NULL,"
            " finished_at = NULL"
            " WHERE run_id = ?",
            (run_id,),
        )
        # A fork starts each round at its fork point, with what it carried.
        forks.carry_again(
            tx, run, run.round + 1, None if new_source is None else new_source[0].definition
        )
        if new_source is not None:
            fresh, digest = new_source
            store_definition(tx, fresh)
            source = fresh.source
            tx.conn.execute(
                "UPDATE runs SET definition_digest = ? WHERE run_id = ?", (digest, run_id)
            )
            tx.conn.execute(
                "UPDATE run_sources SET source_kind = ?, source_ref = ?, source_revision = ?,"
                " mounted_json = ? WHERE run_id = ?",
                (source.kind, source.ref, source.revision, jsoncol.dumps(source.mounted), run_id),
            )
            # The settings stay when the code as it is now accepts them (store/settings.py).
            note = settings.rebase(tx, run_id, fresh.definition, "restart")
            if note is not None:
                data["settings"] = note

    with db.atomic("lifecycle.restart") as tx:
        before = read_run(tx.conn, run_id)
        data: dict[str, object] = {"round": before.round + 1, "from": before.status.value}
        result = write_run(
            db,
            run_id,
            name="lifecycle.restart",
            event_type="run.restarted",
            event_data=data,
            claim=None,
            expected_revision=expected_revision,
            apply=apply,
        )
        tree.cancel_below(db, tx, run_id, claims, f"its parent run {run_id} was restarted")
        return result


__all__ = ["NewRun", "RunEnvironment", "SourceRecord", "reserve", "restart"]
