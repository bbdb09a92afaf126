"""A seed's plan is a pure function of the seed, and the fault mix is what the docs say."""

from __future__ import annotations

import pytest
from campaign.plan import (
    COMPOSITION_WEIGHTS,
    FAULT_WEIGHTS,
    FORK_NODES,
    WORKFLOW_WEIGHTS,
    Fault,
    Mode,
    make_plan,
)
from campaign.workflows import WORKFLOW_NAMES

from campaign import plan as plan_module


def test_the_same_seed_makes_the_same_plan_and_another_seed_another() -> None:
    """Reproducibility starts here: every decision of a seed is drawn before it runs."""
    assert make_plan(7, 2.0) == make_plan(7, 2.0)
    assert make_plan(7, 2.0) != make_plan(8, 2.0)


def test_every_fault_kind_has_a_weight_and_the_weights_are_percentages() -> None:
    """The weights of docs/reliability.md: one per kind, summing to 100."""
    assert set(FAULT_WEIGHTS) == set(Fault)
    assert sum(FAULT_WEIGHTS.values()) == 100


def test_every_workflow_can_be_drawn_and_notice_runs_always_have_a_session() -> None:
    """A notify followed by slow effects is only interesting with a session to report it."""
    later = ["mend", "lapse", "relay", "hark", "botch"]  # drawn from streams of their own
    assert [*WORKFLOW_WEIGHTS, *COMPOSITION_WEIGHTS, *later] == list(WORKFLOW_NAMES)
    runs = [run for seed in range(1, 60) for run in make_plan(seed, 2.0).runs]
    assert {run.workflow for run in runs} == set(WORKFLOW_NAMES)
    assert {run.mode for run in runs} == set(Mode)
    for run in runs:
        assert (run.session is not None) == (run.mode is Mode.SESSION)
        if run.workflow == "notice":
            assert run.mode is Mode.SESSION
        if run.mode is Mode.DETACHED:
            assert run.workflow.startswith("review")


def test_the_crossing_scenario_is_the_review_crossing_and_nothing_else() -> None:
    """Notify, then a slow manual effect, in runs with an origin session; no fault."""
    plan = make_plan(3, 2.0, "crossing")
    assert plan.faults == []
    assert {run.workflow for run in plan.runs} == {"notice"}
    assert all(run.session == plan.sessions[0] for run in plan.runs)
    assert all(run.input["hold"][0] >= 1.5 for run in plan.runs)


def test_forks_and_upgrades_are_drawn_last_and_leave_the_rest_of_a_plan_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lineage runs come from a stream of their own (`lineage`), after every other draw:
    without them each seed's plan is exactly the plan it was before they existed; with them
    a fork names an earlier planned run of its workflow, at a node that workflow has, and a
    `mend` run is upgraded."""
    monkeypatch.setattr(plan_module, "_telegram", lambda seed, first: (None, []))
    for later in ("_lapse", "_messaging", "_retrying"):
        monkeypatch.setattr(plan_module, later, lambda seed, first: [])
    with_lineage = {seed: make_plan(seed, 2.0) for seed in range(1, 60)}
    monkeypatch.setattr(plan_module, "_lineage", lambda seed, first: [])
    for seed, full in with_lineage.items():
        before = make_plan(seed, 2.0)
        count = len(full.runs) - len(before.runs)
        assert full.runs[: len(before.runs)] == before.runs
        assert (full.faults, full.schedule, full.sessions) == (
            before.faults, before.schedule, before.sessions,
        )  # fmt: skip
        for run in full.runs[len(before.runs) :]:
            assert count > 0
            if run.fork is not None:
                source = full.runs[run.fork.source]
                assert (source.workflow, source.input) == (run.workflow, run.input)
                assert run.fork.node == FORK_NODES[run.workflow]
            else:
                assert (run.workflow, run.upgrade) in ({("mend", True)} | {
                    (name, False) for name in FORK_NODES
                })  # fmt: skip
    lineage = [run for plan in with_lineage.values() for run in plan.runs[-3:]]
    assert {run.fork.node for run in lineage if run.fork} == set(FORK_NODES.values())
    assert any(run.upgrade for run in lineage)


def test_lapse_runs_are_drawn_last_and_leave_the_rest_of_a_plan_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The `lapse` run (a run deadline that crosses its working node, a cleanup that may kill
    its own runner) comes from a stream of its own after every other draw: without it each
    seed's plan is exactly what it was; with it about half the seeds have one, and every
    kind of planned kill (none, before, after its effect) is drawn."""
    monkeypatch.setattr(plan_module, "_telegram", lambda seed, first: (None, []))
    for later in ("_messaging", "_retrying"):
        monkeypatch.setattr(plan_module, later, lambda seed, first: [])
    full = {seed: make_plan(seed, 2.0) for seed in range(1, 60)}
    monkeypatch.setattr(plan_module, "_lapse", lambda seed, first: [])
    kills = set()
    for seed, plan in full.items():
        before = make_plan(seed, 2.0)
        assert plan.runs[: len(before.runs)] == before.runs
        assert (plan.faults, plan.schedule) == (before.faults, before.schedule)
        for run in plan.runs[len(before.runs) :]:
            assert run.workflow == "lapse"
            assert run.input["work"] > 2.0, "its work always outlasts the run deadline"
            kills.add(run.input["kill"])
    assert kills == {None, "before", "after"}
    assert 15 < sum(len(p.runs) > len(make_plan(s, 2.0).runs) for s, p in full.items()) < 45


def test_the_telegram_seat_is_drawn_last_and_leaves_the_rest_of_a_plan_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Telegram seat comes from a stream of its own (`telegram`) after every other draw:
    without it each seed's plan is exactly what it was; with it about a third of the seeds
    have one, with one or two more `deploy` runs and one to three channel-process kills
    (the messaging pair and the retry, drawn after it, are left out here)."""
    for later in ("_messaging", "_retrying"):
        monkeypatch.setattr(plan_module, later, lambda seed, first: [])
    full = {seed: make_plan(seed, 2.0) for seed in range(1, 60)}
    monkeypatch.setattr(plan_module, "_telegram", lambda seed, first: (None, []))
    for seed, plan in full.items():
        before = make_plan(seed, 2.0)
        assert plan.runs[: len(before.runs)] == before.runs
        assert (plan.faults, plan.schedule, plan.sessions) == (
            before.faults, before.schedule, before.sessions,
        )  # fmt: skip
        added = plan.runs[len(before.runs) :]
        assert bool(added) == (plan.telegram is not None)
        assert all(run.workflow in ("deploy", "deploy-t") for run in added)
        if plan.telegram is not None:
            assert 1 <= len(plan.telegram.kills) <= 3
            assert plan.telegram.token not in str(plan.describe())
    assert 10 < sum(plan.telegram is not None for plan in full.values()) < 35


def test_messaging_and_retries_are_drawn_last_and_leave_the_rest_of_a_plan_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pair that messages (a `hark` run, then the `relay` run that signals it) and the
    `botch` run with its retry come from streams of their own (`messaging`, `retrying`)
    after every other draw: without them each seed's plan is exactly what it was; with them
    about half the seeds have each, the sender names its receiver and starts after it, and
    the retry names its source and has the source's input."""
    full = {seed: make_plan(seed, 2.0) for seed in range(1, 60)}
    monkeypatch.setattr(plan_module, "_messaging", lambda seed, first: [])
    monkeypatch.setattr(plan_module, "_retrying", lambda seed, first: [])
    pairs = retries = 0
    for seed, plan in full.items():
        before = make_plan(seed, 2.0)
        assert plan.runs[: len(before.runs)] == before.runs
        assert (plan.faults, plan.schedule, plan.sessions) == (
            before.faults, before.schedule, before.sessions,
        )  # fmt: skip
        added = plan.runs[len(before.runs) :]
        assert [run.index for run in plan.runs] == list(range(len(plan.runs)))
        for run in added:
            if run.signal_to is not None:
                receiver = plan.runs[run.signal_to]
                assert (run.workflow, receiver.workflow) == ("relay", "hark")
                assert run.input["x"] == receiver.input["x"]
                assert run.start_at >= receiver.start_at
                pairs += 1
            if run.retry_of is not None:
                source = plan.runs[run.retry_of]
                assert (run.workflow, source.workflow, source.retry_of) == ("botch", "botch", None)
                assert run.input == source.input
                retries += 1
        assert {run.workflow for run in added} <= {"relay", "hark", "botch"}
    assert 15 < pairs < 45
    assert 15 < retries < 45
