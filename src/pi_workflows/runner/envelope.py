"""The launch envelope and the state read, as the runner child decodes them.

Runs in the runner child; never opens the database. Owns the runner's view of the two
payloads it must understand field by field: the ``LaunchEnvelope`` (first frame, fields in
``docs/protocol.md``) and the ``RunState`` reply to ``state.get`` (with its ``active``
attempt and request). Unknown fields are ignored so the server may add some; missing or
mistyped required fields are a ``ProtocolViolationError``.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from pi_workflows.runner.errors import ProtocolViolationError

_T = TypeVar("_T")


class _Wire(msgspec.Struct, frozen=True, rename="camel", kw_only=True):
    """camelCase on the wire, immutable, unknown fields ignored."""


class SourceRecord(_Wire, frozen=True, kw_only=True):
    """The recorded workflow source: a file path or ``builtin:NAME`` and its hashes."""

    kind: str
    ref: str
    revision: str
    mounted: dict[str, str] = {}


class LaunchEnvelope(_Wire, frozen=True, kw_only=True):
    """What the server recorded before it spawned this child (the ``launch`` payload)."""

    run_id: str
    generation: int
    runner_epoch: int
    server_epoch: int = 0
    protocol_version: int = 1
    workflow_name: str
    project_dir: str | None = None
    source: SourceRecord
    definition_digest: str
    input_hash: str | None = None
    lease_ms: int | None = None
    validate_ms: int | None = None  # the bound of a wait_event validate on one event
    # The run's recorded environment (docs/authoring.md, "Environment"): its working
    # directory (None: ``/``) and exactly the variables workflow code and commands get.
    working_directory: str | None = None
    environment: dict[str, str] | None = None
    trace_id: str | None = None  # the run tree's trace id, 32 hex digits (otel.ids)
    # Where the runner keeps an effect body's outcome until the server has it (evidence.py).
    evidence_dir: str | None = None


class ValueRef(_Wire, frozen=True, kw_only=True):
    """A value the server sends by reference (over the inline limit): read with ``blob.read``."""

    digest: str
    bytes: int


class SubmissionView(_Wire, frozen=True, kw_only=True):
    """The submission a ``validating`` request asks this runner to validate."""

    submission_id: str
    value: Any = None
    value_ref: ValueRef | None = None


class RequestView(_Wire, frozen=True, kw_only=True):
    """The interactive request of a waiting attempt."""

    request_id: str
    kind: str
    status: str  # pending | validating | answered | timed_out | cancelled
    answer: Any = None
    answer_ref: ValueRef | None = None
    submission: SubmissionView | None = None


class WaitView(_Wire, frozen=True, kw_only=True):
    """The durable wait of a waiting attempt (a sleep's, an event wait's, a join's)."""

    wait_id: str
    kind: str  # sleep | event | children
    status: str  # pending | fired | signalled | cancelled
    due_at: int | None = None
    fired_at: int | None = None
    event: str | None = None


class ActiveAttempt(_Wire, frozen=True, kw_only=True):
    """The run's unfinished or unrouted attempt, if any."""

    attempt_id: str
    node_id: str
    visit: int
    attempt_no: int = 1
    try_no: int = 1
    settings_change: int | None = 0  # the settings it started with (``ctx.settings``)
    settings: Any = None
    status: str  # running | waiting | timed_out
    request: RequestView | None = None
    wait: WaitView | None = None


class CleanupView(_Wire, frozen=True, kw_only=True):
    """The run was cancelled (or passed its run deadline) and its cleanup node runs now:
    which node, why (``ctx.cancel_reason``) and the status the run then ends with."""

    node_id: str
    reason: str
    ends_as: str  # cancelled | timed_out


class StateView(_Wire, frozen=True, kw_only=True):
    """The ``state.get`` reply: only what the engine needs."""

    input: Any = None
    input_ref: ValueRef | None = None
    step_count: int = 0
    round: int = 0
    current_node: str | None = None
    outputs: dict[str, Any] = {}
    output_refs: dict[str, ValueRef] = {}
    more_outputs: str | None = None  # the cursor of a further ``state.outputs`` page
    results: dict[str, dict[str, Any]] = {}
    visits: dict[str, int] = {}
    active: ActiveAttempt | None = None
    revision: int | None = None
    depth: int = 0  # how deep the run nests in its tree (a root is 0)
    cleanup: CleanupView | None = None  # set while the run's cleanup node is due
    fire_at: int | None = None  # the schedule fire time that started the run (ctx.fire_at)


class OutputsPage(_Wire, frozen=True, kw_only=True):
    """The reply to ``state.outputs {after}``: a further page of node outputs."""

    outputs: dict[str, Any] = {}
    output_refs: dict[str, ValueRef] = {}
    more_outputs: str | None = None
    revision: int | None = None


class AttemptReply(_Wire, frozen=True, kw_only=True):
    """``{attemptId, nodeId, visit, attemptNo, tryNo, settingsChange, settings}``: the reply
    to ``node.start`` (and ``nextAttempt`` in a ``node.finish`` or ``node.retry`` reply),
    with the run's settings as the attempt started with them."""

    attempt_id: str
    node_id: str
    visit: int
    attempt_no: int = 1
    try_no: int = 1
    settings_change: int | None = 0
    settings: Any = None


class Reevaluation(_Wire, frozen=True, kw_only=True):
    """``reevaluate`` in a ``node.finish`` reply: the settings changed since the
    ``settings_route`` attempt started; evaluate it again with these before routing."""

    settings_change: int
    settings: Any = None


class SleepReply(_Wire, frozen=True, kw_only=True):
    """The reply to ``node.sleep``: the run now waits (the child exits), or the time had
    already come ``late_ms`` ago (the node finishes at once)."""

    waited: bool
    until: int
    late_ms: int = 0


class RetryReply(_Wire, frozen=True, kw_only=True):
    """The reply to ``node.retry``: the next try (started now), or its due time (the run
    waits), or ``parked`` (the tries ran out and the run paused)."""

    next_attempt: AttemptReply | None = None
    due_at: int | None = None
    parked: bool = False


class SignalView(_Wire, frozen=True, kw_only=True):
    """A pending event the server hands a ``wait_event`` node to validate and consume."""

    signal_id: str
    name: str
    seq: int
    data: Any = None
    data_ref: ValueRef | None = None


class JoinItem(_Wire, frozen=True, kw_only=True):
    """One child of a join, from ``join.results``."""

    item: int
    run_id: str | None = None
    status: str  # completed | failed | timed_out | cancelled | skipped
    output: Any = None
    output_ref: ValueRef | None = None
    error: str | None = None


class JoinPage(_Wire, frozen=True, kw_only=True):
    """A page of ``join.results``: children in item order, and the next page's ``after``."""

    items: list[JoinItem] = []
    next: int | None = None


class AwaitReply(_Wire, frozen=True, kw_only=True):
    """The reply to ``node.await``: the run waits, the wait timed out, or an event."""

    waited: bool = False
    timed_out: bool = False
    signal: SignalView | None = None


class Reservation(_Wire, frozen=True, kw_only=True):
    """The reply to ``effect.reserve``: run the body only when ``status`` is ``applying``."""

    effect_id: str
    effect_key: str
    status: str  # applying | applied | rejected (anything else: protocol violation)
    result: Any = None
    error: str | None = None


def convert(payload: object, kind: type[_T], what: str) -> _T:
    """Decode a reply payload (already JSON-decoded) into ``kind`` or raise a violation."""
    try:
        return msgspec.convert(payload, kind)
    except msgspec.ValidationError as exc:
        raise ProtocolViolationError(what, str(exc)) from None
