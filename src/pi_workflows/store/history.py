"""A run's event history as people read it: paged, with the node, who acted, and a detail.

Owns no table; reads ``events`` (with the attempts, requests, effects and receipts they
name). Each entry is ``{revision, at, type, runStatus, generation, nodeId, actor, detail,
data}``: ``nodeId`` comes from the event's node, attempt, request or effect; ``actor`` is
``client:<client id>`` for a command whose receipt committed with the event (``client``
once that receipt was pruned), ``runner`` for a proposal of the run's runner, ``session``
for what the origin session reported, and ``server`` for the scheduler, deadlines,
recovery and repair; ``detail`` is one short line; ``data`` is the event's own JSON when it
is small (else ``{"omittedBytes": n}``).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from pi_workflows.store import jsoncol
from pi_workflows.store.runs import read_run

MAX_DATA_CHARS: Final = 1024
"""Event data larger than this (canonical JSON) is summarised as ``omittedBytes``."""

MAX_DETAIL_CHARS: Final = 100

CLIENT_EVENTS: Final = frozenset(
    {
        "run.reserved",
        "run.paused",
        "run.resumed",
        "run.cancelled",
        "run.cleanup_started",
        "run.restarted",
        "effect.resolved",
        "interaction.submitted",
        "interaction.answered",
        "signal.received",
        "signal.woke",
    }
)
RUNNER_EVENTS: Final = frozenset(
    {
        "node.started",
        "node.finished",
        "node.update",
        "node.logs",
        "value.published",
        "run.completed",
        "run.failed",
        "run.timed_out",
        "run.waiting",
        "effect.reserved",
        "effect.settled",
        "interaction.rejected",
        "node.retried",
        "signal.rejected",
    }
)
SESSION_EVENTS: Final = frozenset({"message.sent", "message.resumed"})
_RUNNER_PARKS: Final = frozenset(
    {"workflowSourceChanged", "workflowLoadFailed", "effectAmbiguous", "retriesExhausted"}
)


def page(
    conn: sqlite3.Connection, run_id: str, *, after: int = 0, limit: int = 200
) -> dict[str, Any]:
    """``{runId, events, next}``: up to ``limit`` events after revision ``after``, oldest
    first; ``next`` is the revision to ask after for more, or None at the end."""
    read_run(conn, run_id)
    rows = conn.execute(
        "SELECT revision, at, type, run_status, generation, data_json FROM events"
        " WHERE run_id = ? AND revision > ? ORDER BY revision LIMIT ?",
        (run_id, after, limit + 1),
    ).fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    datas = [jsoncol.loads(row[5]) or {} for row in rows]
    nodes = _node_lookup(conn, run_id, datas)
    clients = _receipt_clients(conn, run_id, [row[1] for row in rows])
    events = []
    for row, data in zip(rows, datas, strict=True):
        event_type = str(row[2])
        events.append(
            {
                "revision": row[0],
                "at": row[1],
                "type": event_type,
                "runStatus": row[3],
                "generation": row[4],
                "nodeId": _node_of(data, nodes),
                "actor": _actor(event_type, data, clients.get(row[1])),
                "detail": _detail(event_type, data),
                "data": _small(data, row[5]),
            }
        )
    return {"runId": run_id, "events": events, "next": rows[-1][0] if more else None}


def _small(data: Any, text: str) -> Any:
    return data if len(text) <= MAX_DATA_CHARS else {"omittedBytes": len(text.encode())}


def _node_lookup(
    conn: sqlite3.Connection, run_id: str, datas: list[Any]
) -> dict[tuple[str, str], str]:
    """``(field, id) -> node id`` for every attempt, request and effect the events name."""
    wanted: dict[str, set[str]] = {"attemptId": set(), "requestId": set(), "effectId": set()}
    for data in datas:
        if isinstance(data, dict):
            for name, ids in wanted.items():
                if isinstance(data.get(name), str):
                    ids.add(data[name])
    found: dict[tuple[str, str], str] = {}
    queries = {
        "attemptId": "SELECT attempt_id, node_id FROM node_attempts WHERE run_id = ?",
        "requestId": "SELECT request_id, node_id FROM interactive_requests WHERE run_id = ?",
        "effectId": "SELECT effect_id, node_id FROM effects WHERE run_id = ?",
    }
    for name, ids in wanted.items():
        if ids:
            for key, node in conn.execute(queries[name], (run_id,)).fetchall():
                if key in ids:
                    found[(name, key)] = node
    return found


def _node_of(data: Any, nodes: dict[tuple[str, str], str]) -> str | None:
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("nodeId"), str) and data["nodeId"]:
        return str(data["nodeId"])
    for name in ("attemptId", "requestId", "effectId"):
        value = data.get(name)
        if isinstance(value, str) and (name, value) in nodes:
            return nodes[(name, value)]
    return None


def _receipt_clients(conn: sqlite3.Connection, run_id: str, times: list[int]) -> dict[int, str]:
    """``commit time -> client id`` of the run's command receipts at those times."""
    if not times:
        return {}
    rows = conn.execute(
        "SELECT created_at, client_id FROM server_commands WHERE run_id = ?"
        " AND created_at BETWEEN ? AND ?",
        (run_id, min(times), max(times)),
    ).fetchall()
    return {int(at): str(client) for at, client in rows}


def _actor(event_type: str, data: Any, client: str | None) -> str:
    reason = data.get("reason") if isinstance(data, dict) else None
    if event_type == "run.parked":
        if reason in _RUNNER_PARKS:
            return "runner"
        if reason != "userPaused":
            return "server"
        return f"client:{client}" if client else "client"
    cleanup = data.get("cleanup") if isinstance(data, dict) else None
    if isinstance(cleanup, dict) and cleanup.get("status") != "abandoned":
        # The end of a cleanup: its runner's outcome, or the server giving it up.
        return "server" if cleanup.get("by") == "server" else "runner"
    if event_type in CLIENT_EVENTS:
        return f"client:{client}" if client else "client"
    if event_type in RUNNER_EVENTS:
        return "runner"
    if event_type in SESSION_EVENTS:
        return "session"
    return "server"


def _detail(event_type: str, data: Any) -> str:
    """One short line saying what the event changed."""
    if not isinstance(data, dict):
        return ""
    text = _known_detail(event_type, data)
    if text is None:
        shown = {k: v for k, v in data.items() if k not in ("attemptId", "nodeId")}
        text = jsoncol.dumps(shown) if shown else ""
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"


def _waiting_detail(data: dict[str, Any]) -> str:
    match data.get("kind"):
        case "sleep":
            return "sleeps"
        case "event":
            return f"waits for event {data.get('event')!r}"
        case "children":
            count = data.get("children")
            return f"started {count} child run(s) of {data.get('workflow')} and waits for them"
    return f"waits for a {data.get('kind')} answer"


def _raised(data: dict[str, Any]) -> str:
    """`` (raised Name)`` for an event that records the class of the exception that failed
    an attempt (its last dotted part: the detail is short; ``data`` keeps the full name)."""
    named = data.get("errorClass")
    return f" (raised {named.rsplit('.', 1)[-1]})" if isinstance(named, str) and named else ""


def _known_detail(event_type: str, data: dict[str, Any]) -> str | None:
    match event_type:
        case "run.reserved":
            return "run created"
        case "run.claimed":
            return "claimed to run"
        case "run.controlClaimed":
            return "control claim taken"
        case "run.recovered":
            return "recovered from its last durable step"
        case "run.resumed":
            return "queued again"
        case "run.restarted":
            return "restarted from the start"
        case "node.started":
            return "started"
        case "node.finished":
            return f"{data.get('outcome')}{_raised(data)}, next {data.get('next')}"
        case "run.cleanup_started":
            return f"{data.get('reason')}; cleanup node {data.get('nodeId')} runs"
        case "run.cancelled" | "run.timed_out" if data.get("reason"):
            return str(data["reason"]) + _cleanup_detail(data.get("cleanup"))
        case "run.completed" | "run.failed" | "run.timed_out":
            ended = event_type.split(".", 1)[1]
            return f"node {data.get('outcome', '-')}{_raised(data)}; run {ended}"
        case "run.waiting":
            return _waiting_detail(data)
        case "node.retried":
            delay = data.get("delayMs") or 0
            when = "at once" if not delay else f"in {delay / 1000:g} s"
            tried = f" (try {data['tryNo']})" if isinstance(data.get("tryNo"), int) else ""
            return f"{data.get('outcome')}{_raised(data)}{tried}; tried again {when}"
        case "wait.fired":
            what = {
                "sleep": "woke",
                "retry": "retry due",
                "event": "event wait timed out",
                "children": "the rate lets the next child run(s) start",
            }
            late = data.get("lateMs")
            return f"{what.get(str(data.get('kind')), 'fired')}" + (
                f", {late} ms late" if isinstance(late, int) and late else ""
            )
        case "signal.received" | "signal.woke":
            woke = "; the run continues" if event_type == "signal.woke" else ", kept"
            return f"event {data.get('name')!r} #{data.get('seq')}{woke}"
        case "signal.rejected":
            return f"event refused: {data.get('error')}"
        case "child.ended" | "children.joined":
            joined = "; every child ended" if event_type == "children.joined" else ""
            return (
                f"child {data.get('item')} ({data.get('childRunId')}) {data.get('status')},"
                f" {data.get('ended')} of {data.get('total')} ended{joined}"
            )
        case "children.refilled":
            return "children held back while a run above was paused started"
        case "run.parked" | "run.paused":
            return f"reason {data['reason']}" if data.get("reason") else "paused"
        case "run.cancelled":
            return "cancelled"
        case "effect.reserved":
            return f"effect {data.get('effectType')} reserved"
        case "effect.settled":
            return f"effect {data.get('status')}"
        case "effect.resolved":
            return f"effect resolved as {data.get('resolution')}"
        case "interaction.answered":
            choice = data.get("choice")
            return "answered" if choice is None else f"answered: {choice}"
        case "node.update":  # a sample of the attempt's progress values (store/progress.py)
            body = data.get("body")
            shown = body if isinstance(body, str) else jsoncol.dumps(body)
            return f"progress {data.get('update', 1)}: " + " ".join(shown[:200].split())
        case "value.published":  # ctx.publish (store/published.py); the value is not here
            return f"published {data.get('key')!r} ({data.get('bytes', 0)} bytes)"
        case "node.logs":
            extra = " and a traceback" if data.get("traceback") else ""
            return f"{data.get('bytes', 0)} bytes of output{extra}"
        case "state.repaired":
            return "repaired: " + ", ".join(str(p) for p in data.get("problems", []))
        case "message.sent":
            return f"{len(data.get('messages', []))} message(s) shown in the session"
    return None


def _cleanup_detail(cleanup: object) -> str:
    """``; cleanup NODE completed`` (or failed, timed out, abandoned: why) for a run's end."""
    if not isinstance(cleanup, dict):
        return ""
    why = f": {cleanup['error']}" if cleanup.get("error") else ""
    return f"; cleanup {cleanup.get('nodeId')} {cleanup.get('status')}{why}"
