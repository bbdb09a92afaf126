"""Helpers that build runs in a real state database for store tests."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

from pi_workflows.store import lifecycle
from pi_workflows.store.claims import Claim
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database, open_database
from pi_workflows.store.diagnose import diagnose
from pi_workflows.store.effect_writes import reserve_effect, settle_effect
from pi_workflows.store.effects import EffectStatus
from pi_workflows.store.lifecycle import Finish, GoTo, NewRun, RunEnvironment, SourceRecord
from pi_workflows.store.states import AttemptStatus, RunStatus

LEASE_MS = 30_000


def open_test_db(home: Path, clock: FakeClock | None = None) -> Database:
    """Open a state database in ``home`` with a fake clock and a 30 s lease."""
    return open_database(home, clock=clock or FakeClock(), lease_ms=LEASE_MS)


def new_run(name: str = "sample", value: Any = None) -> NewRun:
    """A small run definition with a stable digest."""
    definition = {"name": name, "start": "a", "nodes": {"a": {"kind": "compute"}}, "edges": []}
    text = json.dumps(definition, sort_keys=True, separators=(",", ":")).encode()
    run_input = {"value": value}
    return NewRun(
        workflow_name=name,
        definition=definition,
        definition_digest=hashlib.sha256(text).hexdigest(),
        input=run_input,
        input_hash=hashlib.sha256(json.dumps(run_input).encode()).hexdigest(),
        source=SourceRecord("builtin", f"builtin:{name}", "test-1", None, {}),
        environment=RunEnvironment(None, {"PATH": "/usr/bin:/bin"}),
    )


def chain_run(
    name: str = "chain",
    kinds: dict[str, str] | None = None,
    *,
    effect_on: str | None = "b",
    revision: str = "test-1",
    value: Any = None,
) -> NewRun:
    """A run of a straight chain of nodes (``kinds``: node id to kind, in order; default
    ``a`` compute, ``b`` action, ``c`` compute, ``d`` compute) whose ``effect_on`` node
    declares an idempotent ``ledger`` effect; ``revision`` names its source revision."""
    kinds = kinds or {"a": "compute", "b": "action", "c": "compute", "d": "compute"}
    order = list(kinds)
    nodes: dict[str, Any] = {}
    for node_id, kind in kinds.items():
        nodes[node_id] = {"kind": kind}
        if node_id == effect_on:
            nodes[node_id]["effect"] = {"kind": "idempotent", "type": "ledger"}
    definition = {
        "name": name,
        "start": order[0],
        "nodes": nodes,
        "edges": [{"from": a, "to": b} for a, b in itertools.pairwise(order)],
    }
    text = json.dumps(definition, sort_keys=True, separators=(",", ":")).encode()
    run_input = {"value": value}
    return NewRun(
        workflow_name=name,
        definition=definition,
        definition_digest=hashlib.sha256(text).hexdigest(),
        input=run_input,
        input_hash=hashlib.sha256(json.dumps(run_input).encode()).hexdigest(),
        source=SourceRecord("builtin", f"builtin:{name}", revision, None, {}),
        environment=RunEnvironment(None, {"PATH": "/usr/bin:/bin"}),
    )


def _apply_ledger(db: Database, claim: Claim, attempt_id: str, node_id: str) -> None:
    reservation, _ = reserve_effect(
        db, claim, attempt_id=attempt_id, effect_type="ledger",
        effect_kind="idempotent", fingerprint=f"fp-{node_id}",
    )  # fmt: skip
    settle_effect(
        db, claim, reservation.effect_id, EffectStatus.APPLIED,
        result={"wrote": node_id}, receipt={"line": 1},
    )  # fmt: skip


def walk_until(db: Database, claim: Claim, nodes: list[str], *, effect_on: str | None = "b") -> str:
    """As ``walk``, but the last of ``nodes`` is only started: returns its open attempt's id
    (the caller settles it, e.g. as failed)."""
    attempt = lifecycle.start_node(db, claim, nodes[0]).attempt
    for index, node_id in enumerate(nodes[:-1]):
        if node_id == effect_on:
            _apply_ledger(db, claim, attempt.attempt_id, node_id)
        finished = lifecycle.finish_node(
            db, claim, attempt.attempt_id, AttemptStatus.COMPLETED, GoTo(nodes[index + 1]),
            output={"node": node_id}, start_next=True,
        )  # fmt: skip
        assert finished.next_attempt is not None
        attempt = finished.next_attempt
    return attempt.attempt_id


def walk(db: Database, claim: Claim, nodes: list[str], *, effect_on: str | None = "b") -> str:
    """As a runner: settle each of ``nodes`` in order (completed, output ``{"node": id}``),
    applying the ``ledger`` effect at ``effect_on``; the last finish completes the run.
    Returns the id of the last attempt."""
    attempt = lifecycle.start_node(db, claim, nodes[0]).attempt
    for index, node_id in enumerate(nodes):
        if node_id == effect_on:
            _apply_ledger(db, claim, attempt.attempt_id, node_id)
        last = index == len(nodes) - 1
        step: GoTo | Finish = (
            Finish(RunStatus.COMPLETED, {"done": node_id}) if last else GoTo(nodes[index + 1])
        )
        finished = lifecycle.finish_node(
            db, claim, attempt.attempt_id, AttemptStatus.COMPLETED, step,
            output={"node": node_id}, start_next=not last,
        )  # fmt: skip
        if not last:
            assert finished.next_attempt is not None
            attempt = finished.next_attempt
    return attempt.attempt_id


def reserve(db: Database, name: str = "sample") -> str:
    """Reserve a queued run and return its id."""
    return lifecycle.reserve(db, new_run(name)).run_id


def running(db: Database, owner: str = "runner-1") -> Claim:
    """Reserve and claim a run; return the runner claim."""
    return lifecycle.claim(db, reserve(db), owner).claim


def problems(db: Database, *, timed: bool = True) -> list[str]:
    """Diagnose the database and return problem codes with run ids.

    ``timed=False`` leaves out the checks that depend on the clock (a claim that expired is
    a state recovery resolves, not a contradiction of the rows).
    """
    with db.read() as conn:
        now = db.clock.now_ms() if timed else None
        return [f"{p.code}:{p.run_id}" for p in diagnose(conn, now)]


def run_status(db: Database, run_id: str) -> str:
    """The stored run status."""
    return str(db.conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0])


def count(db: Database, table: str, where: str = "1", *args: Any) -> int:
    """Count rows of ``table`` matching ``where``."""
    return int(db.conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {where}", args).fetchone()[0])


def snapshot(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, for before/after comparisons."""
    tables = [
        row[0]
        for row in db.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    return {
        table: [tuple(row) for row in db.conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
        for table in sorted(tables)
    }
