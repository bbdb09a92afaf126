"""The run state machine, defined once: statuses, the queue status each implies, and the
transition table every lifecycle operation is checked against before it writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run is. The invariant of each status is in its comment."""

    QUEUED = "queued"  # needs a runner; queue 'ready'; no held claim
    RUNNING = "running"  # a claim is held (it may have expired); queue 'claimed'
    # an interactive request or a durable wait (store/waits.py) is open; queue 'waiting';
    # no held claim
    WAITING = "waiting"
    PAUSED = "paused"  # parked with a reason, resumes only explicitly; queue 'parked'; no claim
    COMPLETED = "completed"  # terminal; queue 'done'
    FAILED = "failed"  # terminal; queue 'done'
    TIMED_OUT = "timed_out"  # terminal; queue 'done'
    CANCELLED = "cancelled"  # terminal; queue 'done'


TERMINAL_STATUSES = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELLED}
)
ACTIVE_STATUSES = frozenset(set(RunStatus) - TERMINAL_STATUSES)


class QueueStatus(StrEnum):
    """The scheduler's status of a run; always ``QUEUE_STATUS_OF[run status]``."""

    READY = "ready"
    CLAIMED = "claimed"
    WAITING = "waiting"
    PARKED = "parked"
    DONE = "done"


QUEUE_STATUS_OF: dict[RunStatus, QueueStatus] = {
    RunStatus.QUEUED: QueueStatus.READY,
    RunStatus.RUNNING: QueueStatus.CLAIMED,
    RunStatus.WAITING: QueueStatus.WAITING,
    RunStatus.PAUSED: QueueStatus.PARKED,
    RunStatus.COMPLETED: QueueStatus.DONE,
    RunStatus.FAILED: QueueStatus.DONE,
    RunStatus.TIMED_OUT: QueueStatus.DONE,
    RunStatus.CANCELLED: QueueStatus.DONE,
}


class ParkReason(StrEnum):
    """Why a paused run stopped. Only ``SERVER_STOPPED`` resumes without being asked."""

    USER_PAUSED = "userPaused"
    SERVER_STOPPED = "serverStopped"
    RUNNER_NO_PROGRESS = "runnerNoProgress"
    RUNNER_CRASHED = "runnerCrashed"
    WORKFLOW_SOURCE_CHANGED = "workflowSourceChanged"
    EFFECT_AMBIGUOUS = "effectAmbiguous"
    EFFECTS_RESOLVED = "effectsResolved"  # its ambiguous effects were resolved; resume it
    WORKFLOW_LOAD_FAILED = "workflowLoadFailed"
    TURN_ABORTED = "turnAborted"  # the person stopped the model turn of the run's step
    AGENT_UNAVAILABLE = "agentUnavailable"  # a detached run's headless Pi cannot work
    PROPOSAL_REFUSED = "proposalRefused"  # the server refused its runner's proposal
    RETRIES_EXHAUSTED = "retriesExhausted"  # a retry policy with on_exhausted="pause" ran out


class NextCommand(StrEnum):
    """The one explicit command the next runner of a run receives."""

    START = "start"
    RESUME = "resume"
    RESTART = "restart"


class AttemptStatus(StrEnum):
    """The status of one node attempt. ``RUNNING`` and ``WAITING`` are unfinished."""

    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # its runner stopped; the same visit runs again
    RETRIED = "retried"  # its outcome is retried: the next try of the same visit follows
    EXHAUSTED = "exhausted"  # the last try of a round that pauses; a resume starts a new round


UNFINISHED_ATTEMPT_STATUSES = frozenset({AttemptStatus.RUNNING, AttemptStatus.WAITING})


class Operation(StrEnum):
    """Every lifecycle operation that changes a run's status."""

    RESERVE = "reserve"
    CLAIM = "claim"
    PAUSE = "pause"
    PARK = "park"
    WAIT = "wait"
    RESUME = "resume"
    REWAIT = "wait again"
    RETURN = "return to waiting"
    RECOVER = "recover"
    COMPLETE = "complete"
    FAIL = "fail"
    TIME_OUT = "time out"
    CANCEL = "cancel"
    EXPIRE = "expire"  # the run deadline passed (store/deadlines.py)
    CLEAN_UP = "clean up"  # a cancel or deadline of a run with a cleanup node (cleanups.py)
    RESTART = "restart"


@dataclass(frozen=True)
class Transition:
    """Which statuses an operation starts from, where it leads, and whether it needs a claim.

    ``needs_claim``: the write is fenced by the caller's live claim (or a control claim
    taken in the same transaction).
    """

    sources: frozenset[RunStatus]
    target: RunStatus
    needs_claim: bool


def _t(sources: set[RunStatus], target: RunStatus, *, needs_claim: bool) -> Transition:
    return Transition(frozenset(sources), target, needs_claim)


Q, R, W, P = RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.PAUSED

TRANSITIONS: dict[Operation, Transition] = {
    Operation.RESERVE: _t(set(), Q, needs_claim=False),
    Operation.CLAIM: _t({Q}, R, needs_claim=False),
    Operation.PAUSE: _t({Q, W}, P, needs_claim=False),
    Operation.PARK: _t({R}, P, needs_claim=True),
    Operation.WAIT: _t({R}, W, needs_claim=True),
    Operation.RESUME: _t({P, W}, Q, needs_claim=False),
    # A paused run whose request is still open waits for it again (no runner needed).
    Operation.REWAIT: _t({P}, W, needs_claim=False),
    # A validation runner rejected (or could not finish) a submission: the request is open
    # again and the run waits for a corrected one.
    Operation.RETURN: _t({R}, W, needs_claim=True),
    Operation.RECOVER: _t({R}, Q, needs_claim=True),
    Operation.COMPLETE: _t({R}, RunStatus.COMPLETED, needs_claim=True),
    Operation.FAIL: _t({R}, RunStatus.FAILED, needs_claim=True),
    Operation.TIME_OUT: _t({R}, RunStatus.TIMED_OUT, needs_claim=True),
    Operation.CANCEL: _t({Q, R, W, P}, RunStatus.CANCELLED, needs_claim=True),
    # The run deadline passed: whatever the run does, it ends as a cancel ends it.
    Operation.EXPIRE: _t({Q, R, W, P}, RunStatus.TIMED_OUT, needs_claim=True),
    # A cancel or a run deadline of a run whose workflow has a cleanup node: everything a
    # cancel ends is ended, and the run is queued for the runner that runs that node; its
    # outcome then ends the run (cancel or expire from running).
    Operation.CLEAN_UP: _t({Q, R, W, P}, Q, needs_claim=True),
    # A waiting run (on a request, a sleep, a retry delay or an event) restarts too: its
    # request or wait is cancelled with the old round (no runner holds it); so does every
    # ended run, a completed one included (a fresh round from the original input).
    Operation.RESTART: _t({P, W, *TERMINAL_STATUSES}, Q, needs_claim=False),
}


def view_status(status: RunStatus, park_reason: str | None) -> str:
    """The user-facing status: a run parked on an uncertain effect shows ``ambiguous``."""
    if status is RunStatus.PAUSED and park_reason == ParkReason.EFFECT_AMBIGUOUS:
        return "ambiguous"
    return status.value


CODE_CHANGED = "its workflow's code changed since it started (workflowSourceChanged)"
"""Why a run parked ``workflowSourceChanged`` cannot go on as it is (``code_changed_advice``)."""


def code_changed_advice(run_id: str) -> str:
    """What to do with a run whose code changed, as every refusal it causes says it (an
    answer, a submission rejected by the park, ``run resume``): an upgrade (dry run first),
    a restart or a cancel. ``run resume`` alone would only park it again. Short enough to
    fit a refusal's 500 characters with its prefix."""
    return (
        f"check 'pi-workflows run upgrade {run_id} --dry-run', then"
        f" 'pi-workflows run upgrade {run_id}' goes on with the new code; or"
        f" 'pi-workflows run restart {run_id}' or 'pi-workflows run cancel {run_id}'"
    )


def paused_refusal(run_id: str, park_reason: str | None) -> str:
    """Why an answer to a paused run is refused and what to do first: ``run resume``, or,
    when its code changed, ``code_changed_advice``."""
    if park_reason == ParkReason.WORKFLOW_SOURCE_CHANGED:
        return f"{CODE_CHANGED}; {code_changed_advice(run_id)}"
    return f"resume the run first ('pi-workflows run resume {run_id}')"
