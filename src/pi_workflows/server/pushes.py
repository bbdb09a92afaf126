"""What a failed push becomes: the ``*.unavailable`` event that ends one watch.

Runs in the server. A watch's view is computed, encoded and size-checked on its own
(``session_views``, ``run_views``); when that fails, the watch ends with one
``session.unavailable``, ``run.unavailable`` or ``runs.unavailable`` event that says why in
one line and what the client should do, and every other watch goes on. ``checked_frame``
is the size check; ``unavailable`` builds the event; ``unavailable_for_key`` is the
connection sender's last resort for an event it cannot encode. Never raises out of these
helpers except ``checked_frame``'s ``ViewTooLargeError``.
"""

from __future__ import annotations

from typing import Any, Final

from pi_workflows.protocol import Event, FrameTooLarge, encode_frame, safe_message

RETRY_AFTER_MS: Final = 1000
"""How long a client should wait before watching again after an ``*.unavailable`` event."""

VIEW_FAILED: Final = "viewFailed"
"""The view could not be computed (a damaged row, a database error, a bug)."""

VIEW_TOO_LARGE: Final = "viewTooLarge"
"""The view's bounded form still would not fit one frame."""


class ViewTooLargeError(Exception):
    """A view's event, bounded as it is, would exceed one frame (``VIEW_TOO_LARGE``)."""


def checked_frame(event: Event) -> None:
    """Raise ``ViewTooLargeError`` when ``event`` does not fit one frame."""
    try:
        encode_frame(event)
    except FrameTooLarge:
        raise ViewTooLargeError(f"the {event.name} event would exceed one frame") from None


def code_of(exc: BaseException) -> str:
    """``viewTooLarge`` for an oversized view, else ``viewFailed``."""
    return VIEW_TOO_LARGE if isinstance(exc, ViewTooLargeError) else VIEW_FAILED


def unavailable(
    watch: str, ident: dict[str, Any], code: str, what: str, *, operation: str
) -> Event:
    """The event that ends one watch: ``<watch>.unavailable`` with ``ident`` (``sessionId``
    or ``runId``), ``code``, a one-line ``message`` saying what happened and what to do, and
    ``retryAfterMs``."""
    cause = (
        "it would not fit one frame even in its bounded form"
        if code == VIEW_TOO_LARGE
        else "it could not be computed"
    )
    message = safe_message(
        f"the server stopped pushing {what}: {cause}; watch again ({operation}) after"
        f" {RETRY_AFTER_MS} ms, and if it keeps failing see the server log"
    )
    return Event(
        name=f"{watch}.unavailable",
        run_id=ident.get("runId"),
        payload={**ident, "code": code, "message": message, "retryAfterMs": RETRY_AFTER_MS},
    )


def unavailable_for_key(key: str) -> Event | None:
    """The ``*.unavailable`` event for a connection's push key (``session:<id>``,
    ``run:<id>``, ``runs``), or None for a key of no known watch."""
    kind, _, ident = key.partition(":")
    if kind == "session" and ident:
        return unavailable(
            "session",
            {"sessionId": ident},
            VIEW_FAILED,
            f"the view of session {ident}",
            operation="session.watch",
        )
    if kind == "run" and ident:
        return unavailable(
            "run", {"runId": ident}, VIEW_FAILED, f"the view of run {ident}", operation="run.watch"
        )
    if kind == "runs":
        return unavailable("runs", {}, VIEW_FAILED, "the run list", operation="runs.watch")
    return None
