"""Spans and metric points from committed events: the trace of a run, rebuilt from its rows.

Runs in the server's exporter thread, on a reader connection inside one snapshot; never
imports OpenTelemetry (it fills ``otel.records``) and never writes. The rules:

- A node attempt's span is built when the event that settled it (``finished_revision``) is
  read, from the attempt's row: so only a committed settlement produces one, and a crash
  after that commit cannot lose it (the events stay until the cursor passes them).
- An attempt a crash cut short is settled ``interrupted`` by the recovery that follows; its
  span ends at that recovery, with an error status that says so.
- A run's span (one per round) is built at the event that took it to a terminal status;
  it starts at the run's first event (or its round's ``run.restarted``) and carries the
  parks, resumes, recoveries and runner claims between as span events.
- Ids are ``otel.ids``: the same rows always give the same spans.

Never exported: claim tokens (no row read here holds one), and payloads (inputs, outputs,
answers) unless ``PI_WORKFLOWS_OTEL_PAYLOADS=true``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from pi_workflows.otel import ids
from pi_workflows.otel.records import (
    AttributeValue,
    Batch,
    Instrument,
    Kind,
    MetricPoint,
    SpanEvent,
    SpanRecord,
    Status,
)
from pi_workflows.otel.settings import PAYLOAD_LIMIT
from pi_workflows.store import telemetry
from pi_workflows.store.telemetry import AttemptFacts, EventRow, RequestFacts, RunFacts

TERMINAL = frozenset({"completed", "failed", "timed_out", "cancelled"})
RUN_SPAN_EVENTS = frozenset(
    {
        "run.claimed", "run.parked", "run.paused", "run.resumed", "run.recovered",
        "run.waiting", "node.timedOut", "interaction.timedOut", "wait.fired", "signal.woke",
        "children.joined", "state.repaired",
    }
)  # fmt: skip
"""Events of a run that become span events on its run span."""
MAX_SPAN_EVENTS = 128
TEXT_LIMIT = 1024
"""Characters of an error message in an attribute."""
QUEUE_WALK = 64
"""How far back a claim looks for the event that queued its run (queue wait)."""
PARKED_MARK = "parked ("
"""How an attempt a pause or a server stop interrupted begins its error (store.attempts)."""
AGENT_NAME = "pi"
WAITED_FOR = {"agent": "model", "assistant": "model", "decision": "person", "checkpoint": "answer"}
EVENT_DATA_KEYS = ("reason", "generation", "kind", "attemptId")
"""The event data kept on span events (ids and reasons; never a payload)."""


def _cut(text: str, limit: int = TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compact(attrs: dict[str, AttributeValue | None]) -> dict[str, AttributeValue]:
    return {k: v for k, v in attrs.items() if v is not None}


class Builder:
    """Builds one ``Batch`` from events read in one snapshot of ``conn``."""

    def __init__(self, conn: sqlite3.Connection, *, payloads: bool = False) -> None:
        self.conn = conn
        self.payloads = payloads
        self._definitions: dict[str, dict[str, dict[str, Any]]] = {}

    def build(self, events: list[EventRow], last_event_id: int) -> Batch:
        """Spans and points for ``events`` (in commit order), and the gauges now."""
        spans: list[SpanRecord] = []
        points: list[MetricPoint] = []
        by_run: dict[str, list[EventRow]] = {}
        for event in events:
            by_run.setdefault(event.run_id, []).append(event)
        for run_id, run_events in by_run.items():
            facts = telemetry.run_facts(self.conn, run_id)
            if facts is None:
                continue  # removed by retention before it was exported
            self._run(facts, run_events, spans, points)
        now = telemetry.gauges(self.conn)
        return Batch(
            last_event_id=last_event_id,
            spans=tuple(spans),
            points=tuple(points),
            runners_live=now.runners_live,
            parked=now.parked,
        )

    # --- one run's events ---------------------------------------------------------------

    def _nodes(self, digest: str) -> dict[str, dict[str, Any]]:
        if digest not in self._definitions:
            self._definitions[digest] = telemetry.definition_nodes(self.conn, digest)
        return self._definitions[digest]

    def _run(
        self,
        facts: RunFacts,
        events: list[EventRow],
        spans: list[SpanRecord],
        points: list[MetricPoint],
    ) -> None:
        nodes = self._nodes(facts.definition_digest)
        trace = ids.trace_id(facts.root_run_id or facts.run_id)
        by_revision = {event.revision: event for event in events}
        workflow = {"pi_workflows.workflow.name": facts.workflow_name}
        first, last = events[0].revision, events[-1].revision
        for attempt in telemetry.settled_attempts(self.conn, facts.run_id, first, last):
            node = nodes.get(attempt.node_id, {})
            settling = by_revision.get(attempt.finished_revision)
            spans.extend(self._attempt_spans(facts, node, trace, attempt, settling))
            points.append(
                MetricPoint(
                    Instrument.NODE_DURATION,
                    max(0, attempt.finished_at - attempt.started_at) / 1000,
                    {**workflow, "pi_workflows.node.kind": str(node.get("kind", "unknown")),
                     "pi_workflows.node.outcome": attempt.status},
                )
            )  # fmt: skip
        previous = telemetry.event_at(self.conn, facts.run_id, first - 1)
        before = None if previous is None else previous.run_status
        for event in events:
            self._event_points(facts, event, points)
            if event.type in ("run.reserved", "run.restarted"):
                points.append(MetricPoint(Instrument.RUNS_STARTED, 1, workflow))
            if event.type == "run.restarted" and before not in TERMINAL:
                # A restart of a paused or waiting run ends its round here: that round's
                # span ends with it (the next round's links to it).
                spans.append(self._run_span(facts, trace, event, restarted=True))
            if event.run_status in TERMINAL and before not in TERMINAL:
                spans.append(self._run_span(facts, trace, event))
                points.append(
                    MetricPoint(
                        Instrument.RUNS_FINISHED, 1,
                        {**workflow, "pi_workflows.run.status": event.run_status},
                    )
                )  # fmt: skip
            if event.type == "run.claimed":
                waited = self._queue_wait(facts.run_id, event)
                if waited is not None:
                    points.append(MetricPoint(Instrument.QUEUE_WAIT, waited, workflow))
            before = event.run_status

    def _event_points(self, facts: RunFacts, event: EventRow, points: list[MetricPoint]) -> None:
        workflow = facts.workflow_name
        match event.type:
            case "effect.settled" | "effect.resolved":
                found = telemetry.effect_kind(self.conn, str(event.data.get("effectId")))
                outcome = event.data.get("status") or event.data.get("resolution")
                if event.type == "effect.resolved":
                    outcome = f"resolved:{outcome}"
                kind = found[0] if found else "unknown"
                points.append(
                    MetricPoint(
                        Instrument.EFFECT_OUTCOMES, 1,
                        {"pi_workflows.workflow.name": workflow,
                         "pi_workflows.effect.kind": kind,
                         "pi_workflows.effect.outcome": str(outcome)},
                    )
                )  # fmt: skip
            case "run.parked" if event.data.get("reason") == "effectAmbiguous":
                points.append(
                    MetricPoint(
                        Instrument.EFFECT_OUTCOMES, 1,
                        {"pi_workflows.workflow.name": workflow,
                         "pi_workflows.effect.kind": "manual",
                         "pi_workflows.effect.outcome": "ambiguous"},
                    )
                )  # fmt: skip
            case "interaction.rejected" | "signal.rejected":
                if event.type == "signal.rejected":
                    kind = "event"
                else:
                    submission = str(event.data.get("submissionId"))
                    kind = telemetry.submission_kind(self.conn, submission) or "unknown"
                points.append(
                    MetricPoint(
                        Instrument.VALIDATION_REJECTIONS, 1,
                        {"pi_workflows.workflow.name": workflow,
                         "pi_workflows.interaction.kind": kind},
                    )
                )  # fmt: skip
            case _:
                pass

    def _queue_wait(self, run_id: str, claimed: EventRow) -> float | None:
        """Seconds between the run becoming queued and this claim of it."""
        queued_at: int | None = None
        revision = claimed.revision - 1
        for _ in range(QUEUE_WALK):
            event = telemetry.event_at(self.conn, run_id, revision)
            if event is None or event.run_status != "queued":
                break
            queued_at = event.at
            revision -= 1
        return None if queued_at is None else max(0, claimed.at - queued_at) / 1000

    # --- spans ---------------------------------------------------------------------------

    def _run_attrs(self, facts: RunFacts) -> dict[str, AttributeValue | None]:
        return {
            "pi_workflows.workflow.name": facts.workflow_name,
            "pi_workflows.run.id": facts.run_id,
        }

    def _run_span(
        self, facts: RunFacts, trace: int, ended: EventRow, *, restarted: bool = False
    ) -> SpanRecord:
        """The span of the round that ``ended`` ended: by reaching a terminal status, or
        (``restarted``) by a restart of the run before it ended."""
        round_no = telemetry.restarts_before(self.conn, facts.run_id, ended.revision)
        start = telemetry.round_start(self.conn, facts.run_id, round_no) or (1, facts.created_at)
        history = telemetry.run_events(self.conn, facts.run_id, start[0], ended.revision)
        span_events: list[SpanEvent] = []
        counts = {"run.claimed": 0, "run.parked": 0, "run.paused": 0, "run.recovered": 0}
        for event in history:
            if event.type in counts:
                counts[event.type] += 1
            if event.type in RUN_SPAN_EVENTS and len(span_events) < MAX_SPAN_EVENTS:
                data = {
                    f"pi_workflows.{key}": value
                    for key, value in event.data.items()
                    if key in EVENT_DATA_KEYS and isinstance(value, str | int)
                }
                span_events.append(SpanEvent(event.type, event.at, data))
        status_now = "restarted" if restarted else ended.run_status
        same_round = facts.round == round_no and facts.status == status_now
        error = facts.error if same_round and facts.error else None
        attrs = self._run_attrs(facts) | {
            "pi_workflows.run.status": status_now,
            "pi_workflows.run.round": round_no,
            "pi_workflows.run.steps": facts.step_count if same_round else None,
            "pi_workflows.run.generations": counts["run.claimed"],
            "pi_workflows.run.parks": counts["run.parked"] + counts["run.paused"],
            "pi_workflows.run.recoveries": counts["run.recovered"],
            "pi_workflows.run.parent_id": facts.parent_run_id,
            "pi_workflows.run.root_id": facts.root_run_id,
            "pi_workflows.run.detached": facts.detached,
            "pi_workflows.run.schedule_id": facts.schedule_id,
            "pi_workflows.run.error": _cut(error) if error else None,
        }
        if self.payloads:
            attrs["pi_workflows.run.input"] = self._payload(facts.input_json)
            if same_round:
                attrs["pi_workflows.run.output"] = self._payload(facts.output_json)
        status = {"completed": Status.OK, "cancelled": Status.UNSET, "restarted": Status.UNSET}.get(
            status_now, Status.ERROR
        )
        parent = (
            None
            if facts.parent_attempt_id is None
            else ids.attempt_span_id(facts.parent_attempt_id)
        )
        links = () if round_no == 0 else ((trace, ids.run_span_id(facts.run_id, round_no - 1)),)
        return SpanRecord(
            name=f"run {facts.workflow_name}",
            trace_id=trace,
            span_id=ids.run_span_id(facts.run_id, round_no),
            parent_span_id=parent,
            start_ms=start[1],
            end_ms=max(start[1], ended.at),
            attributes=_compact(attrs),
            status=status,
            status_message=(_cut(error) if error else status_now)
            if status is Status.ERROR
            else None,
            events=tuple(span_events),
            links=links,
        )

    def _payload(self, text: str | None) -> str | None:
        return None if text is None else _cut(text, PAYLOAD_LIMIT)

    def _attempt_spans(
        self,
        facts: RunFacts,
        node: dict[str, Any],
        trace: int,
        attempt: AttemptFacts,
        settling: EventRow | None,
    ) -> Iterable[SpanRecord]:
        kind = str(node.get("kind", "unknown"))
        span_id = ids.attempt_span_id(attempt.attempt_id)
        attrs = self._run_attrs(facts) | {
            "pi_workflows.node.id": attempt.node_id,
            "pi_workflows.node.kind": kind,
            "pi_workflows.node.visit": attempt.visit,
            "pi_workflows.node.attempt": attempt.attempt_no,
            "pi_workflows.node.try": attempt.try_no,
            "pi_workflows.node.generation": attempt.generation,
            "pi_workflows.node.outcome": attempt.status,
            "pi_workflows.node.retry_outcome": attempt.retry_outcome,
            "pi_workflows.node.attempt_id": attempt.attempt_id,
            "pi_workflows.node.settled_by": None if settling is None else settling.type,
            "pi_workflows.node.error": _cut(attempt.error) if attempt.error else None,
        }
        park_reason = None
        if attempt.error and attempt.error.startswith(PARKED_MARK):
            park_reason = attempt.error[len(PARKED_MARK) :].rstrip(")")
        elif settling is not None and settling.type in ("run.parked", "run.paused"):
            park_reason = str(settling.data.get("reason") or "") or None
        attrs["pi_workflows.node.park_reason"] = park_reason
        effects = telemetry.attempt_effects(self.conn, attempt.attempt_id)
        if effects:
            effect = effects[0]
            attrs |= {
                "pi_workflows.effect.kind": effect.effect_kind,
                "pi_workflows.effect.type": effect.effect_type,
                "pi_workflows.effect.key": effect.effect_key,
                "pi_workflows.effect.status": effect.status,
                "pi_workflows.effect.attempts": effect.attempt_count,
                "pi_workflows.effect.count": len(effects),
            }
        if self.payloads:
            attrs["pi_workflows.node.output"] = self._payload(attempt.output_json)
        children: list[SpanRecord] = []
        for request in telemetry.attempt_requests(self.conn, attempt.attempt_id):
            attrs |= self._request_attrs(request, attempt)
            if request.kind in ("agent", "assistant"):
                children.append(self._agent_span(facts, trace, span_id, attempt, request))
        status, message = _attempt_status(attempt, None if settling is None else settling.type)
        yield SpanRecord(
            name=f"node {attempt.node_id}",
            trace_id=trace,
            span_id=span_id,
            parent_span_id=ids.run_span_id(facts.run_id, attempt.round),
            start_ms=attempt.started_at,
            end_ms=max(attempt.started_at, attempt.finished_at),
            attributes=_compact(attrs),
            status=status,
            status_message=message,
        )
        yield from children

    def _request_attrs(
        self, request: RequestFacts, attempt: AttemptFacts
    ) -> dict[str, AttributeValue | None]:
        answered = request.accepted_at or request.settled_at or attempt.finished_at
        attrs: dict[str, AttributeValue | None] = {
            "pi_workflows.interaction.id": request.request_id,
            "pi_workflows.interaction.kind": request.kind,
            "pi_workflows.interaction.status": request.status,
            "pi_workflows.interaction.waited_for": WAITED_FOR.get(request.kind, "answer"),
            "pi_workflows.interaction.wait_ms": max(0, answered - request.created_at),
            "pi_workflows.interaction.submissions": request.submissions,
            "pi_workflows.interaction.rejections": request.rejections,
        }
        if request.kind in ("agent", "assistant"):
            attrs["pi_workflows.agent.turns"] = len(request.turns)
            attrs["pi_workflows.agent.model_ms"] = _model_ms(request)
        if self.payloads:
            attrs["pi_workflows.interaction.answer"] = self._payload(request.answer_json)
        return attrs

    def _agent_span(
        self,
        facts: RunFacts,
        trace: int,
        parent: int,
        attempt: AttemptFacts,
        request: RequestFacts,
    ) -> SpanRecord:
        """The wait for the model of an agent step, in the GenAI semantic conventions."""
        end = request.accepted_at or request.settled_at or attempt.finished_at
        reasons = [turn.stop_reason for turn in request.turns if turn.stop_reason]
        failed = request.status in ("timed_out", "failed", "cancelled")
        attrs: dict[str, AttributeValue | None] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
            "gen_ai.conversation.id": request.origin_session,
            "gen_ai.response.finish_reasons": reasons or None,
            "error.type": request.status if failed else None,
            "pi_workflows.workflow.name": facts.workflow_name,
            "pi_workflows.run.id": facts.run_id,
            "pi_workflows.node.id": attempt.node_id,
            "pi_workflows.interaction.id": request.request_id,
            "pi_workflows.interaction.status": request.status,
            "pi_workflows.agent.detached": facts.detached,
            "pi_workflows.agent.turns": len(request.turns),
            "pi_workflows.agent.reminders": request.reminders,
            "pi_workflows.agent.model_ms": _model_ms(request),
        }
        events = tuple(
            SpanEvent(
                "pi_workflows.model_turn",
                turn.started_at,
                _compact(
                    {
                        "pi_workflows.turn.ms": None
                        if turn.ended_at is None
                        else max(0, turn.ended_at - turn.started_at),
                        "pi_workflows.turn.stop_reason": turn.stop_reason,
                    }
                ),
            )
            for turn in request.turns[:MAX_SPAN_EVENTS]
        )
        return SpanRecord(
            name=f"invoke_agent {AGENT_NAME}",
            trace_id=trace,
            span_id=ids.request_span_id(request.request_id),
            parent_span_id=parent,
            start_ms=request.created_at,
            end_ms=max(request.created_at, end),
            attributes=_compact(attrs),
            status=Status.ERROR if failed else Status.UNSET,
            status_message=request.status if failed else None,
            kind=Kind.CLIENT,
            events=events,
        )


def _model_ms(request: RequestFacts) -> int:
    return sum(max(0, turn.ended_at - turn.started_at) for turn in request.turns if turn.ended_at)


def _attempt_status(attempt: AttemptFacts, settled_by: str | None) -> tuple[Status, str | None]:
    """A node span's status and, for an error, its one-line description. An interrupted
    attempt is an error unless a pause, a server stop or a restart interrupted it: then
    its runner did not die under it."""
    match attempt.status:
        case "completed":
            return Status.OK, None
        case "failed" | "timed_out":
            return Status.ERROR, _cut(attempt.error or attempt.status)
        case "retried" | "exhausted":
            return Status.ERROR, _cut(
                f"{attempt.retry_outcome or 'failed'} ({attempt.status}): {attempt.error or ''}"
            )
        case "interrupted" if settled_by != "run.restarted" and not (
            attempt.error or ""
        ).startswith(PARKED_MARK):
            return Status.ERROR, (
                "interrupted: its runner or the server ended before the node committed;"
                " ended at the recovery that followed"
            )
        case _:
            return Status.UNSET, None
