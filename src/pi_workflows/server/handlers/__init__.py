"""Client operations, one module per concern around one registry (``registry.py``).

Runs in the server. Importing this package registers every operation: ``runs`` (server,
workflows, runs, values), ``interactions`` (checkpoint and decision answers, submissions),
``sessions`` (origin-session coordination), ``effects``, ``state``.
"""

from pi_workflows.server.handlers import effects, interactions, runs, sessions, state
from pi_workflows.server.handlers.registry import current_peer, dispatch, operation

__all__ = ["current_peer", "dispatch", "effects", "interactions", "operation", "runs",
           "sessions", "state"]  # fmt: skip
