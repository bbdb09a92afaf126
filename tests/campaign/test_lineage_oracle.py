"""The oracle's lineage checks, on hand-made facts: a fork that names another source, that
its key made twice, or that ran a body it carried, and an upgraded run upgraded twice or
completed on the old code, are violations; the facts of a clean fork and upgrade are not."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from campaign.context import RunTrack, Violation
from campaign.lineage import check
from campaign.plan import Mode, PlannedFork, PlannedRun
from campaign.witness import Body, Witnesses

INPUT = {"x": 5, "fetchHold": 0.1, "storeHold": 0.1}


class _Surfaces:
    def __init__(self, runs: dict[str, Any], history: list[dict[str, Any]]) -> None:
        self.runs = runs
        self.events = history

    def read(self, method: str, run_id: str) -> Any:
        return self.runs.get(run_id) if method == "get_run" else self.events


class _Ctx(SimpleNamespace):
    def violation(self, kind: str, message: str, run_id: str | None = None) -> Violation:
        found = Violation(1, kind, message, run_id)
        self.violations.append(found)
        return found


def _fork_ctx(
    tmp_path: Path, *, named: str = "run_s", forks: list[str] | None = None, body_at: int = 0
) -> _Ctx:
    source = RunTrack(PlannedRun(0, "sync", INPUT, 0.0, "k0", False, Mode.PLAIN), run_id="run_s")
    planned = PlannedRun(1, "sync", INPUT, 0.0, "k1", False, fork=PlannedFork(0, "store", None))
    attempts = [
        {"nodeId": "fetch", "visit": 1, "carriedFrom": "att_1"},
        {"nodeId": "store", "visit": 1, "carriedFrom": None},
    ]
    view = {
        "status": "completed",
        "lineage": {"forkedFrom": {"runId": named, "nodeId": "store"}},
        "attempts": attempts,
    }
    fork = RunTrack(planned, run_id="run_f", view=view, start_answers=["run_f"])
    witnesses = Witnesses(tmp_path)
    if body_at:
        witnesses.bodies["n1"] = Body(
            "n1", "action", "idempotent", "k", "run_f", "fetch", body_at, 1
        )
    shown = {"lineage": {"forks": [{"runId": f} for f in forks or ["run_f"]]}}
    return _Ctx(
        tracks=[source, fork],
        violations=[],
        witnesses=witnesses,
        surfaces=_Surfaces({"run_s": shown}, []),
    )


def _mend_ctx(upgrades: int, version: int) -> _Ctx:
    planned = PlannedRun(0, "mend", {"x": 3}, 0.0, "k", False, upgrade=True)
    output = {"version": version, "asked": version, "tip": 3, "value": 51}
    track = RunTrack(planned, run_id="run_m", view={"status": "completed", "output": output})
    track.upgraded = True
    history = [{"type": "run.upgraded"}] * upgrades + [{"type": "run.completed"}]
    return _Ctx(tracks=[track], violations=[], surfaces=_Surfaces({}, history))


def _kinds(ctx: _Ctx) -> list[str]:
    return sorted(v.kind for v in ctx.violations)


def test_a_clean_fork_and_upgrade_have_no_violation(tmp_path: Path) -> None:
    ctx = _fork_ctx(tmp_path, body_at=2)  # a body at a visit it did not carry is its own
    check(ctx)
    mend = _mend_ctx(upgrades=1, version=2)
    check(mend)
    assert ctx.violations == mend.violations == []


def test_each_broken_fork_promise_is_a_violation(tmp_path: Path) -> None:
    assert _kinds(_checked(_fork_ctx(tmp_path, named="run_x"))) == ["forkLineage"]
    assert _kinds(_checked(_fork_ctx(tmp_path, forks=["run_f", "run_g"]))) == ["forkTwice"]
    assert _kinds(_checked(_fork_ctx(tmp_path, body_at=1))) == ["carriedApplied"]


def test_an_upgrade_applied_twice_or_a_run_left_on_the_old_code_is_a_violation() -> None:
    assert _kinds(_checked(_mend_ctx(upgrades=2, version=2))) == ["upgradeCount"]
    assert _kinds(_checked(_mend_ctx(upgrades=1, version=1))) == ["upgradeOutput"]


def _checked(ctx: _Ctx) -> _Ctx:
    check(ctx)
    return ctx


def _chain_fork_ctx(tmp_path: Path, *, edits: bool, marked: list[tuple[str, int]]) -> _Ctx:
    """A fork of a `chain` run from `flaky`, its carried `step` visits 1-2, the ones in
    ``marked`` recorded as set by a person; ``edits``: the operator sent `--set step=...`."""
    chain = {"x": 5, "n": 2, "hold": 0.1}
    source = RunTrack(PlannedRun(0, "chain", chain, 0.0, "k0", False), run_id="run_s")
    planned = PlannedRun(1, "chain", chain, 0.0, "k1", False, fork=PlannedFork(0, "flaky", None))
    attempts = [
        {"nodeId": node, "visit": visit, "carriedFrom": f"att_{node}{visit}",
         "outputSetBy": "person" if (node, visit) in marked else None}
        for node, visit in (("init", 1), ("step", 1), ("step", 2))
    ] + [{"nodeId": "flaky", "visit": 1, "carriedFrom": None}]  # fmt: skip
    view = {
        "status": "completed",
        "lineage": {"forkedFrom": {"runId": "run_s", "nodeId": "flaky"}},
        "attempts": attempts,
    }
    fork = RunTrack(planned, run_id="run_f", view=view, start_answers=["run_f"])
    fork.fork_edits = {"step": {"acc": 1, "i": 2, "more": False}} if edits else None
    shown = {"lineage": {"forks": [{"runId": "run_f"}]}}
    return _Ctx(
        tracks=[source, fork],
        violations=[],
        witnesses=Witnesses(tmp_path),
        surfaces=_Surfaces({"run_s": shown}, []),
    )


def test_a_fork_with_set_outputs_records_exactly_the_latest_visit_as_a_persons(
    tmp_path: Path,
) -> None:
    """`run fork --set step=...` must mark the latest carried `step` visit, and only it; a
    fork sent without `--set` marks none."""
    assert _checked(_chain_fork_ctx(tmp_path, edits=True, marked=[("step", 2)])).violations == []
    assert _checked(_chain_fork_ctx(tmp_path, edits=False, marked=[])).violations == []
    for edits, marked in ((True, []), (True, [("step", 1)]), (False, [("step", 2)])):
        found = _checked(_chain_fork_ctx(tmp_path, edits=edits, marked=marked))
        assert _kinds(found) == ["forkSetOutput"]
