"""Random sequences of lifecycle operations, clock jumps and crashes keep every invariant."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from pi_workflows.store import (
    attempts,
    faults,
    interaction_writes,
    interactions,
    lifecycle,
    takeover,
)
from pi_workflows.store.claims import Claim, read_lease
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.errors import (
    ClaimLostError,
    DecisionResolvedError,
    InvalidTransitionError,
    LeaseHeldError,
    RequestClosedError,
    RevisionConflictError,
)
from pi_workflows.store.interactions import InteractionDraft
from pi_workflows.store.lifecycle import Finish, GoTo
from pi_workflows.store.states import AttemptStatus, ParkReason, RunStatus

from support.store import LEASE_MS, new_run, open_test_db, problems

EXPECTED = (
    ClaimLostError,
    DecisionResolvedError,
    RequestClosedError,
    InvalidTransitionError,
    LeaseHeldError,
    RevisionConflictError,
    faults.InjectedFault,
)
NODES = st.sampled_from(["a", "b", "c"])
PICK = st.integers(min_value=0, max_value=5)  # 0: the oldest claim (stale once replaced)


class LifecycleMachine(RuleBasedStateMachine):
    """Drives the real store with a fake clock; ``diagnose`` is the oracle after every step."""

    runs = Bundle("runs")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="pwf-stateful-"))
        self.clock = FakeClock()
        self.db = open_test_db(self.dir / "state", self.clock)
        self.crash_next: str | None = None
        self.claims: dict[str, list[Claim]] = {}

    def teardown(self) -> None:
        faults.disarm_all()
        self.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _claim(self, run_id: str, pick: int) -> Claim | None:
        """The newest claim issued for the run, or (pick == 0) its oldest, usually stale."""
        issued = self.claims.get(run_id)
        if not issued:
            return None
        return issued[0] if pick == 0 else issued[-1]

    def _do(self, point: str, operation: Any) -> Any:
        """Run one operation, with a crash armed at its commit if a crash rule asked for one."""
        if self.crash_next is not None:
            faults.arm(f"{point}.{self.crash_next}")
        try:
            result = operation()
        except EXPECTED as exc:
            event(f"{point}: {type(exc).__name__}")
            return None
        finally:
            faults.disarm_all()
            self.crash_next = None
        event(f"{point}: ok")
        return result

    @initialize(target=runs)
    def first_run(self) -> str:
        return lifecycle.reserve(self.db, new_run()).run_id

    @rule(target=runs)
    def reserve(self) -> str:
        result = self._do("lifecycle.reserve", lambda: lifecycle.reserve(self.db, new_run()))
        return result.run_id if result else lifecycle.reserve(self.db, new_run()).run_id

    @rule(run_id=runs)
    def claim(self, run_id: str) -> None:
        result = self._do("lifecycle.claim", lambda: lifecycle.claim(self.db, run_id, "runner"))
        if result is not None:
            self.claims.setdefault(run_id, []).append(result.claim)

    @rule(run_id=runs, pick=PICK, node=NODES)
    def start_node(self, run_id: str, pick: int, node: str) -> None:
        claim = self._claim(run_id, pick)
        if claim is not None:
            self._do("lifecycle.start_node", lambda: lifecycle.start_node(self.db, claim, node))

    @rule(
        run_id=runs,
        pick=PICK,
        outcome=st.sampled_from(
            [AttemptStatus.COMPLETED, AttemptStatus.FAILED, AttemptStatus.TIMED_OUT]
        ),
        next_node=st.one_of(st.none(), NODES, NODES),
        start_next=st.booleans(),
    )
    def finish_node(
        self,
        run_id: str,
        pick: int,
        outcome: AttemptStatus,
        next_node: str | None,
        start_next: bool,
    ) -> None:
        claim = self._claim(run_id, pick)
        active = attempts.unfinished(self.db.conn, run_id)
        if claim is None or active is None:
            return
        step: GoTo | Finish
        if next_node is None:
            status = {
                AttemptStatus.COMPLETED: RunStatus.COMPLETED,
                AttemptStatus.FAILED: RunStatus.FAILED,
                AttemptStatus.TIMED_OUT: RunStatus.TIMED_OUT,
            }[outcome]
            step = Finish(status, output=1 if status is RunStatus.COMPLETED else None)
        else:
            step = GoTo(next_node)
        self._do(
            "lifecycle.finish_node",
            lambda: lifecycle.finish_node(
                self.db, claim, active.attempt_id, outcome, step, output=1, start_next=start_next
            ),
        )

    @rule(run_id=runs, pick=PICK, kind=st.sampled_from(["checkpoint", "decision"]))
    def wait(self, run_id: str, pick: int, kind: str) -> None:
        claim = self._claim(run_id, pick)
        active = attempts.unfinished(self.db.conn, run_id)
        if claim is None or active is None:
            return
        choices = ["yes", "no"] if kind == "decision" else []
        draft = InteractionDraft(kind, {"q": 1}, choices=choices)
        self._do("lifecycle.wait", lambda: lifecycle.wait(self.db, claim, active.attempt_id, draft))

    @rule(run_id=runs)
    def answer(self, run_id: str) -> None:
        request = interactions.open_request_of(self.db.conn, run_id)
        if request is None:
            return
        if request.kind == "decision":
            self._do(
                "interactions.decide",
                lambda: interaction_writes.answer_decision(
                    self.db, request.request_id, "yes", answered_by="test"
                ),
            )
            return
        self._do(
            "interactions.submit",
            lambda: interaction_writes.submit(
                self.db, request.request_id, {"ok": 1}, kinds=frozenset({"checkpoint"}),
                submitted_by="test",
            ),
        )  # fmt: skip

    @rule(run_id=runs, pick=PICK, accept=st.booleans())
    def validate(self, run_id: str, pick: int, accept: bool) -> None:
        """A validation runner accepts (finishing the attempt) or rejects a submission."""
        claim = self._claim(run_id, pick)
        submission = interactions.validating_of(self.db.conn, run_id)
        active = attempts.unfinished(self.db.conn, run_id)
        if claim is None or submission is None or active is None:
            return
        if accept:
            self._do(
                "lifecycle.finish_node",
                lambda: lifecycle.finish_node(
                    self.db, claim, active.attempt_id, AttemptStatus.COMPLETED, GoTo("b"),
                    output={"ok": 1}, submission_id=submission.submission_id,
                ),
            )  # fmt: skip
        else:
            self._do(
                "interactions.reject",
                lambda: interaction_writes.reject(
                    self.db, claim, submission.submission_id, "not good"
                ),
            )

    @rule(run_id=runs, pick=PICK, reason=st.sampled_from(list(ParkReason)))
    def park(self, run_id: str, pick: int, reason: ParkReason) -> None:
        claim = self._claim(run_id, pick)
        if claim is not None:
            self._do("lifecycle.park", lambda: lifecycle.park(self.db, claim, reason))

    @rule(run_id=runs)
    def pause(self, run_id: str) -> None:
        self._do("lifecycle.pause", lambda: lifecycle.pause(self.db, run_id))

    @rule(run_id=runs)
    def resume(self, run_id: str) -> None:
        self._do("lifecycle.resume", lambda: lifecycle.resume(self.db, run_id))

    @rule(run_id=runs, pick=PICK, end=st.sampled_from(["complete", "fail", "time_out"]))
    def end(self, run_id: str, pick: int, end: str) -> None:
        claim = self._claim(run_id, pick)
        if claim is None:
            return
        operation = {
            "complete": lambda: lifecycle.complete(self.db, claim, {"done": 1}),
            "fail": lambda: lifecycle.fail(self.db, claim, "boom"),
            "time_out": lambda: lifecycle.time_out(self.db, claim, "late"),
        }[end]
        self._do(f"lifecycle.{end}", operation)

    @rule(run_id=runs, pick=PICK, use_claim=st.booleans())
    def cancel(self, run_id: str, pick: int, use_claim: bool) -> None:
        claim = self._claim(run_id, pick) if use_claim else None
        self._do("lifecycle.cancel", lambda: lifecycle.cancel(self.db, run_id, claim=claim))

    @rule(run_id=runs)
    def control_claim(self, run_id: str) -> None:
        result = self._do(
            "lifecycle.control_claim", lambda: lifecycle.control_claim(self.db, run_id)
        )
        if result is not None:
            self.claims.setdefault(run_id, []).append(result)

    @rule(run_id=runs)
    def recover(self, run_id: str) -> None:
        self._do("lifecycle.recover", lambda: takeover.recover(self.db, run_id))

    @rule(
        run_id=runs,
        steps=st.integers(min_value=1, max_value=4),
        node=NODES,
        wait_kind=st.sampled_from([None, None, "checkpoint", "decision"]),
    )
    def progress(self, run_id: str, steps: int, node: str, wait_kind: str | None) -> None:
        """Take the run's natural next steps, as a healthy runner and server would."""
        for _ in range(steps):
            status = self.db.conn.execute(
                "SELECT status FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()[0]
            active = attempts.unfinished(self.db.conn, run_id)
            if status == RunStatus.QUEUED:
                self.claim(run_id)
            elif status == RunStatus.PAUSED:
                self.resume(run_id)
            elif status == RunStatus.WAITING:
                self.answer(run_id)
            elif status == RunStatus.RUNNING and run_id in takeover.expired_running(self.db):
                self.recover(run_id)
            elif status == RunStatus.RUNNING and active is None:
                self.start_node(run_id, 5, node)
            elif status == RunStatus.RUNNING and active.status == "waiting":
                self.validate(run_id, 5, accept=True)
            elif status == RunStatus.RUNNING and active.status == "running" and wait_kind:
                self.wait(run_id, 5, wait_kind)
            elif status == RunStatus.RUNNING:
                self.finish_node(run_id, 5, AttemptStatus.COMPLETED, node, start_next=False)

    @rule(ms=st.sampled_from([1_000, LEASE_MS - 1, LEASE_MS, LEASE_MS + 1, 3 * LEASE_MS]))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @precondition(lambda self: self.crash_next is None)
    @rule(phase=st.sampled_from(["before_commit", "after_commit"]))
    def crash_next_commit(self, phase: str) -> None:
        self.crash_next = phase

    @invariant()
    def diagnose_is_clean(self) -> None:
        assert problems(self.db, timed=False) == []

    @invariant()
    def live_claims_belong_to_running_runs(self) -> None:
        now = self.clock.now_ms()
        for run_id, status in self.db.conn.execute("SELECT run_id, status FROM runs"):
            lease = read_lease(self.db.conn, run_id)
            if lease is not None and lease.live_at(now):
                assert status == RunStatus.RUNNING


LifecycleMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.timeout(600)
class TestLifecycleStateful(LifecycleMachine.TestCase):  # type: ignore[misc,valid-type]
    """Hypothesis runs the lifecycle machine."""
