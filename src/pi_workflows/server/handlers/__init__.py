"""Client operations, one module per concern around one registry (``registry.py``).

Runs in the server. Importing this package registers every operation: ``runs`` (server,
workflows, runs, values), ``interactions`` (checkpoint and decision answers, submissions),
``sessions`` (origin-session coordination), ``effects``, ``state``, ``history`` (event log
and attempt logs), ``watch`` (live run and run-list views), ``retention`` (``state.prune``),
``workflows`` (show and check one workflow), ``signals`` (events sent to runs),
``schedules`` (durable schedules), ``uploads`` (large inputs sent before ``run.start``),
``lineage`` (fork and upgrade).
"""

from pi_workflows.server.handlers import (
    effects,
    history,
    interactions,
    lineage,
    retention,
    runs,
    schedules,
    sessions,
    signals,
    state,
    uploads,
    watch,
    workflows,
)
from pi_workflows.server.handlers.registry import dispatch, operation
from pi_workflows.server.peers import current_peer

__all__ = ["current_peer", "dispatch", "effects", "interactions", "lineage", "operation", "runs",
           "schedules", "sessions", "signals", "state",
           "history", "retention", "uploads", "watch", "workflows"]  # fmt: skip
