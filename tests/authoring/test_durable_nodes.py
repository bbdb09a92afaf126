"""Retry policies, sleep and wait_event as authors declare them: every bad declaration is
refused when the workflow loads, with a message that says why."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pi_workflows import (
    Workflow,
    WorkflowDefinitionError,
    action,
    agent,
    checkpoint,
    choice,
    compute,
    edge,
    human_decision,
    idempotent_effect,
    manual_effect,
    minutes,
    notify,
    retry,
    seconds,
    shell,
    sleep,
    wait_event,
)
from pi_workflows.authoring import EVENT_NAME_PATTERN_TEXT
from pi_workflows.engine import snapshot
from pi_workflows.protocol import SIGNAL_NAME_PATTERN


def _noop(ctx: object) -> dict[str, Any]:
    return {}


def test_a_policy_spaces_its_tries_by_backoff_within_its_cap_and_jitter() -> None:
    """The delay before try n+1 is delay * backoff**(n-1), capped, spread by the jitter."""
    policy = retry(attempts=6, delay=1.0, backoff=2.0, max_delay=5.0, jitter=0.0)
    assert [policy.delay_before(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    spread = retry(delay=10.0, jitter=0.5, max_delay=None)
    assert spread.delay_before(1, 0.0) == 5.0
    assert spread.delay_before(1, 1.0) == 15.0
    assert spread.delay_before(1, 0.5) == 10.0
    assert retry(delay=0).delay_before(3) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"attempts": 0}, "from 1 to 100"),
        ({"attempts": 101}, "from 1 to 100"),
        ({"attempts": 2.5}, "an integer"),
        ({"attempts": True}, "an integer"),
        ({"delay": -1}, "retry delay"),
        ({"delay": math.inf}, "retry delay"),
        ({"max_delay": -1}, "retry max_delay"),
        ({"backoff": 0.5}, "backoff must be a number from 1 to 100"),
        ({"jitter": 1.5}, "jitter must be a fraction"),
        ({"on": ("failed", "cancelled")}, "'cancelled'"),
        ({"on": ()}, "got none"),
        ({"on_exhausted": "retry"}, "'fail' or 'pause'"),
    ],
)
def test_a_bad_policy_is_refused_with_the_rule_it_breaks(
    kwargs: dict[str, Any], message: str
) -> None:
    """Each out-of-range or misspelt setting names itself and what it must be."""
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        retry(**kwargs)


def test_a_manual_effect_cannot_be_retried() -> None:
    """An action or shell node with a manual effect and a retry policy fails to load, and
    the message says a manual effect is never repeated automatically."""
    for node in (
        action(_noop, effect=manual_effect("mail"), retry=retry()),
        shell(["true"], effect=manual_effect("mail"), retry=retry()),
    ):
        with pytest.raises(WorkflowDefinitionError, match="never repeated automatically") as err:
            Workflow("w", "a", {"a": node}, [])
        assert "'a'" in str(err.value)


def test_idempotent_actions_shells_and_computes_take_a_policy() -> None:
    """The three kinds that may retry load with one, and the snapshot records it."""
    policy = retry(attempts=4, delay=seconds(2), on=("failed",), on_exhausted="pause")
    flow = Workflow(
        "w",
        "a",
        {
            "a": compute(_noop, retry=policy),
            "b": action(_noop, effect=idempotent_effect("x"), retry=policy),
            "c": shell(["true"], effect=idempotent_effect("y"), retry=policy),
        },
        [edge("a", "b"), edge("b", "c")],
    )
    spec = snapshot(flow)["nodes"]
    assert isinstance(spec, dict)
    assert spec["a"]["retry"] == {
        "attempts": 4,
        "delayMs": 2000,
        "backoff": 2.0,
        "maxDelayMs": 300_000,
        "jitter": 0.1,
        "on": ["failed"],
        "onExhausted": "pause",
    }


@pytest.mark.parametrize(
    "make",
    [
        lambda: agent("p", "x", retry=retry()),
        lambda: checkpoint("q?", retry=retry()),
        lambda: human_decision("t", [choice("a")], retry=retry()),
        lambda: notify("hi", retry=retry()),
    ],
    ids=["agent", "checkpoint", "human_decision", "notify"],
)
def test_interactive_and_notify_nodes_cannot_declare_retry(make: Any) -> None:
    """A model step, an answer, a person's decision or a message is never retried: the
    workflow refuses the node's ``retry`` at load, naming the node and what to use instead
    (the constructor keeps the problem, so the file's other problems are reported too)."""
    node = make()
    with pytest.raises(WorkflowDefinitionError, match=r"node 'a': .* cannot declare retry"):
        Workflow("w", "a", {"a": node}, [])


def test_sleep_takes_exactly_one_of_a_duration_and_until() -> None:
    """Neither, both, a negative or endless duration, or a non-callable until: refused at
    load, naming the sleep node."""
    for node, message in (
        (sleep(), "exactly one"),
        (sleep(seconds(1), until=_noop), "exactly one"),
        (sleep(-1), "sleep duration"),
        (sleep(math.nan), "sleep duration"),
        (sleep(until="tomorrow"), "callback"),  # type: ignore[arg-type]
    ):
        with pytest.raises(WorkflowDefinitionError, match=rf"node 'a': .*{message}"):
            Workflow("w", "a", {"a": node}, [])
    assert sleep(minutes(10)).duration == 600.0
    assert sleep(0).duration == 0.0


def test_wait_event_names_follow_the_signal_rule() -> None:
    """Names the server would refuse are refused at load; the two patterns are the same."""
    for bad in ("", "9lives", "has space", "x" * 129, "a/b"):
        with pytest.raises(WorkflowDefinitionError, match="node 'a': event name"):
            Workflow("w", "a", {"a": wait_event(bad)}, [])
    assert wait_event("ci.done:main-1").name == "ci.done:main-1"
    assert EVENT_NAME_PATTERN_TEXT == SIGNAL_NAME_PATTERN
    with pytest.raises(WorkflowDefinitionError, match="timeout"):
        Workflow("w", "a", {"a": wait_event("go", timeout=-1)}, [])
    with pytest.raises(WorkflowDefinitionError, match="validate"):
        Workflow("w", "a", {"a": wait_event("go", validate="no")}, [])  # type: ignore[arg-type]


def test_every_deadline_is_bounded_by_a_year_and_a_day() -> None:
    """A timeout past 366 days (an event wait's, a node's, a decision's) fails to load: no
    stored time can overflow a calendar or a 64-bit column."""
    for node in (
        wait_event("go", timeout=1e12),
        compute(_noop, timeout=1e16),
        human_decision("t", [choice("a")], on_timeout=(1e12, "a")),
    ):
        with pytest.raises(WorkflowDefinitionError, match="up to 31622400"):
            Workflow("w", "a", {"a": node}, [])
    Workflow("w", "a", {"a": wait_event("go", timeout=minutes(60))}, [])
