"""What a retry policy selects: outcomes, exception classes (by qualified name, so a subclass
matches), one predicate, and ``never``; and how a bad selector is refused at load."""

from __future__ import annotations

from typing import Any

import pytest

from pi_workflows import AttemptFailed, Workflow, compute, retry
from pi_workflows.authoring import class_name, class_names
from pi_workflows.engine import snapshot


class RateLimited(Exception):  # noqa: N818 - named as an API would name it
    pass


class SlowDown(RateLimited):
    pass


class BadRequest(Exception):  # noqa: N818
    pass


def _noop(ctx: object) -> dict[str, Any]:
    return {}


def test_classes_are_kept_by_qualified_name_and_a_subclass_carries_its_parents() -> None:
    """``class_names`` lists the error's class first, then every class it inherits from."""
    names = class_names(SlowDown("wait"))
    assert names[0] == f"{__name__}.SlowDown"
    assert class_name(RateLimited) in names
    assert "builtins.Exception" in names
    assert class_name(BadRequest) not in names


def test_on_mixes_outcomes_classes_and_one_predicate() -> None:
    """``on=(RateLimited, "timed_out")`` selects the class and the outcome, not ``failed``."""
    policy = retry(on=(RateLimited, "timed_out"))
    assert policy.on == frozenset({"timed_out"})
    assert policy.on_errors == frozenset({class_name(RateLimited)})
    assert policy.retries("timed_out")
    assert not policy.retries("failed")
    assert policy.retries_class(class_names(SlowDown()))
    assert not policy.retries_class(class_names(BadRequest()))

    def check(error: BaseException) -> bool:
        return isinstance(error, BadRequest)

    assert retry(on=check).predicate is check
    assert retry(on=[check, "failed"]).on == frozenset({"failed"})
    assert retry(on=RateLimited).on_errors == frozenset({class_name(RateLimited)})


def test_never_takes_classes_and_matches_subclasses() -> None:
    """``never`` holds class names; a subclass of a listed class is excluded too."""
    policy = retry(on=("failed",), never=(RateLimited,))
    assert policy.never_retries(class_names(SlowDown()))
    assert not policy.never_retries(class_names(BadRequest()))
    assert retry(never=BadRequest).never == frozenset({class_name(BadRequest)})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on": (RateLimited, "cancelled")}, "got 'cancelled'"),
        ({"on": (RateLimited, 3)}, "got 3"),
        ({"on": (_noop, _noop)}, "at most one predicate"),
        ({"on": []}, "got none"),
        ({"on": 7}, "got 7"),
        ({"never": ("failed",)}, "never takes exception classes, got 'failed'"),
        ({"never": (_noop,)}, "never takes exception classes"),
        ({"never": "RateLimited"}, "never takes exception classes"),
    ],
)
def test_a_bad_selector_is_refused_with_one_line(kwargs: dict[str, Any], message: str) -> None:
    """A selector that is not an outcome, an exception class or one predicate is refused
    when the policy is built (so at load), in one line naming what ``on``/``never`` take."""
    with pytest.raises(ValueError, match=message) as err:
        retry(**kwargs)
    assert "\n" not in str(err.value)


def test_the_snapshot_records_classes_predicate_and_never_only_when_used() -> None:
    """A policy by outcome alone snapshots as before; classes, a predicate and never add
    their own keys."""
    plain = snapshot(Workflow("w", "a", {"a": compute(_noop, retry=retry())}, []))["nodes"]
    assert isinstance(plain, dict)
    assert set(plain["a"]["retry"]) == {
        "attempts", "delayMs", "backoff", "maxDelayMs", "jitter", "on", "onExhausted",
    }  # fmt: skip
    policy = retry(on=(RateLimited, lambda e: False), never=(BadRequest,))
    spec = snapshot(Workflow("w", "a", {"a": compute(_noop, retry=policy)}, []))["nodes"]
    assert isinstance(spec, dict)
    shown = spec["a"]["retry"]
    assert shown["on"] == []
    assert shown["onErrors"] == [class_name(RateLimited)]
    assert shown["predicate"] is True
    assert shown["never"] == [class_name(BadRequest)]


def test_attempt_failed_carries_the_outcome_and_the_error_line() -> None:
    """What a predicate gets for a failure nothing raised."""
    error = AttemptFailed("timed_out", "node 'a' produced no result within 5 seconds")
    assert error.outcome == "timed_out"
    assert str(error) == "node 'a' produced no result within 5 seconds"
