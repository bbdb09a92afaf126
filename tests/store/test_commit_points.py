"""Every declared commit point, crashed just before and just after its commit.

Each scenario of ``support.commit_points`` is crashed by an exception in this process (the
server survives: the caller retries, or the supervisor settles the runner) and by the exit
of a forked child that dies like SIGKILL (a new server restarts). Either way ``diagnose``
finds nothing new, a crash before the commit changed nothing and one after it changed
everything, a command retried with its key adopts its receipt or applies once, and after
a restart every run can be driven to its end with each node visit completed and each effect
applied at most once. The meta-tests keep the scenario table equal to the registry.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import sqlite3
import subprocess
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.store import faults
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database
from pi_workflows.store.errors import StoreError
from pi_workflows.store.receipts import Receipt

from support.commit_points import CLIENT, CRASH_MESSAGE, SCENARIOS, Scenario
from support.crash_oracle import check_oracle, drive_to_end, restart, settle_crashed_runner
from support.store import count, open_test_db, problems, snapshot

PHASES = ["before_commit", "after_commit"]
IDS = [scenario.name for scenario in SCENARIOS]
START_MS = 1_800_000_000_000
CHILD_SECONDS = 30
SRC = Path(__file__).resolve().parents[2] / "src" / "pi_workflows"


@dataclass(frozen=True)
class Before:
    """What the prepared state held just before the crashed transaction began."""

    rows: dict[str, list[tuple[Any, ...]]]
    problems: list[str]
    events: int


def _events(db: Database, scenario: Scenario) -> int:
    return 0 if scenario.event is None else count(db, "events", "type = ?", scenario.event)


def _before(db: Database, scenario: Scenario) -> Before:
    return Before(snapshot(db), problems(db, timed=False), _events(db, scenario))


def _check_crashed(db: Database, scenario: Scenario, phase: str, before: Before) -> None:
    """Before the commit nothing changed; after it the whole change is there, and only it."""
    committed = phase == "after_commit"
    found = problems(db, timed=False)
    assert set(found) <= set(before.problems), found
    if committed and scenario.writes:
        assert snapshot(db) != before.rows
    else:
        assert snapshot(db) == before.rows
    assert _events(db, scenario) == before.events + (
        scenario.events if committed and scenario.event else 0
    )
    if scenario.kind == "runner":  # the reply is stored with the change, or neither is
        replies = count(db, "runner_messages", "message_id = ?", CRASH_MESSAGE)
        assert replies == (1 if committed else 0)
    if scenario.kind == "command":  # the receipt is stored with the change, or neither is
        assert count(db, "server_commands", "client_id = ?", CLIENT) == (1 if committed else 0)


def _retry(
    db: Database, clock: FakeClock, scenario: Scenario, phase: str, ctx: Any, before: Before
) -> None:
    """The caller issues the transaction again; a command adopts or applies exactly once."""
    if scenario.kind == "command":
        rows = snapshot(db)
        receipt = scenario.run(db, clock, ctx)
        assert isinstance(receipt, Receipt)
        assert receipt.adopted == (phase == "after_commit")
        if receipt.adopted:
            assert snapshot(db) == rows  # adopting writes nothing
        assert count(db, "server_commands", "client_id = ?", CLIENT) == 1
        assert _events(db, scenario) == before.events + (scenario.events if scenario.event else 0)
    elif phase == "before_commit":
        scenario.run(db, clock, ctx)  # nothing was committed: it can simply run again
        assert _events(db, scenario) == before.events + (scenario.events if scenario.event else 0)
    else:  # refused by the store or a database rule (and nothing changes), or a new valid one
        rows = snapshot(db)
        try:
            scenario.run(db, clock, ctx)
        except (StoreError, sqlite3.IntegrityError):
            assert snapshot(db) == rows
    assert problems(db, timed=False) == []


def _restart_and_finish(home: Path, clock: FakeClock) -> None:
    db = restart(home, clock)
    try:
        drive_to_end(db, clock)
        check_oracle(db)
    finally:
        db.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
def test_an_exception_at_a_commit_point_loses_nothing_and_repeats_nothing(
    tmp_path: Path, scenario: Scenario, phase: str
) -> None:
    """Window: an exception just before / just after the commit of ``scenario.point``; the
    server survives (the caller retries, a runner is settled), then restarts and finishes."""
    home, clock = tmp_path / "state", FakeClock(START_MS)
    db = open_test_db(home, clock)
    try:
        ctx = scenario.prepare(db, clock)
        before = _before(db, scenario)
        faults.arm(f"{scenario.point}.{phase}")
        with pytest.raises(faults.InjectedFault) as raised:
            scenario.run(db, clock, ctx)
        faults.disarm_all()
        assert raised.value.point == f"{scenario.point}.{phase}"
        assert not db.in_transaction
        _check_crashed(db, scenario, phase, before)
        if scenario.kind == "runner":
            settle_crashed_runner(db, ctx["runner"])
        else:
            _retry(db, clock, scenario, phase, ctx, before)
    finally:
        faults.disarm_all()
        db.close()
    _restart_and_finish(home, clock)


def _exit_in_child(home: Path, now_ms: int, scenario: Scenario, phase: str, ctx: Any) -> int:
    """Fork a child that opens ``home`` and dies at the armed point; its exit status."""
    error = home.parent / "child-error.txt"
    with warnings.catch_warnings():
        # Python 3.12+ warns when a process with threads (pytest-xdist's) forks; the child
        # only opens its own connection and ends with os._exit.
        warnings.filterwarnings("ignore", ".*fork.*", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        status = 3  # the fault point should have ended the process first
        try:
            clock = FakeClock(now_ms)
            db = open_test_db(home, clock)
            faults.arm(f"{scenario.point}.{phase}", "exit")
            scenario.run(db, clock, ctx)
        except BaseException:
            error.write_text(traceback.format_exc())
            status = 4
        os._exit(status)
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], CHILD_SECONDS)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        _, wait_status = os.waitpid(pid, 0)
    finally:
        os.close(pidfd)
    code = os.waitstatus_to_exitcode(wait_status)
    assert code == faults.EXIT_STATUS, error.read_text() if error.exists() else code
    return code


@pytest.mark.timeout(60)
@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
def test_a_process_exit_at_a_commit_point_loses_nothing_and_repeats_nothing(
    tmp_path: Path, scenario: Scenario, phase: str
) -> None:
    """Window: the process dies like SIGKILL just before / just after the commit of
    ``scenario.point``; a new server restarts, its callers retry, every run finishes."""
    home, clock = tmp_path / "state", FakeClock(START_MS)
    db = open_test_db(home, clock)
    try:
        ctx = scenario.prepare(db, clock)
        before = _before(db, scenario)
    finally:
        db.close()  # a connection must never cross a fork: the child opens its own
    _exit_in_child(home, clock.now_ms(), scenario, phase, ctx)
    db = open_test_db(home, clock)
    try:
        _check_crashed(db, scenario, phase, before)
    finally:
        db.close()
    db = restart(home, clock)
    try:
        if scenario.kind == "command" or scenario.again:
            _retry(db, clock, scenario, phase, ctx, before)
        drive_to_end(db, clock)
        check_oracle(db)
    finally:
        db.close()


# --- the registry ---------------------------------------------------------------------------

LIST_DECLARED = (
    "import json, pi_workflows.server.app;"
    " from pi_workflows.store import faults;"
    " print(json.dumps(faults.declared()))"
)


@pytest.fixture(scope="module")
def declared() -> dict[str, str]:
    """The registry as a fresh server process sees it (no test declared anything there)."""
    out = subprocess.run(
        [sys.executable, "-c", LIST_DECLARED], capture_output=True, text=True, timeout=60,
        check=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout))


@pytest.mark.timeout(60)
def test_every_declared_commit_point_has_a_crash_scenario(declared: dict[str, str]) -> None:
    """A declared point without a scenario, or a scenario of an undeclared point, fails."""
    crashed = {scenario.point for scenario in SCENARIOS}
    assert sorted(set(declared) - crashed) == [], "declared commit points nobody crashes"
    assert sorted(crashed - set(declared)) == [], "scenarios of undeclared commit points"
    assert all(what.strip() for what in declared.values())


@pytest.mark.timeout(60)
def test_every_literal_transaction_name_in_the_source_is_declared(
    declared: dict[str, str],
) -> None:
    """Each ``atomic("NAME")`` in the store and server names a declared commit point."""
    names = {
        match.group(1)
        for path in SRC.rglob("*.py")
        for match in re.finditer(r"\.atomic\(\s*\"([^\"]+)\"", path.read_text())
    }
    assert {"lifecycle.reserve", "command.lookup"} <= names
    assert sorted(names - set(declared)) == []


@pytest.mark.timeout(60)
def test_atomic_refuses_an_undeclared_transaction_before_it_begins(db: Database) -> None:
    """An outermost ``atomic`` with an undeclared name raises ``ValueError`` naming it and
    opens no transaction; inside a declared one, the name is only joined."""
    refused = pytest.raises(ValueError, match=r"'lifecycle\.nope' has no declared commit point")
    with refused, db.atomic("lifecycle.nope"):
        raise AssertionError("the block must not run")
    assert not db.in_transaction
    assert not db.conn.in_transaction
    with db.atomic("lifecycle.fence") as outer, db.atomic("a.nested.join") as inner:
        assert inner is outer


@pytest.mark.timeout(60)
def test_declare_keeps_one_sentence_per_commit_point() -> None:
    """Declaring a point again with the same sentence is a no-op; another sentence is refused."""
    what = faults.declared()["lifecycle.reserve"]
    faults.declare("lifecycle.reserve", what)
    assert faults.declared()["lifecycle.reserve"] == what
    with pytest.raises(ValueError, match="already declared"):
        faults.declare("lifecycle.reserve", "something else")
