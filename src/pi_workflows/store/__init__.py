"""The state store: the only code that reads or writes the SQLite state database.

Modules, each owning one concern (see ``docs/state.md``):
``database`` (open, identity, pragmas, transactions), ``claims`` (tokens, the claim check),
``runs`` (the fenced run write: revision, event, projection), ``lifecycle`` (every run
transition), ``attempts``, ``interactions``, ``effects``, ``receipts``, ``diagnose``,
``attempt_logs`` (what each attempt printed, logged and ran), ``history`` and
``watch_views`` (read models for people and live renderers), ``retention`` (removing
ended runs).
Runs in the server process only; runner children and clients never import it.
"""

from pi_workflows.store.claims import Claim, ClaimToken, OwnerType
from pi_workflows.store.clock import Clock, FakeClock, SystemClock
from pi_workflows.store.database import Database, open_database
from pi_workflows.store.errors import (
    ClaimLostError,
    ClaimLostReason,
    InvalidTransitionError,
    LeaseHeldError,
    ReceiptConflictError,
    RevisionConflictError,
    RunNotFoundError,
    StateIdentityError,
    StoreError,
)
from pi_workflows.store.states import ParkReason, QueueStatus, RunStatus

__all__ = [
    "Claim",
    "ClaimToken",
    "OwnerType",
    "Clock",
    "FakeClock",
    "SystemClock",
    "Database",
    "open_database",
    "StoreError",
    "ClaimLostError",
    "ClaimLostReason",
    "InvalidTransitionError",
    "LeaseHeldError",
    "ReceiptConflictError",
    "RevisionConflictError",
    "RunNotFoundError",
    "StateIdentityError",
    "ParkReason",
    "QueueStatus",
    "RunStatus",
]
