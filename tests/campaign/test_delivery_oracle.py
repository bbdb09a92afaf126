"""The oracle's delivery check, on hand-made views: a step seen `stalled` (delivered, no
live turn, nothing due) for longer than the bound in a row is a violation; a stall that ends
in time, a step that moves to another request, and every other delivery state are not."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from campaign.context import RunTrack, Violation
from campaign.observe import STALL_SECONDS, _delivery
from campaign.plan import Mode, PlannedRun


class _Ctx(SimpleNamespace):
    def violation(self, kind: str, message: str, run_id: str | None = None) -> Violation:
        found = Violation(1, kind, message, run_id)
        self.violations.append(found)
        return found


def _setup() -> tuple[_Ctx, RunTrack]:
    planned = PlannedRun(0, "review", {"x": 5}, 0.0, "k", False, Mode.DETACHED, None)
    track = RunTrack(planned, run_id="run_a")
    return _Ctx(violations=[]), track


def _view(state: str, request: str = "req_1") -> dict[str, Any]:
    return {
        "waitingOn": {
            "requestId": request,
            "nodeId": "review",
            "delivery": {"state": state, "since": 0, "detail": "delivered, no turn"},
        }
    }


def test_a_step_stalled_past_the_bound_is_a_violation() -> None:
    ctx, track = _setup()
    _delivery(ctx, track, _view("stalled"), 100.0)  # type: ignore[arg-type]
    _delivery(ctx, track, _view("stalled"), 100.0 + STALL_SECONDS / 2)  # type: ignore[arg-type]
    assert ctx.violations == []
    _delivery(ctx, track, _view("stalled"), 100.0 + STALL_SECONDS + 1)  # type: ignore[arg-type]
    assert [v.kind for v in ctx.violations] == ["stepStalled"]
    assert "req_1" in ctx.violations[0].message


def test_a_stall_that_ends_or_moves_on_in_time_is_not() -> None:
    ctx, track = _setup()
    _delivery(ctx, track, _view("stalled"), 0.0)  # type: ignore[arg-type]
    _delivery(ctx, track, _view("working"), STALL_SECONDS - 1)  # type: ignore[arg-type]
    _delivery(ctx, track, _view("stalled"), STALL_SECONDS)  # type: ignore[arg-type]
    _delivery(ctx, track, _view("stalled", "req_2"), STALL_SECONDS * 1.5)  # type: ignore[arg-type]
    _delivery(ctx, track, _view("stalled", "req_2"), STALL_SECONDS * 2)  # type: ignore[arg-type]
    for state in ("presenting", "presentDue", "seatGone", "validating", "waitingForAnswer"):
        _delivery(ctx, track, _view(state), 0.0)  # type: ignore[arg-type]
        _delivery(ctx, track, _view(state), 10 * STALL_SECONDS)  # type: ignore[arg-type]
    _delivery(ctx, track, {"waitingOn": None}, 0.0)  # type: ignore[arg-type]
    assert ctx.violations == []
