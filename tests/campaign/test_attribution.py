"""The oracle's attribution rules, on hand-made facts: what a fault explains, and what
nothing does (docs/reliability.md, "The oracle")."""

from __future__ import annotations

from campaign.attribution import Cause, attribute
from campaign.ledger import Ledger, LostEffect, Park, RunnerExit

T = 1_800_000_000_000  # a wall-clock millisecond


def _runner(outcome: str, *, pid: int = 100, epoch: int = 1, run: str = "run_a") -> RunnerExit:
    return RunnerExit(run, 7, 2, epoch, pid, outcome, 70, None, T, T + 3000)


def _lost(kind: str = "manual", node: str = "charge", run: str = "run_a") -> LostEffect:
    return LostEffect(run, "key-1", kind, node, 1, T + 500, T + 2500)


def _unexplained(ledger: Ledger, causes: list[Cause]) -> list[str]:
    workflows = {"run_a": "payment", "run_t": "payment-t"}
    found = attribute(ledger, causes, workflows)
    return [why for why, _ in found.unexplained]


def test_a_refused_runner_is_never_explained() -> None:
    """The broken revision rule shows up as a refused runner: no fault is its cause."""
    every = [
        Cause(kind, T + 1000, T + 2000, run_id="run_a", pids=frozenset({100}), epoch=1)
        for kind in ("killRunner", "killServer", "stopServer", "gracefulStop", "pauseRun")
    ]
    [why] = _unexplained(Ledger(runners=[_runner("refused")]), every)
    assert "ended refused" in why


def test_a_crashed_runner_needs_a_kill_of_that_runner_while_it_lived() -> None:
    """A kill of its pid explains a crash; a kill of another runner, or a later one, does not."""
    ledger = Ledger(runners=[_runner("crashed")])
    hit = Cause("killRunner", T + 1000, T + 1000, run_id="run_a", pids=frozenset({100}))
    assert _unexplained(ledger, [hit]) == []
    other = Cause("killRunner", T + 1000, T + 1000, run_id="run_b", pids=frozenset({200}))
    later = Cause("killRunner", T + 9000, T + 9000, run_id="run_a", pids=frozenset({100}))
    assert len(_unexplained(ledger, [other, later])) == 1


def test_an_orphan_needs_its_own_server_killed() -> None:
    """An orphaned runner belongs to a server epoch that a server kill ended."""
    ledger = Ledger(runners=[_runner("orphaned", epoch=3)])
    assert _unexplained(ledger, [Cause("killServer", T, T, epoch=3)]) == []
    assert len(_unexplained(ledger, [Cause("killServer", T, T, epoch=2)])) == 1


def test_a_lost_effect_under_a_draining_stop_needs_the_stop_to_be_forced() -> None:
    """A graceful stop and a pause drain, so they explain a lost effect only when the stop
    is forced (SIGINT, or a second stop during the drain)."""
    ledger = Ledger(lost=[_lost()])
    stop = Cause("gracefulStop", T + 1000, T + 4000, epoch=1)
    assert len(_unexplained(ledger, [stop])) == 1
    pause = Cause("pauseRun", T + 1000, T + 4000, run_id="run_a")
    assert len(_unexplained(ledger, [pause])) == 1
    forced = Cause("gracefulStop", T + 1000, T + 4000, epoch=1, forced=True)
    assert _unexplained(ledger, [forced]) == []


def test_a_node_deadline_explains_a_lost_effect_only_on_a_node_that_has_one() -> None:
    """`payment-t` has a 2 s deadline on `charge`; `payment` has none."""
    assert _unexplained(Ledger(lost=[_lost(run="run_t")]), []) == []
    assert len(_unexplained(Ledger(lost=[_lost(run="run_a")]), [])) == 1


def test_a_crash_park_is_explained_by_the_runner_that_caused_it() -> None:
    """`runnerNoProgress` is as explained as the exit of the runner before it."""
    park = Park("run_a", T + 3100, "runnerNoProgress", "runner exited with code 0")
    kill = Cause("killRunner", T + 1000, T + 1000, run_id="run_a", pids=frozenset({100}))
    crashed = Ledger(runners=[_runner("crashed")], parks=[park])
    assert _unexplained(crashed, [kill]) == []
    exited = Ledger(runners=[_runner("exited")], parks=[park])
    assert len(_unexplained(exited, [kill])) == 1


def test_parks_nothing_in_the_campaign_causes_are_violations() -> None:
    """A refused proposal, a changed source or an aborted turn: never injected here."""
    parks = [
        Park("run_a", T, reason, "")
        for reason in ("proposalRefused", "workflowSourceChanged", "turnAborted")
    ]
    everything = [Cause("pauseRun", T - 500, T, run_id="run_a")]
    assert len(_unexplained(Ledger(parks=parks), everything)) == 3


def test_a_claim_lost_needs_a_freeze_of_the_runner_or_the_server() -> None:
    """A claim the runner's own last commit released is not lost (the server's renewal
    leaves it alone), so a ``claimLost`` runner is explained only by a freeze of it or of
    the server while it lived."""
    runner = RunnerExit("run_a", 7, 2, 1, 100, "claimLost", 143, None, T, T + 3000)
    assert len(_unexplained(Ledger(runners=[runner]), [])) == 1
    frozen = Cause("stopRunner", T + 1000, T + 5000, run_id="run_a", pids=frozenset({100}))
    assert _unexplained(Ledger(runners=[runner]), [frozen]) == []


def test_a_retries_exhausted_park_is_explained_only_where_the_plan_exhausts_a_round() -> None:
    """A ``timer`` run planned to fail more often than a round of tries allows parks
    ``retriesExhausted`` by design; the same park of any other run has no cause."""
    park = Park("run_a", T, "retriesExhausted", "node 'call' failed 3 time(s)")
    found = attribute(Ledger(parks=[park]), [], {"run_a": "timer"}, frozenset({"run_a"}))
    assert found.unexplained == []
    assert found.explained["park retriesExhausted <- plannedFailures"] == 1
    assert len(_unexplained(Ledger(parks=[park]), [])) == 1


def test_a_cancelled_runner_is_explained_by_a_pause_that_lasted_over_its_life() -> None:
    """Found by seed 62: a pause drained while a node deadline stopped the runner; the
    run's next runner, launched during the drain, was stopped by the pause when it parked
    the run. The pause began before that runner existed, but its span covers it; a pause
    of another run, or one that ended before the runner began, does not explain it."""
    ledger = Ledger(runners=[_runner("cancelled")])  # lives T .. T + 3000
    pause = Cause("pauseRun", T - 1900, T + 60, run_id="run_a")
    assert _unexplained(ledger, [pause]) == []
    other = Cause("pauseRun", T - 1900, T + 60, run_id="run_b")
    over = Cause("pauseRun", T - 9000, T - 5000, run_id="run_a")
    assert len(_unexplained(ledger, [other, over])) == 1
