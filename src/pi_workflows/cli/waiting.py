"""Follow a run by polling `run.get` until it settles; used by `run start --wait` and the demo.

Owns the poll loop: one `run.get` per interval (at most `POLL_INTERVAL` seconds apart, never a
busy loop), a callback whenever the run's status or current node changes, and a deadline. It
never changes a run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any, Final

from pi_workflows.cli.errors import WaitTimeoutError
from pi_workflows.client import Client, JsonObject
from pi_workflows.client.payloads import SETTLED_STATUSES, TERMINAL_STATUSES, reached

__all__ = [
    "FAILED_STATUSES",
    "POLL_INTERVAL",
    "SETTLED_STATUSES",
    "TERMINAL_STATUSES",
    "follow_run",
]

POLL_INTERVAL: Final = 0.1
"""Seconds between two `run.get` calls while following a run."""


FAILED_STATUSES: Final = frozenset({"failed", "timed_out", "cancelled", "paused", "ambiguous"})
"""Settled statuses that `run start --wait` reports with exit code 1."""


def follow_run(
    client: Client,
    run_id: str,
    *,
    until: Collection[str] = SETTLED_STATUSES,
    timeout: float | None = None,
    on_change: Callable[[JsonObject], Any] | None = None,
    interval: float = POLL_INTERVAL,
) -> JsonObject:
    """Poll the run until its status is in `until`, and return that `RunView`.

    `on_change` is called with each view whose `(status, currentNode)` differs from the last.

    Raises:
        WaitTimeoutError: `timeout` seconds passed first.
        ClientError: as `Client.get_run`.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    last: tuple[Any, Any] | None = None
    while True:
        view = client.get_run(run_id)
        key = (view.get("status"), view.get("currentNode"))
        if key != last:
            last = key
            if on_change is not None:
                on_change(view)
        if reached(view, until):  # a run that sleeps or joins children goes on by itself
            return view
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            assert timeout is not None
            raise WaitTimeoutError(run_id, str(view.get("status")), timeout)
        pause = interval if deadline is None else min(interval, deadline - now)
        time.sleep(max(0.0, pause))
