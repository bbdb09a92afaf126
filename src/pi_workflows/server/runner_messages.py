"""Answering one runner child's messages: check identity, replay, commit, reply.

Runs in the server. Each proposal is committed with the fenced write under the claim the
server holds for that runner, and its reply is stored in ``runner_messages`` in the same
transaction, so a repeated message id replays exactly what was committed.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pi_workflows.channels import config as channel_config
from pi_workflows.protocol import (
    AUDIENCE_PATTERN,
    RUNNER_SCHEMA,
    SIGNAL_NAME_PATTERN,
    ErrorInfo,
    Outcome,
    RunnerMessage,
    RunnerReply,
    canonical_json,
    fingerprint,
    safe_message,
)
from pi_workflows.store import (
    attempt_logs,
    children,
    effects,
    faults,
    interaction_writes,
    lifecycle,
    progress,
    published,
    runners,
    sent_signals,
    settings,
    signals,
    values,
    views,
)
from pi_workflows.store.children import ChildWorkflow
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database
from pi_workflows.store.effect_writes import keep_receipt, reserve_effect, settle_effect
from pi_workflows.store.effects import EffectStatus
from pi_workflows.store.errors import (
    ClaimLostError,
    EffectConflictError,
    InvalidTransitionError,
    RevisionConflictError,
    StoreError,
)
from pi_workflows.store.interactions import InteractionDraft
from pi_workflows.store.lifecycle import Finish, GoTo
from pi_workflows.store.run_rows import SourceRecord
from pi_workflows.store.states import AttemptStatus, ParkReason, RunStatus

log = logging.getLogger(__name__)

PROPOSALS = frozenset(
    {
        "node.start",
        "node.finish",
        "node.wait",
        "node.sleep",
        "node.retry",
        "node.await",
        "signal.reject",
        "node.spawn",
        "node.update",
        "node.logs",
        "value.publish",
        "signal.send",
        "run.park",
        "effect.reserve",
        "effect.settle",
        "process.register",
        "process.ended",
        "interaction.reject",
    }
)
for _kind in PROPOSALS:
    faults.declare(f"runner.{_kind}", f"runner proposal {_kind}: its change and its reply")
# A runner may park its run for these reasons only (the server decides every other park).
RUNNER_PARK_REASONS = frozenset(
    {
        ParkReason.WORKFLOW_SOURCE_CHANGED,
        ParkReason.WORKFLOW_LOAD_FAILED,
        ParkReason.EFFECT_AMBIGUOUS,  # a manual effect's command was killed at its deadline
    }
)
# After these commit, the runner has nothing left to do for this generation.
FINAL_KINDS = frozenset({"node.wait", "run.park", "interaction.reject"})
# Proposals that change only their own run's progress under its live runner: the run stays
# running and claimed, and no queue entry, durable wait, request, child run or schedule
# changes. After one is accepted the scheduler has nothing new to look at (``in_place``).
IN_PLACE_KINDS = frozenset(
    {
        "node.start",
        "node.update",
        "node.logs",
        "value.publish",
        "effect.reserve",
        "effect.settle",
        "process.register",
        "process.ended",
    }
)
# A node.sleep, node.retry or node.await is final when its reply says the run now waits.


class BadRunnerMessage(Exception):  # noqa: N818 - a refusal, answered as `rejected`
    """A runner message whose payload is malformed."""


@dataclass
class RunnerIdentity:
    """What the server knows about one live runner: whose messages it may accept.

    ``answered`` holds the message ids this server has answered for it: only a message id
    in it can be a resend, so only those are looked up in ``runner_messages``.
    """

    run_id: str
    runner_epoch: int
    claim: Claim
    answered: set[str] = field(default_factory=set)


def _reply(
    message_id: str,
    outcome: Outcome,
    *,
    revision: int | None = None,
    payload: dict[str, Any] | None = None,
    code: str | None = None,
    error: str | None = None,
) -> RunnerReply:
    return RunnerReply(
        schema=RUNNER_SCHEMA,
        message_id=message_id,
        outcome=outcome,
        revision=revision,
        payload=payload,
        error=None if code is None else ErrorInfo(code=code, message=safe_message(error or code)),
    )


def _field(payload: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = payload.get(name)
    if not isinstance(value, kind):
        raise BadRunnerMessage(f"payload field {name!r} is missing or has the wrong type")
    return value


MAX_MS = 253_402_300_799_999
"""The largest time a runner may name, in epoch or duration milliseconds (the last
millisecond of 9999-12-31 UTC): beyond it no date can be written or stored."""


def _optional_ms(payload: dict[str, Any], name: str) -> int | None:
    value = payload.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_MS:
        raise BadRunnerMessage(
            f"payload field {name!r} must be an integer of milliseconds from 0 to {MAX_MS}"
        )
    return value


def _next_step(payload: dict[str, Any]) -> GoTo | Finish:
    step = _field(payload, "next", dict)
    if step.get("type") == "goto":
        return GoTo(_field(step, "nodeId", str))
    if step.get("type") == "finish":
        status = RunStatus(_field(step, "status", str))
        # cancelled: only a cleanup node's end (store/cleanups.py), checked by the store.
        if status not in (
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.TIMED_OUT,
            RunStatus.CANCELLED,
        ):
            raise BadRunnerMessage(f"a run cannot finish as {status}")
        return Finish(status, step.get("output"), step.get("error"))
    raise BadRunnerMessage("payload field 'next' must be a goto or a finish")


_ATTEMPT_OUTCOMES = {
    "completed": AttemptStatus.COMPLETED,
    "failed": AttemptStatus.FAILED,
    "timed_out": AttemptStatus.TIMED_OUT,
}


def in_place(message: RunnerMessage, reply: RunnerReply) -> bool:
    """Whether ``reply`` accepted a proposal that moved only its own run forward: an
    ``IN_PLACE_KINDS`` message, or a ``node.finish`` that routes to a next node and carries
    no submission, event or message (it ends no request, consumes no event, records no
    message for a session). The server's scheduler need not look after one (its queue,
    durable waits, headless agents, joins and schedules are as they were); everything
    else still hears of the change (held answers, watched views)."""
    if reply.outcome is not Outcome.ACCEPTED:
        return False
    if message.kind in IN_PLACE_KINDS:
        return True
    if message.kind != "node.finish":
        return False
    payload = message.payload
    step = payload.get("next")
    return (
        isinstance(step, dict)
        and step.get("type") == "goto"
        and payload.get("submissionId") is None
        and payload.get("signalId") is None
        and payload.get("message") is None
    )


def answer(db: Database, runner: RunnerIdentity, message: RunnerMessage) -> RunnerReply:
    """Answer one message from ``runner``; never raises for bad input or lost claims."""
    claim = runner.claim
    if (
        message.run_id != runner.run_id
        or message.runner_epoch != runner.runner_epoch
        or message.generation != claim.generation
    ):
        return _reply(message.message_id, Outcome.CLAIM_LOST, code="claimLost", error="stale")
    if message.message_id in runner.answered:
        stored = runners.stored_reply(db.conn, runner.runner_epoch, message.message_id)
        if stored is not None:
            return RunnerReply(schema=RUNNER_SCHEMA, **_replay(stored))
    try:
        read = _read(db, runner, message)
        if read is not None:
            return read
        if message.kind not in PROPOSALS:
            raise BadRunnerMessage(f"unknown runner message kind {message.kind!r}")
        with db.atomic(f"runner.{message.kind}") as tx:
            payload = _apply(db, claim, message, runner.runner_epoch)
            revision = int(
                tx.conn.execute(  # a runner is fenced by the execution revision
                    "SELECT execution_revision FROM runs WHERE run_id = ?", (runner.run_id,)
                ).fetchone()[0]
            )
            reply = {
                "messageId": message.message_id,
                "outcome": Outcome.ACCEPTED.value,
                "revision": revision,
                "payload": payload,
            }
            runners.store_reply(tx, runner.runner_epoch, message.message_id, message.kind, reply)
        runner.answered.add(message.message_id)
        return _reply(message.message_id, Outcome.ACCEPTED, revision=revision, payload=payload)
    except ClaimLostError as exc:
        log.info(
            "runner %s of run %s lost its claim: %s", runner.runner_epoch, exc.run_id, exc.reason
        )
        _keep_receipt(db, runner, message, f"claimLost: {exc.reason.value}")
        return _reply(message.message_id, Outcome.CLAIM_LOST, code="claimLost", error=str(exc))
    except (RevisionConflictError, EffectConflictError) as exc:
        _keep_receipt(db, runner, message, exc.code)
        return _reply(message.message_id, Outcome.CONFLICT, code=exc.code, error=str(exc))
    except (BadRunnerMessage, ValueError) as exc:
        return _reply(message.message_id, Outcome.REJECTED, code="rejected", error=str(exc))
    except InvalidTransitionError as exc:
        _keep_receipt(db, runner, message, exc.code)
        return _reply(message.message_id, Outcome.REJECTED, code="rejected", error=str(exc))
    except StoreError as exc:
        _keep_receipt(db, runner, message, exc.code)
        return _reply(message.message_id, Outcome.REJECTED, code=exc.code, error=str(exc))


def _read(db: Database, runner: RunnerIdentity, message: RunnerMessage) -> RunnerReply | None:
    """Answer a read (``state.get``, ``state.outputs``, ``join.results``, ``children.of``,
    ``blob.read``); None for a proposal. Raises ``BadRunnerMessage`` for a bad read."""
    if message.kind == "state.get":
        with db.read() as conn:
            state = views.runner_state(conn, runner.run_id)
        return _reply(
            message.message_id, Outcome.ACCEPTED, revision=state["revision"], payload=state
        )
    if message.kind == "state.outputs":
        after = str(_field(message.payload, "after", str))
        with db.read() as conn:
            page = views.runner_outputs(conn, runner.run_id, after)
        return _reply(message.message_id, Outcome.ACCEPTED, revision=page["revision"], payload=page)
    if message.kind == "join.results":
        payload = message.payload
        wait_id = str(_field(payload, "waitId", str))
        with db.read() as conn:
            join = children.read_join(conn, wait_id)
            if join is None or join.parent_run_id != runner.run_id:
                raise BadRunnerMessage(f"wait {wait_id} is no join of run {runner.run_id}")
            page = children.results(
                conn,
                wait_id,
                _non_negative(payload, "after"),
                min(500, max(1, _non_negative(payload, "limit"))),
            )
        return _reply(message.message_id, Outcome.ACCEPTED, payload=page)
    if message.kind == "children.of":  # ctx.children(node): a page of its child runs
        payload = message.payload
        with db.read() as conn:
            page = children.of_node(
                conn,
                runner.run_id,
                str(_field(payload, "nodeId", str)),
                _non_negative(payload, "after"),
                min(500, max(1, _non_negative(payload, "limit"))),
            )
        return _reply(message.message_id, Outcome.ACCEPTED, payload=page)
    if message.kind == "blob.read":
        payload = message.payload
        with db.read() as conn:
            try:
                chunk = values.read_chunk(
                    conn,
                    str(_field(payload, "digest", str)),
                    _non_negative(payload, "offset"),
                    _non_negative(payload, "length"),
                )
            except LookupError as exc:
                raise BadRunnerMessage(str(exc)) from None
        return _reply(message.message_id, Outcome.ACCEPTED, payload=chunk)
    return None


def _keep_receipt(db: Database, runner: RunnerIdentity, message: RunnerMessage, why: str) -> None:
    """A refused ``effect.settle`` still carries what its body did: keep it
    (``effect_writes.keep_receipt``), so no refusal turns a settled effect ambiguous or
    runs an idempotent body again. Other refused proposals carry nothing to keep."""
    if message.kind != "effect.settle":
        return
    payload = message.payload
    try:
        effect_id = _field(payload, "effectId", str)
        status = EffectStatus(_field(payload, "status", str))
        error = _optional_text(payload, "error")
    except (BadRunnerMessage, ValueError):
        return  # a malformed settle is refused as such; it proves nothing
    try:
        kept = keep_receipt(
            db, runner.run_id, runner.claim.generation, effect_id, status,
            result=payload.get("result"), error=error, receipt=payload.get("receipt"),
            refused=why,
        )  # fmt: skip
    except (StoreError, ValueError) as exc:
        log.warning("run %s: could not keep the receipt of effect %s: %s",
                    runner.run_id, effect_id, exc)  # fmt: skip
        return
    if kept is not None:
        log.warning(
            "run %s: kept the %s receipt of effect %s although its settle was refused (%s)",
            runner.run_id, status.value, effect_id, why,
        )  # fmt: skip


def _replay(stored: dict[str, Any]) -> dict[str, Any]:
    return {
        "message_id": stored["messageId"],
        "outcome": Outcome(stored["outcome"]),
        "revision": stored.get("revision"),
        "payload": stored.get("payload"),
    }


def _attempt_wire(conn: Any, attempt: Any) -> dict[str, Any]:
    """A started attempt for its runner, with the settings it sees (``ctx.settings``)."""
    return {
        "attemptId": attempt.attempt_id,
        "nodeId": attempt.node_id,
        "visit": attempt.visit,
        "attemptNo": attempt.attempt_no,
        "tryNo": attempt.try_no,
        "settingsChange": attempt.settings_change,
        "settings": settings.of_change(conn, attempt.run_id, attempt.settings_change),
    }


def _signal_wire(conn: Any, signal: signals.Signal) -> dict[str, Any]:
    """A pending event for a runner: its data inline, or by reference past the limit."""
    return {
        "signalId": signal.signal_id,
        "name": signal.name,
        "seq": signal.seq,
        "data": None if signal.data_ref is not None else signal.data,
        "dataRef": None
        if signal.data_ref is None
        else values.reference(conn, signal.data_ref).to_json(),
    }


def _non_negative(payload: dict[str, Any], name: str) -> int:
    value = payload.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRunnerMessage(f"payload field {name!r} must be a non-negative integer")
    return value


def _optional_line(payload: dict[str, Any], name: str) -> str | None:
    """An optional text field as one safe, bounded line (an error class, a retry note)."""
    value = _optional_text(payload, name)
    return None if value is None else safe_message(value)


def _optional_text(payload: dict[str, Any], name: str) -> str | None:
    value = payload.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRunnerMessage(f"payload field {name!r} must be a string")
    return value


def _positive(payload: dict[str, Any], name: str) -> int:
    value = payload.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRunnerMessage(f"payload field {name!r} must be a positive integer")
    return value


def _wait_draft(payload: dict[str, Any], home: Path) -> InteractionDraft:
    """The request a ``node.wait`` asks for; a decision's records the seats its audience
    names (docs/channels.md), never anything else of the channel configuration."""
    kind = _field(payload, "kind", str)
    if kind not in ("checkpoint", "decision", "agent", "assistant"):
        raise BadRunnerMessage("payload field 'kind' must be checkpoint|decision|agent|assistant")
    for_person = payload.get("forPerson", False)
    if not isinstance(for_person, bool) or (for_person and kind != "checkpoint"):
        raise BadRunnerMessage("payload field 'forPerson' must be a boolean, on a checkpoint")
    request = payload.get("request")
    if kind == "decision" and isinstance(request, dict):
        audience = request.get("audience")
        if audience is not None and not (
            isinstance(audience, str) and AUDIENCE_PATTERN.fullmatch(audience)
        ):
            raise BadRunnerMessage("payload field 'request.audience' must be an audience name")
        request = {**request, "seats": list(channel_config.seats_for(home, audience))}
    return InteractionDraft(
        kind=kind,
        request=request if isinstance(request, dict) else {"value": request},
        timeout_ms=_optional_ms(payload, "timeoutMs"),
        choices=[str(c) for c in payload.get("choices") or []],
        timeout_choice=payload.get("timeoutChoice"),
        for_person=for_person,
    )


def _apply(db: Database, claim: Claim, message: RunnerMessage, runner_epoch: int) -> dict[str, Any]:
    """Commit one proposal (inside the caller's transaction); return the reply payload."""
    payload = message.payload
    expected = message.expected_revision
    match message.kind:
        case "node.start":
            started = lifecycle.start_node(
                db,
                claim,
                _field(payload, "nodeId", str),
                timeout_ms=_optional_ms(payload, "timeoutMs"),
                expected_revision=expected,
            )
            return _attempt_wire(db.conn, started.attempt)
        case "node.finish":
            return _apply_finish(db, claim, message)
        case "node.wait":
            draft = _wait_draft(payload, db.path.parent)
            _, request_id = lifecycle.wait(
                db, claim, _field(payload, "attemptId", str), draft, expected_revision=expected
            )
            return {"requestId": request_id}
        case "node.sleep" | "node.retry" | "node.await" | "signal.reject":
            return _apply_wait(db, claim, message)
        case "node.spawn":
            return _apply_spawn(db, claim, message)
        case "node.update" | "node.logs":
            _record_progress(db, claim, message.kind, payload)
            return {}
        case "signal.send":  # ctx.signal: a managed effect, sent once in this commit
            return _send_signal(db, claim, payload)
        case "value.publish":  # ctx.publish: fenced like node.finish, kept if it fails later
            kept = published.publish(
                db,
                claim,
                _field(payload, "attemptId", str),
                _field(payload, "key", str),
                payload.get("value"),
            )
            return {"key": kept.key, "version": kept.version}
        case "run.park":
            reason = ParkReason(_field(payload, "reason", str))
            if reason not in RUNNER_PARK_REASONS:
                raise BadRunnerMessage(f"a runner cannot park a run for {reason}")
            if reason is ParkReason.EFFECT_AMBIGUOUS and not any(
                kind == "manual" for _, kind in effects.applying(db.conn, claim.run_id)
            ):
                raise BadRunnerMessage("no manual effect of the run is applying")
            lifecycle.park(db, claim, reason, safe_message(str(payload.get("detail", ""))) or None)
            return {}
        case "effect.reserve":
            kind = _field(payload, "effectKind", str)
            if kind not in ("idempotent", "manual"):
                raise BadRunnerMessage("payload field 'effectKind' must be idempotent|manual")
            reservation, _ = reserve_effect(
                db,
                claim,
                attempt_id=_field(payload, "attemptId", str),
                effect_type=_field(payload, "effectType", str),
                effect_kind=kind,
                fingerprint=_field(payload, "fingerprint", str),
                expected_revision=expected,
            )
            return {
                "effectId": reservation.effect_id,
                "effectKey": reservation.effect_key,
                "status": reservation.status.value,
                "attemptNo": reservation.attempt_no,
                "result": reservation.result,
                "error": reservation.error,
            }
        case "effect.settle":
            status = EffectStatus(_field(payload, "status", str))
            settle_effect(
                db,
                claim,
                _field(payload, "effectId", str),
                status,
                result=payload.get("result"),
                error=payload.get("error"),
                receipt=payload.get("receipt"),
                expected_revision=expected,
            )
            return {}
        case "interaction.reject":
            interaction_writes.reject(
                db,
                claim,
                _field(payload, "submissionId", str),
                safe_message(str(_field(payload, "error", str))) or "rejected",
            )
            return {}
        case "process.register":
            runners.register_process(
                db,
                claim,
                runner_epoch,
                _positive(payload, "pid"),
                float(_field(payload, "processStart", (int, float))),
                str(_field(payload, "command", str)),
            )
            return {}
        case "process.ended":
            runners.end_process(db, runner_epoch, _positive(payload, "pid"))
            return {}
    raise BadRunnerMessage(f"unknown runner message kind {message.kind!r}")  # pragma: no cover


MAX_SIGNAL_BYTES = 256 * 1024
"""Largest canonical JSON of the data of an event a run sends (as ``run.signal``'s)."""

_SIGNAL_NAME = re.compile(SIGNAL_NAME_PATTERN)


def _send_signal(db: Database, claim: Claim, payload: dict[str, Any]) -> dict[str, Any]:
    """``signal.send`` (``ctx.signal``): the event, the sender's effect and its outcome in
    one commit (``store/sent_signals.py``)."""
    target = str(_field(payload, "runId", str))
    name = str(_field(payload, "name", str))
    key = str(_field(payload, "key", str))
    if not _SIGNAL_NAME.match(name):
        raise BadRunnerMessage(
            f"event name {name[:80]!r} is malformed: use 1-128 letters, digits and _.:- starting"
            " with a letter"
        )
    if not 1 <= len(key) <= 200 or not 1 <= len(target) <= 200:
        raise BadRunnerMessage("a signal's key and run id are 1-200 characters")
    data = payload.get("data")
    size = len(canonical_json(data))
    if size > MAX_SIGNAL_BYTES:
        raise BadRunnerMessage(
            f"the event's data is {size} bytes of JSON; the limit is {MAX_SIGNAL_BYTES}"
        )
    sent = sent_signals.send(
        db, claim, str(_field(payload, "attemptId", str)), target, name, data, key
    )
    return sent.to_json()


def _apply_finish(db: Database, claim: Claim, message: RunnerMessage) -> dict[str, Any]:
    """``node.finish``: settle the attempt and route; or, for a ``settings_route`` attempt
    whose settings changed since it started, nothing but its evaluation again."""
    payload = message.payload
    expected = message.expected_revision
    attempt_id = _field(payload, "attemptId", str)
    if payload.get("settingsRoute") is True and settings.stale_route(
        db.conn, claim.run_id, attempt_id
    ):
        # The settings changed since this settings_route attempt started: its route
        # is not committed; the runner evaluates it again with the new settings.
        change, document = settings.reevaluate(db, claim, attempt_id, expected_revision=expected)
        return {"reevaluate": {"settingsChange": change, "settings": document}}
    outcome = _ATTEMPT_OUTCOMES.get(str(payload.get("outcome")))
    if outcome is None:
        raise BadRunnerMessage("payload field 'outcome' must be completed|failed|timed_out")
    note = payload.get("message")
    message_pair = None
    if note is not None:
        if not isinstance(note, dict) or note.get("kind") not in ("progress", "final"):
            raise BadRunnerMessage("payload field 'message' must have kind progress|final")
        audience = note.get("audience")
        if audience is not None and not (
            isinstance(audience, str) and AUDIENCE_PATTERN.fullmatch(audience)
        ):
            raise BadRunnerMessage("payload field 'message.audience' must be an audience name")
        message_pair = (str(note["kind"]), note.get("body"), audience)
    finished = lifecycle.finish_node(
        db,
        claim,
        _field(payload, "attemptId", str),
        outcome,
        _next_step(payload),
        output=payload.get("output"),
        error=payload.get("error"),
        expected_revision=expected,
        start_next=bool(payload.get("startNext", False)),
        next_timeout_ms=_optional_ms(payload, "timeoutMs"),
        message=message_pair,
        submission_id=_optional_text(payload, "submissionId"),
        signal_id=_optional_text(payload, "signalId"),
        error_class=_optional_line(payload, "errorClass"),
        retry_note=_optional_line(payload, "retryNote"),
    )
    return (
        {}
        if finished.next_attempt is None
        else {"nextAttempt": _attempt_wire(db.conn, finished.next_attempt)}
    )


def _apply_wait(db: Database, claim: Claim, message: RunnerMessage) -> dict[str, Any]:
    """Commit a durable-wait proposal: a sleep, a retry, a wait for an event, or the
    refusal of an event by the node's validate (``store/wait_steps.py``)."""
    payload = message.payload
    expected = message.expected_revision
    match message.kind:
        case "node.sleep":
            slept = lifecycle.sleep(
                db,
                claim,
                _field(payload, "attemptId", str),
                delay_ms=_optional_ms(payload, "delayMs"),
                until_ms=_optional_ms(payload, "untilMs"),
                expected_revision=expected,
            )
            return {"waited": slept.waited, "until": slept.until, "lateMs": slept.late_ms}
        case "node.retry":
            outcome = _ATTEMPT_OUTCOMES.get(str(payload.get("outcome")))
            if outcome not in (AttemptStatus.FAILED, AttemptStatus.TIMED_OUT):
                raise BadRunnerMessage("payload field 'outcome' must be failed|timed_out")
            delay = _optional_ms(payload, "delayMs")
            retried = lifecycle.retry(
                db,
                claim,
                _field(payload, "attemptId", str),
                outcome,
                safe_message(str(payload.get("error") or "failed")),
                delay_ms=delay or 0,
                exhausted=bool(payload.get("exhausted", False)),
                next_timeout_ms=_optional_ms(payload, "timeoutMs"),
                expected_revision=expected,
                error_class=_optional_line(payload, "errorClass"),
            )
            return {
                "nextAttempt": None
                if retried.next_attempt is None
                else _attempt_wire(db.conn, retried.next_attempt),
                "dueAt": retried.due_at,
                "parked": retried.parked,
            }
        case "node.await":
            awaited = lifecycle.await_event(
                db,
                claim,
                _field(payload, "attemptId", str),
                _field(payload, "event", str),
                timeout_ms=_optional_ms(payload, "timeoutMs"),
                validates=bool(payload.get("validates", False)),
                expected_revision=expected,
            )
            return {
                "waited": awaited.waited,
                "timedOut": awaited.timed_out,
                "signal": None if awaited.signal is None else _signal_wire(db.conn, awaited.signal),
            }
        case "signal.reject":
            signals.reject(
                db,
                claim,
                _field(payload, "signalId", str),
                safe_message(str(_field(payload, "error", str))) or "rejected",
            )
            return {}
    raise BadRunnerMessage(f"unknown runner message kind {message.kind!r}")  # pragma: no cover


def _apply_spawn(db: Database, claim: Claim, message: RunnerMessage) -> dict[str, Any]:
    """``node.spawn``: the join of a subworkflow or fan_out node and its first children."""
    payload = message.payload
    child = _field(payload, "child", dict)
    source = _field(child, "source", dict)
    inputs = _field(payload, "inputs", list)
    kind = _field(payload, "kind", str)
    if kind not in ("subworkflow", "fan_out"):
        raise BadRunnerMessage("payload field 'kind' must be subworkflow|fan_out")
    source_kind = _field(source, "kind", str)
    if source_kind not in ("file", "builtin"):
        raise BadRunnerMessage("payload field 'child.source.kind' must be file|builtin")
    workflow = ChildWorkflow(
        workflow_name=_field(child, "workflowName", str),
        definition=_field(child, "definition", dict),
        definition_digest=_field(child, "definitionDigest", str),
        source=SourceRecord(
            kind=source_kind,
            ref=_field(source, "ref", str),
            revision=_field(source, "revision", str),
            project_dir=_optional_text(source, "projectDir"),
            mounted={str(k): str(v) for k, v in dict(source.get("mounted") or {}).items()},
        ),
    )
    if fingerprint(workflow.definition) != workflow.definition_digest:
        raise BadRunnerMessage("the child's definition does not match its digest")
    revision = lifecycle.spawn(
        db,
        claim,
        _field(payload, "attemptId", str),
        kind=kind,
        child=workflow,
        inputs=list(inputs),
        concurrency=_positive(payload, "concurrency"),
        fail_fast=bool(payload.get("failFast", False)),
        detached=bool(payload.get("detached", False)),
        expected_revision=message.expected_revision,
        rate=_rate(payload),
    )
    return {"waited": True, "revision": revision}


def _rate(payload: dict[str, Any]) -> tuple[int, int] | None:
    """A ``fan_out``'s ``rate`` (``{count, periodMs}``) as ``(starts, period ms)``, or None."""
    rate = payload.get("rate")
    if rate is None:
        return None
    if not isinstance(rate, dict):
        raise BadRunnerMessage("payload field 'rate' must be {count, periodMs}")
    return _positive(rate, "count"), _positive(rate, "periodMs")


def _record_progress(db: Database, claim: Claim, kind: str, payload: dict[str, Any]) -> None:
    """``node.update`` (a ``publish_update`` value: the attempt's latest progress, history
    keeping a bounded sample, ``store/progress.py``; never a message for the session and
    never the node's output) or ``node.logs`` (what the attempt printed, logged and ran,
    and its traceback) of the running attempt."""
    attempt_id = _field(payload, "attemptId", str)
    if kind == "node.update":
        published = payload.get("published")
        if published is not None and (
            not isinstance(published, int) or isinstance(published, bool) or published < 1
        ):
            raise BadRunnerMessage("payload field 'published' must be a positive integer")
        progress.record(db, claim, attempt_id, payload.get("body"), published)
        return
    attempt_logs.record(
        db,
        claim,
        attempt_id,
        str(_field(payload, "text", str)),
        _non_negative(payload, "bytes"),
        _optional_text(payload, "traceback"),
    )
