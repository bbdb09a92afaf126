"""The oracle's live-settings check, on a hand-made ledger: a `chain` run whose `done` node
saw the change its attempt recorded passes; one that reports another change or another
document, and an attempt recording a change the run never had, are violations."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from campaign.context import RunTrack, Violation
from campaign.oracle import settings_seen
from campaign.plan import Mode, PlannedRun

from campaign import ledger as ledgers


class _Ctx(SimpleNamespace):
    def violation(self, kind: str, message: str, run_id: str | None = None) -> Violation:
        found = Violation(1, kind, message, run_id)
        self.violations.append(found)
        return found


def _kinds(output: dict[str, Any], recorded: int, changes: int = 2) -> list[str]:
    ledger = ledgers.Ledger()
    for number in range(changes):
        ledger.settings[("run_a", number)] = {"boost": number * 3}
    ledger.attempts.append(
        ledgers.AttemptRow("run_a", 0, "done", 1, 1, 1, "completed", "att_1", recorded)
    )
    planned = PlannedRun(0, "chain", {"x": 1, "n": 1}, 0.0, "k", False, Mode.PLAIN, None)
    track = RunTrack(planned, run_id="run_a")
    track.view = {"output": output}
    ctx = _Ctx(violations=[], tracks=[track])
    settings_seen(ctx, ledger)  # type: ignore[arg-type]
    return [v.kind for v in ctx.violations]


def test_the_settings_of_the_recorded_change_pass() -> None:
    assert _kinds({"boost": 3, "change": 1}, recorded=1) == []


def test_another_change_or_document_is_a_violation() -> None:
    assert _kinds({"boost": 3, "change": 0}, recorded=1) == ["settingsSeen"]
    assert _kinds({"boost": 0, "change": 1}, recorded=1) == ["settingsSeen"]


def test_an_attempt_naming_a_change_the_run_never_had_is_a_violation() -> None:
    assert "settingsChange" in _kinds({"boost": 3, "change": 5}, recorded=5)
