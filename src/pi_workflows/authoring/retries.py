"""Retry policies: which failed attempts of a node run again, how many times, after how long.

A ``RetryPolicy`` is data only (``retry(...)`` checks its values when it is built); the runner
applies it when an attempt ends and the server keeps the delay as a durable timer, so a
retry waits with no runner and survives a server restart. Only ``compute``, ``action`` and
``shell`` nodes take one, and never an action or shell with a ``manual_effect`` (the
``Workflow`` refuses both at load). Never sleeps, never reads a clock, never calls the
policy's predicate (the runner does, on a worker thread with a deadline).

A policy selects the attempts it retries by outcome (``"failed"``, ``"timed_out"``), by the
class of the exception the node's code raised (a subclass matches: the exception's method
resolution order is compared by qualified class name), or by a predicate; ``never`` lists
classes that are never retried, whatever ``on`` says.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, TypeAlias

RETRYABLE_OUTCOMES: Final = frozenset({"failed", "timed_out"})
"""The outcomes a policy may retry (``cancelled`` never is)."""

ON_EXHAUSTED: Final = ("fail", "pause")
"""What happens when the tries run out: route the last failure, or park ``retriesExhausted``."""

MAX_ATTEMPTS: Final = 100
"""The most tries one round of a policy may have."""

MAX_DELAY_SECONDS: Final = 366 * 86_400.0
"""The longest delay between two tries (a year and a day)."""

MAX_ERROR_CLASSES: Final = 50
"""The most exception classes one ``on`` or ``never`` may list, and the most names of a
raised exception's class hierarchy that are recorded with its failure."""

RetryPredicate: TypeAlias = Callable[[BaseException], object]
"""``on=lambda error: ...``: called with the attempt's error, True to retry it."""

RetrySelector: TypeAlias = str | type[BaseException] | RetryPredicate


class AttemptFailed(Exception):  # noqa: N818 - names the fact, not a bug in the caller
    """What a retry predicate receives for an attempt that ended without an exception.

    A shell command's exit code, an output that is not JSON, or a deadline (``outcome``
    ``"timed_out"``) fail an attempt without anything raised; the predicate then gets this,
    with ``outcome`` (``"failed"`` or ``"timed_out"``) and the error line as its message.
    Never matched by class in ``on`` or ``never`` (those match what the node's code raised).
    It also stands for an exception that was raised in a runner that then died: the next
    runner adopts that try's recorded failure, and ``error_classes`` holds the qualified
    class names recorded with it (nearest first; empty when nothing was raised).
    """

    def __init__(self, outcome: str, message: str, error_classes: tuple[str, ...] = ()) -> None:
        self.outcome = outcome
        self.error_classes = error_classes
        super().__init__(message)


def class_name(cls: type[BaseException]) -> str:
    """The qualified name of an exception class: ``module.QualName`` (what history records)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def class_names(error: BaseException) -> tuple[str, ...]:
    """The qualified names of ``error``'s class and every class it inherits from, nearest
    first: ``on`` and ``never`` match when one of their names is among them."""
    names = (class_name(c) for c in type(error).__mro__ if issubclass(c, BaseException))
    return tuple(names)[:MAX_ERROR_CLASSES]


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How a node's failed attempts are tried again; build it with ``retry(...)``.

    ``attempts`` counts every try of a round, the first included. The delay before try
    ``n + 1`` is ``delay * backoff ** (n - 1)``, at most ``max_delay``, then spread by up to
    ``jitter`` (a fraction) either way. An attempt is retried when its outcome is in
    ``on``, or the exception its code raised is (a subclass of) a class of ``on_errors``, or
    ``predicate`` returns True for its error; and never when that exception is (a
    subclass of) a class of ``never``. Classes are kept by qualified name (``class_name``).
    """

    attempts: int
    delay: float
    backoff: float
    max_delay: float | None
    jitter: float
    on: frozenset[str]
    on_exhausted: str
    on_errors: frozenset[str] = frozenset()
    never: frozenset[str] = frozenset()
    predicate: RetryPredicate | None = None

    def retries(self, outcome: str) -> bool:
        """Whether an attempt that ended with ``outcome`` is retried whatever its error (the
        outcome is listed in ``on``)."""
        return outcome in self.on

    def never_retries(self, names: tuple[str, ...]) -> bool:
        """Whether an error whose class names (``class_names``) are ``names`` is excluded."""
        return not self.never.isdisjoint(names)

    def retries_class(self, names: tuple[str, ...]) -> bool:
        """Whether an error whose class names are ``names`` is selected by ``on``'s classes."""
        return not self.on_errors.isdisjoint(names)

    def delay_before(self, try_no: int, spread: float = 0.5) -> float:
        """Seconds to wait before try ``try_no + 1``; ``spread`` in [0, 1] picks where in the
        jitter band the delay falls (0.5: the middle; the runner passes a random number)."""
        base = self.delay * self.backoff ** max(0, try_no - 1)
        if self.max_delay is not None:
            base = min(base, self.max_delay)
        base = min(base, MAX_DELAY_SECONDS)
        spread = min(1.0, max(0.0, spread))
        return max(0.0, base * (1.0 + self.jitter * (2.0 * spread - 1.0)))


def _seconds(name: str, value: object, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= MAX_DELAY_SECONDS
    ):
        raise ValueError(
            f"retry {name} must be a number of seconds from 0 to {MAX_DELAY_SECONDS:.0f}"
            f" (use seconds(...) or minutes(...)), got {value!r}"
        )
    return float(value)


def retry(
    attempts: int = 3,
    delay: float = 1.0,
    backoff: float = 2.0,
    max_delay: float | None = 300.0,
    jitter: float = 0.1,
    on: RetrySelector | Iterable[RetrySelector] = ("failed", "timed_out"),
    on_exhausted: str = "fail",
    never: type[BaseException] | Iterable[type[BaseException]] = (),
) -> RetryPolicy:
    """A retry policy for a ``compute``, ``action`` or ``shell`` node.

    ``attempts`` tries in all (2-100 make sense; 1 means no retry), ``delay`` seconds before
    the second, multiplied by ``backoff`` for each later one and capped at ``max_delay``
    (``None``: no cap), spread by ``jitter`` (0-1, a fraction of the delay). ``on`` selects
    the attempts retried: outcomes (``"failed"`` retries every failure, ``"timed_out"``
    every timeout), exception classes (an attempt whose code raised one of them or a
    subclass), and at most one predicate (``lambda error: ...``, given the raised exception
    or an ``AttemptFailed`` for a failure or timeout nothing raised; it returns True to
    retry; False, any other value, raising or running longer than 10 s mean "do not
    retry"), in any mix:
    ``on=(RateLimited, "timed_out")``. ``never`` lists exception classes never retried, even
    when ``on`` selects them. ``on_exhausted="fail"`` routes the last
    failure through ``$result.outcome`` as without a policy; ``"pause"`` parks the run as
    ``retriesExhausted`` until a person resumes it, which starts a fresh round of tries.

    Example: ``action(call_api, effect=idempotent_effect("api"), retry=retry(attempts=5,
    delay=seconds(1), backoff=2.0, max_delay=minutes(5)))``.
    """
    if isinstance(attempts, bool) or not isinstance(attempts, int):
        raise ValueError(
            f"retry attempts must be an integer from 1 to {MAX_ATTEMPTS}, got {attempts!r}"
        )
    if not 1 <= attempts <= MAX_ATTEMPTS:
        raise ValueError(f"retry attempts must be from 1 to {MAX_ATTEMPTS}, got {attempts}")
    first = _seconds("delay", delay)
    assert first is not None
    cap = _seconds("max_delay", max_delay, allow_none=True)
    if (
        isinstance(backoff, bool)
        or not isinstance(backoff, int | float)
        or not math.isfinite(backoff)
        or not 1.0 <= backoff <= 100.0
    ):
        raise ValueError(f"retry backoff must be a number from 1 to 100, got {backoff!r}")
    if (
        isinstance(jitter, bool)
        or not isinstance(jitter, int | float)
        or not math.isfinite(jitter)
        or not 0.0 <= jitter <= 1.0
    ):
        raise ValueError(f"retry jitter must be a fraction from 0 to 1, got {jitter!r}")
    outcomes, classes, predicate = _selectors(on)
    excluded = _classes("never", never)
    if on_exhausted not in ON_EXHAUSTED:
        raise ValueError(f"retry on_exhausted must be 'fail' or 'pause', got {on_exhausted!r}")
    return RetryPolicy(
        attempts=attempts,
        delay=first,
        backoff=float(backoff),
        max_delay=cap,
        jitter=float(jitter),
        on=outcomes,
        on_exhausted=on_exhausted,
        on_errors=classes,
        never=excluded,
        predicate=predicate,
    )


_ON_HELP = (
    "retry on takes 'failed', 'timed_out', exception classes and at most one predicate"
    " (lambda error: ...)"
)


def _is_error_class(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def _selectors(
    on: object,
) -> tuple[frozenset[str], frozenset[str], RetryPredicate | None]:
    """``on`` split into outcomes, class names and the predicate; a bad item raises."""
    items: list[object]
    if isinstance(on, str) or _is_error_class(on) or (callable(on) and not _iterable(on)):
        items = [on]
    elif _iterable(on):
        items = list(on)  # type: ignore[call-overload]  # _iterable proved it
    else:
        raise ValueError(f"{_ON_HELP}, got {on!r}")
    outcomes: set[str] = set()
    classes: set[str] = set()
    predicates: list[RetryPredicate] = []
    for item in items:
        if isinstance(item, str):
            if item not in RETRYABLE_OUTCOMES:
                raise ValueError(f"{_ON_HELP}, got {item!r}")
            outcomes.add(item)
        elif _is_error_class(item):
            classes.add(class_name(item))  # type: ignore[arg-type]  # _is_error_class proved it
        elif callable(item):
            predicates.append(item)
        else:
            raise ValueError(f"{_ON_HELP}, got {item!r}")
    if not items:
        raise ValueError(f"{_ON_HELP}, got none")
    if len(predicates) > 1:
        raise ValueError("retry on takes at most one predicate; combine them in one function")
    if len(classes) > MAX_ERROR_CLASSES:
        raise ValueError(f"retry on lists more than {MAX_ERROR_CLASSES} exception classes")
    return frozenset(outcomes), frozenset(classes), predicates[0] if predicates else None


def _classes(what: str, value: object) -> frozenset[str]:
    items = [value] if _is_error_class(value) else value
    if not _iterable(items):
        raise ValueError(f"retry {what} takes exception classes, got {value!r}")
    names: set[str] = set()
    for item in items:  # type: ignore[attr-defined]  # _iterable proved it
        if not _is_error_class(item):
            raise ValueError(f"retry {what} takes exception classes, got {item!r}")
        names.add(class_name(item))
    if len(names) > MAX_ERROR_CLASSES:
        raise ValueError(f"retry {what} lists more than {MAX_ERROR_CLASSES} exception classes")
    return frozenset(names)


def _iterable(value: object) -> bool:
    return isinstance(value, list | tuple | set | frozenset)
