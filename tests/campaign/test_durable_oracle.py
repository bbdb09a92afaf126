"""The oracle's durable-time checks, on hand-made facts: each broken promise is a
violation (a wait fired early or left pending, a round of retries tried too often, an
attempt whose body ran twice, a wrong, refused-valid or second event consumed, one event
key stored twice), and the facts of a clean run are not."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from campaign.context import RunTrack, Violation
from campaign.ledger import AttemptRow, Ledger, SignalRow, WaitRow
from campaign.oracle import durable
from campaign.plan import Mode, PlannedRun
from campaign.workflows import TIMER_ATTEMPTS, write_project

from pi_workflows.sources import load, resolve

T = 1_800_000_000_000


class _Ctx(SimpleNamespace):
    def violation(self, kind: str, message: str, run_id: str | None = None) -> Violation:
        found = Violation(1, kind, message, run_id)
        self.violations.append(found)
        return found

    def track_of(self, run_id: str) -> RunTrack | None:
        return next((t for t in self.tracks if t.run_id == run_id), None)


def _ctx(tmp_path: Path, tries: list[str]) -> _Ctx:
    planned = PlannedRun(0, "timer", {"x": 5, "fails": 1}, 0.0, "k", False, Mode.PLAIN, None)
    (tmp_path / "tries").mkdir()
    (tmp_path / "tries" / "run_a-call").write_text("".join(t + "\n" for t in tries))
    return _Ctx(tracks=[RunTrack(planned, run_id="run_a")], violations=[], witness_dir=tmp_path)


def _attempt(no: int, status: str, try_no: int = 1) -> AttemptRow:
    return AttemptRow("run_a", 0, "call", 1, no, try_no, status, f"att_{no}")


def _kinds(ctx: _Ctx) -> list[str]:
    return sorted(v.kind for v in ctx.violations)


def _clean() -> dict[str, Any]:
    return {
        "attempts": [_attempt(1, "retried"), _attempt(2, "completed", 2)],
        "waits": [WaitRow("run_a", "wt_1", "sleep", "fired", T, T + 5, T - 1000)],
        "signals": [SignalRow("run_a", "sig_1", 1, {"x": 5}, "consumed", "att_3", "key")],
    }


def test_a_clean_timer_run_has_no_violation(tmp_path: Path) -> None:
    """Two tries in one round, a sleep fired after its time, one valid event consumed."""
    ctx = _ctx(tmp_path, ["att_1", "att_2"])
    durable(ctx, Ledger(**_clean()))  # type: ignore[arg-type]
    assert ctx.violations == []


def test_each_broken_durable_promise_is_a_violation(tmp_path: Path) -> None:
    """Early and pending waits, too many tries, a body run twice, wrong, refused-valid and
    second events, and a duplicated key each give their own violation."""
    facts = _clean()
    facts["attempts"] = [_attempt(n, "retried", n) for n in range(1, TIMER_ATTEMPTS + 1)] + [
        _attempt(TIMER_ATTEMPTS + 1, "completed", TIMER_ATTEMPTS + 1)
    ]
    facts["waits"] = [
        WaitRow("run_a", "wt_1", "sleep", "fired", T, T - 5, T - 1000),
        WaitRow("run_a", "wt_2", "retry", "pending", T, None, T - 1000),
    ]
    facts["signals"] += [
        SignalRow("run_a", "sig_2", 2, {"x": 6}, "consumed", "att_4", "key"),
        SignalRow("run_a", "sig_3", 3, {"x": 5}, "rejected", None, None),
    ]
    ctx = _ctx(tmp_path, ["att_1", "att_1"])
    durable(ctx, Ledger(**facts))  # type: ignore[arg-type]
    assert _kinds(ctx) == [
        "bodyRanTwice",
        "eventDuplicated",
        "eventTwice",
        "firedEarly",
        "invalidAccepted",
        "triedTooOften",
        "validRejected",
        "waitLeft",
    ]


def test_a_round_ends_at_an_exhausted_try(tmp_path: Path) -> None:
    """After an ``exhausted`` try a person's resume starts a fresh round: its tries count
    from one again, and interrupted attempts are no tries at all."""
    attempts = [_attempt(n, "retried", n) for n in range(1, TIMER_ATTEMPTS)]
    attempts.append(_attempt(TIMER_ATTEMPTS, "exhausted", TIMER_ATTEMPTS))
    attempts += [_attempt(10, "interrupted"), _attempt(11, "retried"), _attempt(12, "completed", 2)]
    ctx = _ctx(tmp_path, [a.attempt_id for a in attempts])
    durable(ctx, Ledger(attempts=attempts))
    assert ctx.violations == []


def test_every_campaign_workflow_loads(tmp_path: Path) -> None:
    """The project the campaign writes (its workflows and their witness helper) loads."""
    write_project(tmp_path / "project", tmp_path / "witness")
    flows = sorted((tmp_path / "project" / ".pi" / "workflows").glob("*.workflow.py"))
    assert flows
    for path in flows:
        loaded = load(resolve(str(path), tmp_path / "project"))
        assert f"{loaded.workflow.name}.workflow.py" == path.name
