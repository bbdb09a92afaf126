"""Workflow messages: what the origin session must add, and the text it presents.

Owns ``workflow_messages``. A message is recorded in the same transaction as its source
fact (a request opening, a notify node's settled attempt, the run's terminal transition)
and is unique per (run, source key), so a replayed write can never record it twice. Kinds:
``step`` (an agent, assistant-message or checkpoint request, for the model), ``decision``
(a human decision, for the person only), ``notification`` (a notify node) and ``terminal``
(the run ended). A message is ``pending`` until the session reports the entry that holds
it (``sent``); a step whose request settles first is ``cancelled``; one presented again
supersedes the earlier one. Functions here run inside a run write's transaction.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from pi_workflows.protocol import REQUEST_ID_PLACEHOLDER
from pi_workflows.store import jsoncol
from pi_workflows.store.database import Transaction
from pi_workflows.store.ids import new_id

TOOL = "workflow"
"""The model-facing tool of the Pi extension (``engine.contract.WORKFLOW_TOOL``)."""


def record(
    tx: Transaction,
    run_id: str,
    source_key: str,
    kind: str,
    body: Any,
    origin_session: str | None,
    *,
    request_id: str | None = None,
    resumed: bool = False,
) -> str | None:
    """Record one pending message (idempotent per source); its id, or None if it existed."""
    message_id = new_id("msg")
    cursor = tx.conn.execute(
        "INSERT OR IGNORE INTO workflow_messages (message_id, run_id, source_key, kind,"
        " request_id, body_json, origin_session, resumed, status, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
        (
            message_id,
            run_id,
            source_key,
            kind,
            request_id,
            jsoncol.dumps(body),
            origin_session,
            int(resumed),
            tx.now,
        ),
    )
    return message_id if cursor.rowcount == 1 else None


def record_request(
    tx: Transaction,
    *,
    run_id: str,
    workflow: str,
    request_id: str,
    node_id: str,
    kind: str,
    request: dict[str, Any],
    deadline_at: int | None,
    origin_session: str | None,
    resumed: bool = False,
    reminder: tuple[int, int] | None = None,
    again: str | None = None,
    for_person: bool = False,
) -> str:
    """Record the message that presents a request (``decision`` for a human decision,
    ``question`` for a person's checkpoint (``for_person``), ``step`` otherwise: a model
    turn); a presentation again supersedes the request's earlier messages
    and ends any presentation timer of it. ``reminder`` (``(k, of)``) makes it the k-th
    reminder of an agent step whose model ended its turn without submitting
    (``store/reminders.py``); ``again`` the presentation again of ``store/delivery.py`` for
    that reason, whose text opens with why."""
    if resumed:
        tx.conn.execute(
            "UPDATE workflow_messages SET status = 'superseded', settled_at = ?"
            " WHERE request_id = ? AND status = 'pending'",
            (tx.now, request_id),
        )
        tx.conn.execute(
            "UPDATE interactive_requests SET present_at = NULL, present_reason = NULL"
            " WHERE request_id = ? AND present_at IS NOT NULL",
            (request_id,),
        )
    count = tx.conn.execute(
        "SELECT COUNT(*) FROM workflow_messages WHERE request_id = ?", (request_id,)
    ).fetchone()[0]
    body: dict[str, Any] = {
        "runId": run_id,
        "workflow": workflow,
        "requestId": request_id,
        "nodeId": node_id,
        "requestKind": kind,
        "deadlineAt": deadline_at,
        "resumed": resumed,
        "text": step_text(
            workflow, run_id, node_id, request_id, kind, request, resumed, for_person=for_person
        ),
    }
    child = child_of(tx.conn, run_id)
    if child is not None:
        body["child"] = child
        body["text"] = child_label(child) + "\n" + str(body["text"])
    if reminder is not None:
        body["reminder"] = reminder[0]
        body["text"] = reminder_text(*reminder) + "\n\n" + str(body["text"])
    elif again is not None and kind != "decision" and not for_person:
        body["again"] = again
        body["text"] = again_text(again) + "\n\n" + str(body["text"])
    if kind == "decision":
        body["choices"] = request.get("choices", [])
    if isinstance(request.get("audience"), str):
        body["audience"] = request["audience"]  # docs/channels.md
    message_kind = "decision" if kind == "decision" else "question" if for_person else "step"
    message_id = record(
        tx,
        run_id,
        f"request:{request_id}:{count}",
        message_kind,
        body,
        origin_session,
        request_id=request_id,
        resumed=resumed,
    )
    assert message_id is not None  # the source key is new by construction
    return message_id


def child_of(conn: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    """Where a child run sits in its parent (``{parentRunId, rootRunId, nodeId, kind,
    item, total}``), or None for a root run: a session that presents steps of several runs
    of one tree labels each with the child it belongs to."""
    row = conn.execute(
        "SELECT r.parent_run_id, r.root_run_id, j.node_id, j.kind, c.item, j.total"
        " FROM runs r JOIN run_children c ON c.child_run_id = r.run_id"
        " JOIN run_joins j USING (wait_id) WHERE r.run_id = ?",
        (run_id,),
    ).fetchone()
    if row is None:
        return None
    keys = ("parentRunId", "rootRunId", "nodeId", "kind", "item", "total")
    return dict(zip(keys, row, strict=True))


def child_label(child: dict[str, Any]) -> str:
    """The first line of a child run's step: which parent, node and item it belongs to."""
    where = (
        f"item {child['item'] + 1} of {child['total']} of fan_out {child['nodeId']!r}"
        if child["kind"] == "fan_out"
        else f"subworkflow {child['nodeId']!r}"
    )
    return f"[child run of {child['parentRunId']}: {where}]"


def text_of(body: Any) -> str:
    """A message's text as views carry it: a step's exact text, a decision's card text, a
    notification's text; ``""`` for a terminal message (its body holds the outcome)."""
    return str(body.get("text", "")) if isinstance(body, dict) else ""


def read_text(conn: sqlite3.Connection, message_id: str) -> tuple[str, str, str] | None:
    """``(run id, kind, whole text)`` of one message (``workflowMessage.get``), or None."""
    row = conn.execute(
        "SELECT run_id, kind, body_json FROM workflow_messages WHERE message_id = ?",
        (message_id,),
    ).fetchone()
    if row is None:
        return None
    return str(row[0]), str(row[1]), text_of(jsoncol.loads(row[2]))


def was_sent(conn: sqlite3.Connection, request_id: str) -> bool:
    """Whether the latest message presenting ``request_id`` reached its session."""
    row = conn.execute(
        "SELECT status FROM workflow_messages WHERE request_id = ?"
        " ORDER BY created_at DESC, rowid DESC LIMIT 1",
        (request_id,),
    ).fetchone()
    return row is not None and row[0] == "sent"


def cancel_for_request(tx: Transaction, request_id: str) -> None:
    """The request settled: its messages that were never sent are not presented any more."""
    tx.conn.execute(
        "UPDATE workflow_messages SET status = 'cancelled', settled_at = ?"
        " WHERE request_id = ? AND status = 'pending'",
        (tx.now, request_id),
    )


AGAIN_TEXTS = {
    "turnLost": "the turn that was working on this step ended before it was submitted (Pi"
    " exited, or the session was reopened)",
    "notWorked": "no turn worked on this step after it was presented",
    "providerError": "the last turn on this step ended with a model provider error",
    "agentIdle": "no turn worked on this step for a while",
}
"""Why a step is presented again (``store/delivery.py``), as its text says."""


def again_text(reason: str) -> str:
    """The line that opens a step presented again by the delivery rule."""
    why = AGAIN_TEXTS.get(reason, "it was not finished")
    return (
        f"--- Presented again: {why}. Continue it and submit it with the `{TOOL}` tool (a"
        " checkpoint: answer it); the earlier presentation is superseded. ---"
    )


def reminder_text(k: int, of: int) -> str:
    """The line that opens the k-th reminder of an agent step."""
    last = (
        "this is the last reminder: if this turn also ends without a submission, the step"
        " fails (missingSubmission)"
        if k >= of
        else f"after {of} reminders a turn that ends without a submission fails the step"
    )
    return (
        f"--- Reminder {k} of {of}: your last turn ended without submitting this workflow"
        f" step. Submit it now with the `{TOOL}` tool; {last}. ---"
    )


def step_text(
    workflow: str,
    run_id: str,
    node_id: str,
    request_id: str,
    kind: str,
    request: dict[str, Any],
    resumed: bool = False,
    *,
    for_person: bool = False,
) -> str:
    """The exact text a session presents for a request, with its request id filled in (a
    person's checkpoint, ``for_person``, says who answers it and how, and nothing to a model)."""
    again = " (presented again)" if resumed else ""
    if kind in ("agent", "assistant"):
        prompt = str(request.get("prompt", "")).rstrip()
        contract = str(request.get("contract", "")).replace(REQUEST_ID_PLACEHOLDER, request_id)
        return f"{prompt}\n\n{contract}" + (f"\n{again.strip()}" if resumed else "")
    if kind == "decision":
        lines = [f"--- Workflow decision{again} ---", f"Workflow: {workflow}", f"Run: {run_id}"]
        lines.append(f"Decision: {request.get('title', '')}")
        if request.get("details"):
            lines.append(str(request["details"]))
        for choice in request.get("choices", []):
            label = choice.get("label") or choice.get("id")
            note = f" - {choice['description']}" if choice.get("description") else ""
            lines.append(f"  {choice.get('id')}: {label}{note}")
        lines.append(
            f"Only the person decides, with /workflow decide {run_id}; the {TOOL} tool cannot"
            " answer it."
        )
        return "\n".join(lines)
    # A checkpoint with answer= carries its generated expected answer (which ends with the
    # schema) and the schema itself (runner/waits.py): the text shows the first only.
    extra = {
        k: v for k, v in request.items() if k not in ("question", "expectedAnswer", "answerSchema")
    }
    lines = [
        f"--- Workflow question for the person{again} ---"
        if for_person
        else f"--- Workflow checkpoint{again} ---",
        f"Workflow: {workflow}",
        f"Step: {node_id}",
        f"Run: {run_id}",
        f"Request: {request_id}",
        f"Question: {request.get('question', '')}",
    ]
    if extra:
        lines.append(f"Details: {json.dumps(extra, ensure_ascii=False, sort_keys=True)}")
    if isinstance(request.get("expectedAnswer"), str):
        lines += ["Expected answer:", str(request["expectedAnswer"])]
    if for_person:
        lines.append(
            f"Only a person answers it: in Pi with /workflow answer {run_id} (a dialog) or"
            f" /workflow answer {run_id} JSON, or with pi-workflows checkpoint answer {run_id}"
            " --value JSON; the workflow tool cannot answer it."
        )
        return "\n".join(lines)
    call = {"action": "answer", "runId": run_id, "requestId": request_id, "value": "<answer>"}
    lines.append(
        f"How to answer: call the `{TOOL}` tool once with {json.dumps(call)}, where value is a"
        f" JSON value; or the person answers with /workflow answer {run_id} JSON."
    )
    return "\n".join(lines)
