"""The oracle's run-deadline and cleanup checks, on hand-made facts: a `lapse` run that did
not end at its deadline, whose cleanup is missing, failed with no fault to explain it, ran
with another reason, applied twice, or was killed mid-way and never ran again, is a
violation; the facts of a clean one (killed mid-way and resumed) are not."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from campaign.context import RunTrack, Violation
from campaign.lapse import check, self_kill_causes
from campaign.plan import Mode, PlannedRun
from campaign.witness import Body, Witnesses

REASON = "the run deadline passed (2s after the run started, at 2026-12-06T00:00:02Z)"
INPUT = {"x": 5, "work": 4.0, "hold": [0.2, 0.1], "kill": "before"}


class _Ctx(SimpleNamespace):
    def violation(self, kind: str, message: str, run_id: str | None = None) -> Violation:
        found = Violation(1, kind, message, run_id)
        self.violations.append(found)
        return found


def _body(nonce: str, *, applied: bool, started: float, reason: str = REASON) -> Body:
    body = Body(nonce, "action", "idempotent", "key-1", "run_l", "release", 1, 100)
    body.events = ["start", "applied" if applied else "dedup", "done"]
    body.result = {"value": {"x": 95, "reason": reason}, "key": "key-1"} if applied else None
    body.started_at = started
    return body


def _ctx(
    tmp_path: Path,
    *,
    status: str = "timed_out",
    error: str = REASON,
    cleanup: dict[str, Any] | None = None,
    bodies: list[Body] | None = None,
    kill_at: float | None = 10.0,
    faults: list[dict[str, Any]] | None = None,
) -> _Ctx:
    planned = PlannedRun(0, "lapse", INPUT, 0.0, "k", False, Mode.PLAIN)
    shown = {"nodeId": "release", "status": "completed", "reason": REASON, "error": None}
    view = {"status": status, "error": error, "cleanup": shown if cleanup is None else cleanup}
    witnesses = Witnesses(tmp_path)
    for body in bodies if bodies is not None else [_body("n1", applied=True, started=11.0)]:
        witnesses.bodies[body.nonce] = body
        witnesses.order.append(body.nonce)
    if kill_at is not None:
        witnesses.self_kills.append({"e": "selfKill", "run": "run_l", "pid": 99, "t": kill_at})
    track = RunTrack(planned, run_id="run_l", view=view)
    return _Ctx(tracks=[track], violations=[], witnesses=witnesses, faults_done=faults or [])


def _kinds(ctx: _Ctx) -> list[str]:
    return sorted(v.kind for v in ctx.violations)


def test_a_run_ended_at_its_deadline_whose_cleanup_resumed_once_has_no_violation(
    tmp_path: Path,
) -> None:
    ctx = _ctx(tmp_path, bodies=[_body("n1", applied=True, started=11.0)])
    check(ctx)
    assert _kinds(ctx) == []


@pytest.mark.parametrize(
    ("change", "kind"),
    [
        ({"status": "completed"}, "runDeadline"),
        ({"error": "node work did not finish"}, "runDeadline"),
        ({"cleanup": {}}, "cleanup"),
        ({"cleanup": {"nodeId": "release", "status": "failed", "reason": REASON}}, "cleanup"),
        ({"cleanup": {"nodeId": "release", "status": "completed", "reason": "x"}}, "cleanup"),
        ({"bodies": []}, "cleanupEffect"),
        ({"bodies": [_body("n1", applied=True, started=11.0),
                     _body("n2", applied=True, started=12.0)]}, "cleanupEffect"),
        ({"bodies": [_body("n1", applied=True, started=11.0, reason="other")]}, "cleanupEffect"),
        ({"bodies": [_body("n1", applied=True, started=9.0)]}, "cleanupResumed"),
    ],
)  # fmt: skip
def test_each_broken_fact_is_a_violation(tmp_path: Path, change: dict[str, Any], kind: str) -> None:
    ctx = _ctx(tmp_path, **change)
    check(ctx)
    assert kind in _kinds(ctx)


def test_a_failed_cleanup_is_excused_only_by_a_fault_on_its_run(tmp_path: Path) -> None:
    failed = {"nodeId": "release", "status": "failed", "reason": REASON, "error": "crashed"}
    ctx = _ctx(tmp_path, cleanup=failed, faults=[{"kind": "killRunner", "runId": "run_l"}])
    check(ctx)
    assert _kinds(ctx) == []


def test_a_self_kill_is_a_runner_kill_of_its_pid_for_attribution() -> None:
    (cause,) = self_kill_causes([{"run": "run_l", "pid": 99, "t": 1.5}])
    assert (cause.kind, cause.run_id, cause.pids, cause.start) == ("selfKill", "run_l", {99}, 1500)


def test_a_run_cancelled_before_it_started_needs_no_cleanup(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, status="cancelled", error="cancelled by request", bodies=[],
               kill_at=None)  # fmt: skip
    ctx.tracks[0].view["cleanup"] = None
    ctx.tracks[0].cancel_sent = True
    check(ctx)
    assert _kinds(ctx) == []
    ctx.tracks[0].view["attempts"] = [{"nodeId": "work"}]
    check(ctx)
    assert _kinds(ctx) == ["cleanup"]
