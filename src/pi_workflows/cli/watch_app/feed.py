"""Reading server-pushed views in a worker thread and handing them to the UI thread.

Runs in a Textual thread worker. `follow` opens a watch (`run.watch` or `runs.watch`) on a
connection of its own, waits for views in short slices so it notices cancellation, and
calls `deliver(view)` on the UI thread (``App.call_from_thread``) for each one. The server
keeps only the newest unsent view per watch, so a busy UI skips stale views instead of
queueing them. A lost connection is reported once through `failed` and the feed ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from textual.worker import get_current_worker

from pi_workflows.client import Client, ClientError, JsonObject, Watch

__all__ = ["follow"]

SLICE_SECONDS: Final = 0.25
"""How long one wait for a view lasts before the worker checks whether it was cancelled."""


def follow(
    make_client: Callable[[], Client],
    open_watch: Callable[[Client], Watch],
    deliver: Callable[[JsonObject], None],
    failed: Callable[[str], None],
    call_from_thread: Callable[..., object],
) -> None:
    """Deliver every pushed view until the worker is cancelled or the watch ends."""
    worker = get_current_worker()
    try:
        with make_client() as client, open_watch(client) as watch:
            while not worker.is_cancelled:
                view = watch.next_view(SLICE_SECONDS)
                if watch.gone:
                    call_from_thread(failed, "the run was removed")
                    return
                if view is not None and not worker.is_cancelled:
                    call_from_thread(deliver, view)
    except ClientError as exc:
        if not worker.is_cancelled:
            call_from_thread(failed, exc.message)
