"""Operations on a run's whole tree of child runs: cancelling the runs below a run.

Each runs inside a caller's transaction (a cancel, a restart, a fail_fast join's cleanup),
so a tree changes in one commit. A run below with a live claim is cancelled under the
claim the caller gives for it (the server's runner's); without one, a control claim is
taken, which a live claim refuses (``LeaseHeldError``), so no runner is overtaken behind its
back.
"""

from __future__ import annotations

from collections.abc import Mapping

from pi_workflows.store import children, cleanups
from pi_workflows.store.claims import Claim, OwnerType, acquire, read_lease
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.ids import new_id
from pi_workflows.store.runs import read_run
from pi_workflows.store.states import TERMINAL_STATUSES, RunStatus


def cancel_runs(
    db: Database,
    tx: Transaction,
    run_ids: list[str],
    claims: Mapping[str, Claim] | None,
    why: str,
) -> list[str]:
    """Cancel every unfinished run of ``run_ids`` (parents before children), each with its
    own revision and event; returns the ids cancelled."""
    done: list[str] = []
    for run_id in run_ids:
        run = read_run(tx.conn, run_id)
        if run.status in TERMINAL_STATUSES:
            continue
        given = (claims or {}).get(run_id)
        lease = read_lease(tx.conn, run_id)
        if given is not None and (
            lease is None or lease.generation != given.generation or not lease.live_at(tx.now)
        ):
            given = None  # its runner's claim is gone already: a control claim is taken
        fence = given or acquire(tx, run_id, OwnerType.CONTROL, new_id("ctl"), db.lease_ms)
        # Its own cleanup node, if its workflow declares one, runs too (store/cleanups.py).
        cleanups.end_run(db, tx, run_id, fence, RunStatus.CANCELLED, why, name="lifecycle.cancel")
        done.append(run_id)
    return done


def cancel_below(
    db: Database, tx: Transaction, run_id: str, claims: Mapping[str, Claim] | None, why: str
) -> list[str]:
    """Cancel every unfinished run below ``run_id`` in its tree."""
    return cancel_runs(db, tx, children.descendants(tx.conn, run_id), claims, why)
