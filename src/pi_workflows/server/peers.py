"""The connection a request came on, as operations and view pushers see it.

Runs in the server. ``Peer`` is what ``connections.ConnectionPeer`` offers (push an event,
learn when the connection closes); ``current_peer`` holds it while the connection's task
serves a request. Neither the handlers nor the view pushers import the connection module.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Protocol

from pi_workflows.protocol import Event


class Peer(Protocol):
    """The connection a request came on, for operations that push events to it."""

    def push(self, key: str, event: Event) -> None:
        """Queue ``event`` as the latest one for ``key`` (an older unsent one is dropped)."""
        ...

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once when the connection closes."""
        ...


current_peer: contextvars.ContextVar[Peer | None] = contextvars.ContextVar(
    "current_peer", default=None
)
"""Set by the connection task to its ``Peer`` while it serves requests."""
