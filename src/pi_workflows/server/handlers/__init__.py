"""Client operations, one module per concern around one registry (``registry.py``).

Runs in the server. Importing this package registers every operation: ``runs`` (server,
workflows, runs, values), ``interactions`` (checkpoint and decision answers, submissions),
``sessions`` (origin-session coordination), ``effects``, ``state``, ``history`` (event log
and attempt logs), ``watch`` (live run and run-list views), ``retention`` (``state.prune``),
``workflows`` (show and check one workflow), ``signals`` (events sent to runs),
``schedules`` (durable schedules), ``uploads`` (large inputs sent before ``run.start``),
``lineage`` (fork and upgrade), ``settings`` (a run's live settings), ``follow_ups``
(prompts sent after a run completes), ``published`` (values a run published), ``channels``
(what the channel process reads and records).
"""

from pi_workflows.server.handlers import (
    channels,
    effects,
    follow_ups,
    history,
    interactions,
    lineage,
    published,
    retention,
    runs,
    schedules,
    sessions,
    settings,
    signals,
    state,
    uploads,
    watch,
    workflows,
)
from pi_workflows.server.handlers.registry import dispatch, operation
from pi_workflows.server.peers import current_peer

__all__ = ["channels", "current_peer", "dispatch", "effects", "follow_ups", "interactions",
           "lineage", "operation", "published", "runs",
           "schedules", "sessions", "settings", "signals", "state",
           "history", "retention", "uploads", "watch", "workflows"]  # fmt: skip
