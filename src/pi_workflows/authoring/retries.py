"""Retry policies: which failed attempts of a node run again, how many times, after how long.

A ``RetryPolicy`` is data only (``retry(...)`` checks its values when it is built); the runner
applies it when an attempt ends and the server keeps the delay as a durable timer, so a
retry waits with no runner and survives a server restart. Only ``compute``, ``action`` and
``shell`` nodes take one, and never an action or shell with a ``manual_effect`` (the
``Workflow`` refuses both at load). Never sleeps, never reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

RETRYABLE_OUTCOMES: Final = frozenset({"failed", "timed_out"})
"""The outcomes a policy may retry (``cancelled`` never is)."""

ON_EXHAUSTED: Final = ("fail", "pause")
"""What happens when the tries run out: route the last failure, or park ``retriesExhausted``."""

MAX_ATTEMPTS: Final = 100
"""The most tries one round of a policy may have."""

MAX_DELAY_SECONDS: Final = 366 * 86_400.0
"""The longest delay between two tries (a year and a day)."""


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How a node's failed attempts are tried again; build it with ``retry(...)``.

    ``attempts`` counts every try of a round, the first included. The delay before try
    ``n + 1`` is ``delay * backoff ** (n - 1)``, at most ``max_delay``, then spread by up to
    ``jitter`` (a fraction) either way. Only attempts whose outcome is in ``on`` are retried.
    """

    attempts: int
    delay: float
    backoff: float
    max_delay: float | None
    jitter: float
    on: frozenset[str]
    on_exhausted: str

    def retries(self, outcome: str) -> bool:
        """Whether an attempt that ended with ``outcome`` is retried by this policy."""
        return outcome in self.on

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
    on: Iterable[str] = ("failed", "timed_out"),
    on_exhausted: str = "fail",
) -> RetryPolicy:
    """A retry policy for a ``compute``, ``action`` or ``shell`` node.

    ``attempts`` tries in all (2-100 make sense; 1 means no retry), ``delay`` seconds before
    the second, multiplied by ``backoff`` for each later one and capped at ``max_delay``
    (``None``: no cap), spread by ``jitter`` (0-1, a fraction of the delay). ``on`` lists the
    outcomes retried (``"failed"``, ``"timed_out"``). ``on_exhausted="fail"`` routes the last
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
    if isinstance(on, str):
        on = (on,)
    outcomes = frozenset(on)
    unknown = sorted(str(o) for o in outcomes - RETRYABLE_OUTCOMES)
    if unknown or not outcomes:
        raise ValueError(
            "retry on must list one or both of 'failed' and 'timed_out'"
            + (f", got {', '.join(map(repr, unknown))}" if unknown else ", got none")
        )
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
    )
