"""A seed's plan is a pure function of the seed, and the fault mix is what the docs say."""

from __future__ import annotations

from campaign.plan import FAULT_WEIGHTS, Fault, make_plan


def test_the_same_seed_makes_the_same_plan_and_another_seed_another() -> None:
    """Reproducibility starts here: every decision of a seed is drawn before it runs."""
    assert make_plan(7, 2.0) == make_plan(7, 2.0)
    assert make_plan(7, 2.0) != make_plan(8, 2.0)


def test_every_fault_kind_has_a_weight_and_the_weights_are_percentages() -> None:
    """The weights of docs/reliability.md: one per kind, summing to 100."""
    assert set(FAULT_WEIGHTS) == set(Fault)
    assert sum(FAULT_WEIGHTS.values()) == 100
