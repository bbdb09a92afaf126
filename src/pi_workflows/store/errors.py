"""Errors the store raises. Each carries structured fields and a safe one-line message.

No error message or repr ever contains a claim token or its hash.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path


class StoreError(Exception):
    """Base class of every error the store raises on purpose."""

    code = "storeError"


class ClaimLostReason(StrEnum):
    """Why a fenced write found that its caller no longer owns the run."""

    MISSING_AUTHORITY = "missingAuthority"
    EXPIRED = "expired"
    OWNER_CHANGED = "ownerChanged"
    TOKEN_CHANGED = "tokenChanged"  # noqa: S105 - a reason name, not a secret
    GENERATION_CHANGED = "generationChanged"


class ClaimLostError(StoreError):
    """Raised by a fenced write when the caller's claim is not the run's live claim.

    This is a normal hand-off, not a crash: the caller must stop working on the run and
    write nothing else for it (no failed event, no terminal write). Nothing was changed.
    """

    code = "claimLost"

    def __init__(self, run_id: str, reason: ClaimLostReason, generation: int) -> None:
        self.run_id = run_id
        self.reason = reason
        self.generation = generation
        super().__init__(f"claim on run {run_id} (generation {generation}) lost: {reason.value}")


class LeaseHeldError(StoreError):
    """Raised when a claim or control claim finds a live lease held by someone else.

    Unlike ``ClaimLostError`` the caller never owned the run; it must not take it over.
    """

    code = "leaseHeld"

    def __init__(self, run_id: str, generation: int) -> None:
        self.run_id = run_id
        self.generation = generation
        super().__init__(
            f"run {run_id} has a live claim (generation {generation}); "
            "wait for it to finish or expire"
        )


class RunNotFoundError(StoreError):
    """Raised when a run id names no run."""

    code = "notFound"

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no run with id {run_id}; list runs with 'pi-workflows run list'")


class InvalidTransitionError(StoreError):
    """Raised when a lifecycle operation is impossible from the run's current status.

    Nothing was changed. ``status`` is the status the run actually has.
    """

    code = "invalidTransition"

    def __init__(self, run_id: str, operation: str, status: str, detail: str = "") -> None:
        self.run_id = run_id
        self.operation = operation
        self.status = status
        suffix = f": {detail}" if detail else ""
        super().__init__(f"cannot {operation} run {run_id} while it is {status}{suffix}")


class RevisionConflictError(StoreError):
    """Raised when a write expected another revision of the run than the stored one.

    The caller read stale state; it may re-read and decide again. Nothing was changed.
    """

    code = "revisionConflict"

    def __init__(self, run_id: str, expected: int, actual: int) -> None:
        self.run_id = run_id
        self.expected = expected
        self.actual = actual
        super().__init__(f"run {run_id} is at revision {actual}, not the expected {expected}")


class PresentationWriteError(StoreError):
    """Raised when a write declared as presentation bookkeeping (``runs.PRESENTATION_EVENTS``)
    would be fenced by a runner or would change what a runner reads.

    A programming error of the store's caller, never of a client: the revision rule
    (``store/runs.py``) lets such writes move only ``revision``, so they must not change
    execution state. Nothing was changed.
    """

    code = "presentationWrite"

    def __init__(self, run_id: str, event_type: str, problem: str) -> None:
        self.run_id = run_id
        self.event_type = event_type
        super().__init__(f"{event_type} on run {run_id} is not presentation bookkeeping: {problem}")


class ReceiptConflictError(StoreError):
    """Raised when an idempotency key is reused with a different request payload."""

    code = "conflict"

    def __init__(self, client_id: str, idempotency_key: str, operation: str) -> None:
        self.client_id = client_id
        self.idempotency_key = idempotency_key
        self.operation = operation
        super().__init__(
            f"idempotency key {idempotency_key!r} was already used for a different "
            f"{operation} request; use a new key for a new request"
        )


class StateIdentityError(StoreError):
    """Raised when the file at the database path is not a pi-workflows v1 state database.

    The file is left byte-for-byte untouched; the message carries the reset instruction.
    """

    code = "stateIdentity"

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(
            f"{path} {problem}. Back it up and move it away together with its -wal and -shm "
            f"files (for example: mv {path} {path}-wal {path}-shm /some/backup/dir/), then "
            "run the command again to create a new empty state database"
        )


class StateStorageError(StoreError):
    """Raised when the state database cannot be opened, read or written because of its file
    system (a full disk, a file-size limit, an I/O error), not because of what it holds.

    Unlike ``StateIdentityError`` the file is not at fault and must not be moved away: free
    space or fix the file system, then try again.
    """

    code = "storageError"

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(
            f"the state database at {path} cannot be used right now ({detail}); free disk "
            "space or fix the file system, then try again"
        )


class EffectConflictError(StoreError):
    """Raised when an effect key is reserved again with a different request fingerprint.

    The node's effect request changed between two executions of the same visit (for example
    the workflow's command was edited): running it could apply a different side effect under
    the receipt of the first, so it is refused.
    """

    code = "effectConflict"

    def __init__(self, run_id: str, node_id: str, effect_type: str) -> None:
        self.run_id = run_id
        self.node_id = node_id
        self.effect_type = effect_type
        super().__init__(
            f"effect {effect_type!r} of node {node_id} in run {run_id} was reserved before with a"
            " different request; restart the run to apply the new request"
        )


class EffectNotFoundError(StoreError):
    """Raised when an effect id names no effect."""

    code = "notFound"

    def __init__(self, effect_id: str) -> None:
        self.effect_id = effect_id
        super().__init__(
            f"no effect with id {effect_id}; list them with 'pi-workflows effect list'"
        )


class RequestClosedError(StoreError):
    """Raised when a submission or answer addresses a request that is not open for it.

    ``status`` is what the request is: ``answered``, ``timed_out``, ``cancelled``,
    ``validating`` (another submission is being validated) or ``unknown``.
    """

    code = "requestClosed"

    def __init__(self, request_id: str, status: str) -> None:
        self.request_id = request_id
        self.status = status
        why = {
            "validating": "another submission is being validated; wait for its outcome",
            "unknown": "there is no such request; see 'pi-workflows interaction list'",
        }.get(status, f"it is {status}")
        super().__init__(f"request {request_id} cannot take this answer: {why}")


class DecisionResolvedError(StoreError):
    """Raised when a human decision is answered after its one resolution was written.

    The first valid answer, the timeout default or a cancellation wins exactly once; this
    names the winner so the loser can tell what happened.
    """

    code = "decisionResolved"

    def __init__(
        self, request_id: str, resolution: str, choice: str | None, resolved_by: str | None
    ) -> None:
        self.request_id = request_id
        self.resolution = resolution
        self.choice = choice
        self.resolved_by = resolved_by
        how = {
            "answered": f"answered {choice!r}" + (f" by {resolved_by}" if resolved_by else ""),
            "timedOut": f"timed out to its default {choice!r}" if choice else "timed out",
            "cancelled": "cancelled with its run",
        }.get(resolution, resolution)
        super().__init__(f"decision {request_id} was already {how}")


class CoordinatorFencedError(StoreError):
    """Raised when a session report carries a coordinator epoch that is not the current one.

    Another Pi process attached to the same session later; this one must stop presenting
    and reporting (its view is stale). Nothing was changed.
    """

    code = "coordinatorFenced"

    def __init__(self, session_id: str, epoch: int, current: int | None) -> None:
        self.session_id = session_id
        self.epoch = epoch
        self.current = current
        now = "never attached" if current is None else f"now at epoch {current}"
        super().__init__(
            f"session {session_id}: coordinator epoch {epoch} is fenced ({now}); attach again"
        )


class ScheduleNotFoundError(StoreError):
    """Raised when a name or id names no schedule that is not deleted (``store/schedules.py``).

    Unlike ``RunNotFoundError`` it concerns schedules; a deleted schedule is kept only as the
    provenance of the runs it started and cannot be addressed by its name any more.
    """

    code = "notFound"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no schedule named {name}; list them with 'pi-workflows schedule list'")


class ScheduleNameTakenError(StoreError):
    """Raised when ``schedule add`` names a schedule that exists and is not deleted.

    Nothing was stored. Delete the existing schedule first, or choose another name.
    """

    code = "scheduleExists"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"a schedule named {name} already exists; delete it first"
            f" ('pi-workflows schedule delete {name}') or choose another name"
        )


class ScheduleLimitError(StoreError):
    """Raised when ``schedule add`` would make more schedules than the store keeps live.

    Unlike ``InvalidScheduleError`` the schedule itself is fine; there are too many others.
    """

    code = "limitReached"

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(
            f"there are already {limit} schedules (the limit); delete one before adding another"
        )


class InvalidScheduleError(StoreError):
    """Raised when a schedule's cadence, time zone, name or policy is not valid.

    ``field`` names the payload field (``every``, ``cron``, ``timezone``, ``name``,
    ``overlap``, ``catchup``); the message names the bad value and the accepted form.
    Nothing was stored.
    """

    code = "badRequest"

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


class ForkPointError(StoreError):
    """Raised when a fork names a node or visit the source run never reached in its current
    round, or a node the workflow's current code does not have.

    Unlike ``GraphCarryError`` the graph may be fine; the fork point itself is wrong. The
    message names what exists instead. Nothing was stored.
    """

    code = "unknownForkPoint"

    def __init__(self, run_id: str, node_id: str, visit: int | None, message: str) -> None:
        self.run_id = run_id
        self.node_id = node_id
        self.visit = visit
        super().__init__(message)


class ForkOutputError(StoreError):
    """Raised when a fork's ``--set NODE=JSON`` cannot replace that node's carried output:
    the node is not carried (it is the fork node, after it, or never ran before it), its
    latest carried visit has no output (it failed), or the value breaks the node's output
    contract. Unlike ``ForkPointError`` the fork point is fine; one set value is not. The
    message names the node. Nothing was stored.
    """

    code = "outputRefused"

    def __init__(self, run_id: str, node_id: str, message: str) -> None:
        self.run_id = run_id
        self.node_id = node_id
        super().__init__(message)


class GraphCarryError(StoreError):
    """Raised when a workflow's current code cannot carry a run's recorded state (a fork, an
    upgrade, a fork's restart): a node the run waits at or resumes at is gone, or a node
    with a recorded result is gone or changed kind (``store/carry.py``).

    ``reasons`` lists each problem in one line; nothing was changed.
    """

    code = "cannotCarry"

    def __init__(self, run_id: str, operation: str, reasons: list[str]) -> None:
        self.run_id = run_id
        self.operation = operation
        self.reasons = list(reasons)
        super().__init__(
            f"cannot {operation} run {run_id} on the workflow's current code: " + "; ".join(reasons)
        )


class SettingsRefusedError(StoreError):
    """Raised when a change of a run's live settings cannot be applied: the workflow declares
    no settings, the changer may not change them, the patch is malformed or does not apply,
    its result does not match the settings schema or is too large, or the run changed its
    settings too often. Nothing was changed (``store/settings.py``). Unlike
    ``SettingsConflictError`` the same change will not succeed when retried."""

    code = "settingsRefused"

    def __init__(self, run_id: str, reason: str) -> None:
        self.run_id = run_id
        self.reason = reason
        super().__init__(reason)


class SettingsConflictError(StoreError):
    """Raised when a settings change names the change number it expects (``--expect-change``)
    and the run's settings are at another one. Nothing was changed; ``actual`` is the
    current number, to read the settings again and decide afresh."""

    code = "settingsConflict"

    def __init__(self, run_id: str, expected: int, actual: int) -> None:
        self.run_id = run_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"run {run_id}'s settings are at change {actual}, not {expected}: read them again"
            f" (pi-workflows run settings {run_id}) and send the change with --expect-change"
            f" {actual} if it still applies"
        )


class FollowUpRefusedError(StoreError):
    """Raised when a follow-up prompt cannot be queued or removed: the run has no origin
    session to send it to (started outside Pi, detached, or a child run), has ended, the
    text is empty or too long, the run already has the most follow-ups waiting, or the
    follow-up to remove is no longer queued. Nothing was changed (``store/follow_ups.py``)."""

    code = "followUpRefused"

    def __init__(self, run_id: str, reason: str) -> None:
        self.run_id = run_id
        self.reason = reason
        super().__init__(reason)


class FollowUpNotFoundError(StoreError):
    """Raised when a follow-up id names no follow-up (of the run, when one is given)."""

    code = "notFound"

    def __init__(self, follow_up_id: str) -> None:
        self.follow_up_id = follow_up_id
        super().__init__(
            f"no follow-up with id {follow_up_id}; list them with 'pi-workflows run follow-ups RUN'"
        )


class PublishRefusedError(StoreError):
    """Raised when a value a callback publishes (``ctx.publish``) cannot be kept: the key
    is malformed, the value too large, or the run already has the most keys or publishes.
    Unlike ``InvalidTransitionError`` the runner's claim and attempt were fine; the
    callback is told why and may go on. Nothing was changed (``store/published.py``)."""

    code = "publishRefused"

    def __init__(self, run_id: str, reason: str) -> None:
        self.run_id = run_id
        self.reason = reason
        super().__init__(reason)
