"""The oracle's composition checks, on hand-made facts: a child live below an ended parent,
a parent that joined twice (or completed without joining), an item that ran as two child
runs, and an item of a completed join that never ran are violations; the facts of a clean
tree are not. The plan draws the composition workflows without changing anything else of a
seed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from campaign.context import RunTrack, Violation
from campaign.ledger import AttemptRow, Ledger, RunRow
from campaign.oracle import composition
from campaign.plan import (
    COMPOSITION_WEIGHTS,
    Mode,
    PlannedRun,
    _lapse,
    _lineage,
    _messaging,
    _retrying,
    _telegram,
    make_plan,
)


class _Ctx(SimpleNamespace):
    def violation(self, kind: str, message: str, run_id: str | None = None) -> Violation:
        found = Violation(1, kind, message, run_id)
        self.violations.append(found)
        return found


def _tree(tmp_path: Path, witnessed: dict[int, list[str]], status: str) -> _Ctx:
    planned = PlannedRun(0, "tree", {"x": 2, "n": 3, "hold": 0.1}, 0.0, "k", False, Mode.PLAIN)
    track = RunTrack(planned, run_id="run_p", view={"status": status})
    (tmp_path / "children").mkdir()
    for item, runs in witnessed.items():
        (tmp_path / "children" / f"run_p-{item}").write_text("".join(r + "\n" for r in runs))
    return _Ctx(tracks=[track], violations=[], witness_dir=tmp_path)


def _ledger(parent: str, children: dict[str, str], joins: int, visits: int = 1) -> Ledger:
    runs = {"run_p": RunRow("run_p", "tree", None, "run_p", parent)}
    for run_id, status in children.items():
        runs[run_id] = RunRow(run_id, "leafc", "run_p", "run_p", status)
    attempts = [
        AttemptRow("run_p", 0, "spread", visit, visit, 1, "completed", f"att_{visit}")
        for visit in range(1, visits + 1)
    ]
    return Ledger(runs=runs, joins={"run_p": joins} if joins else {}, attempts=attempts)


def _kinds(ctx: _Ctx) -> list[str]:
    return sorted(v.kind for v in ctx.violations)


def test_a_clean_tree_has_no_violation(tmp_path: Path) -> None:
    ctx = _tree(tmp_path, {0: ["run_a"], 1: ["run_b", "run_b"], 2: ["run_c"]}, "completed")
    ledger = _ledger("completed", {"run_a": "completed", "run_b": "completed",
                                   "run_c": "completed"}, joins=1)  # fmt: skip
    composition(ctx, ledger)
    assert ctx.violations == []


def test_each_broken_composition_promise_is_a_violation(tmp_path: Path) -> None:
    ctx = _tree(tmp_path, {0: ["run_a"], 1: ["run_b", "run_d"]}, "completed")
    ledger = _ledger("completed", {"run_a": "completed", "run_b": "completed",
                                   "run_d": "running"}, joins=2)  # fmt: skip
    composition(ctx, ledger)
    assert _kinds(ctx) == ["childLost", "childOutlivedParent", "childTwice", "joinCount"]


def test_a_completed_parent_that_never_joined_is_a_violation(tmp_path: Path) -> None:
    ctx = _tree(tmp_path, {0: ["run_a"], 1: ["run_b"], 2: ["run_c"]}, "completed")
    composition(ctx, _ledger("completed", {"run_a": "completed"}, joins=0))
    assert _kinds(ctx) == ["joinCount"]


def test_composition_runs_are_added_after_the_rest_of_the_plan() -> None:
    """Most seeds start a tree or a nest; every other run and fault of a seed is drawn as
    before (they come from streams of their own)."""
    plans = [make_plan(seed, 2.0) for seed in range(1, 40)]
    added = [run for plan in plans for run in plan.runs if run.workflow in COMPOSITION_WEIGHTS]
    assert {run.workflow for run in added} == set(COMPOSITION_WEIGHTS)
    for plan in plans:
        # Forks, upgrades, the lapse run, the Telegram seat's runs, the messaging pair and
        # the retry are drawn after them.
        lineage = len(_lineage(plan.seed, 0)) + len(_lapse(plan.seed, 0))
        lineage += len(_telegram(plan.seed, 0)[1])
        lineage += len(_messaging(plan.seed, 0)) + len(_retrying(plan.seed, 0))
        kinds = [run.workflow in COMPOSITION_WEIGHTS for run in plan.runs[: -lineage or None]]
        assert kinds == sorted(kinds), "composition runs come last"
        assert [run.index for run in plan.runs] == list(range(len(plan.runs)))


def test_a_window_holding_more_starts_than_the_rate_is_a_violation(tmp_path: Path) -> None:
    """A join at 2/s whose recorded starts put three inside one second is ``rateExceeded``;
    starts a second apart in pairs are clean."""
    children = {"run_a": "completed", "run_b": "completed", "run_c": "completed"}
    witnessed = {0: ["run_a"], 1: ["run_b"], 2: ["run_c"]}
    (tmp_path / "clean").mkdir()
    (tmp_path / "crowded").mkdir()
    clean = _tree(tmp_path / "clean", witnessed, "completed")
    ledger = _ledger("completed", children, joins=1)
    ledger.paced = {"wt_1": ("run_p", 2, 1_000, [0, 0, 1_000])}
    composition(clean, ledger)
    assert clean.violations == []
    crowded = _tree(tmp_path / "crowded", witnessed, "completed")
    ledger.paced = {"wt_1": ("run_p", 2, 1_000, [0, 0, 999])}
    composition(crowded, ledger)
    assert _kinds(crowded) == ["rateExceeded"]
