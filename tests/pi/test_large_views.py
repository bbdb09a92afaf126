"""Large and failing session views, presented by the real Pi.

The backlog run records twenty notifications of 200 KiB each and then opens an agent step
whose prompt is 100 KiB: about 4 MB of text for one session, four times the frame limit.
The server pushes the session's view in its bounded form (a few messages at a time, texts
cut); the extension reads each cut text whole by reference and presents everything in
order, each message exactly once, then the step, which the scripted model submits. A view
the server cannot compute ends the watch with ``session.unavailable``: the extension tells
the person, keeps Pi running, watches again and presents once the view is back.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from pi.support.mock_provider import (
    ChatRequest,
    MockProvider,
    last_is_tool_result,
    request_id_in,
    text,
    tool_call,
    user_text_contains,
)
from pi.support.pi_rpc import MakePi, PiProcess, Record
from pi.support.records import content_text, workflow_messages

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(180)

SESSION = "large-views-session"
STEP_MARK = "--- Workflow step ---"
TERMINAL_MARK = "--- Workflow run finished ---"
COUNT = 20

BACKLOG = f"""
from pi_workflows import Workflow, agent, compute, edge, notify

COUNT = {COUNT}


def note(i):
    return lambda ctx: f"note {{i:02d}} " + "abcd\\u00e9" * 34000


nodes = {{f"n{{i:02d}}": notify(note(i)) for i in range(COUNT)}}
nodes["step"] = agent(
    prompt="Classify the notes. " + "p" * 100_000, expected_output='{{"route": "fix"}}'
)
nodes["done"] = compute(lambda ctx: {{"route": ctx.outputs["step"]["route"]}})
edges = [edge(f"n{{i:02d}}", f"n{{i + 1:02d}}") for i in range(COUNT - 1)]
edges += [edge(f"n{{COUNT - 1:02d}}", "step"), edge("step", "done")]
workflow = Workflow("backlog", start="n00", nodes=nodes, edges=edges)
"""


NOTE = """
from pi_workflows import Workflow, checkpoint, compute, edge, notify

workflow = Workflow(
    "note",
    start="hello",
    nodes={
        "hello": notify(lambda ctx: "Starting " + ctx.input["name"]),
        "ask": checkpoint({"question": "Go on?"}),
        "done": compute(lambda ctx: {"answer": ctx.outputs["ask"]}),
    },
    edges=[edge("hello", "ask"), edge("ask", "done")],
)
"""
CHECKPOINT_MARK = "--- Workflow checkpoint ---"
UNAVAILABLE = "workflow view is unavailable"


def note_text(i: int) -> str:
    """The whole text of notification ``i`` (204,008 bytes of UTF-8)."""
    return f"note {i:02d} " + "abcd\u00e9" * 34000


def submit_route(route: str) -> Any:
    """A reply submitting `{"route": route}` for the request id in the step's text."""

    def arguments(request: ChatRequest) -> dict[str, Any]:
        step = request.last_user_text()
        return {"action": "submit", "requestId": request_id_in(step), "output": {"route": route}}

    return tool_call("workflow", arguments)


def presented(pi: PiProcess, server: ServerProcess) -> list[Record]:
    """Every workflow message entry of Pi's session once the step is among them."""
    seen: list[Record] = []

    def check() -> list[Record] | None:
        seen[:] = workflow_messages(pi.entries())
        return seen if any(e["details"]["kind"] == "step" for e in seen) else None

    try:
        return list(wait_for(check, 60, "the backlog and the step in Pi's session"))
    except AssertionError as exc:
        rows = server.query("SELECT kind, status FROM workflow_messages ORDER BY rowid")
        kinds = [e["details"]["kind"] for e in seen]
        raise AssertionError(
            f"{exc}; Pi shows {kinds}; the server has {rows}; Pi's stderr: {pi.stderr()[-2000:]}"
        ) from None


def test_a_backlog_of_large_notifications_is_presented_whole_in_order_then_the_step(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """Twenty 200 KiB notifications, each in one entry with its whole text, in order and
    exactly once, then the 100 KiB step whole, which the model answers; the server records
    each message sent with the entry that holds it, and the run completes."""
    server.write_workflow("backlog", BACKLOG)
    run_id = server.start_run("backlog", origin_session=SESSION)
    waiting = server.wait_status(run_id, "waiting", 90)
    with server.client() as client:
        first = client.get_session(SESSION)
        step_id = str(waiting["messages"][-1]["workflowMessageId"])
        step_text = client.read_message_text(step_id)
    assert first["moreMessages"] > 0, "the backlog must not fit one view"
    assert all(m["textTruncated"] for m in first["messages"])
    provider.on(user_text_contains(STEP_MARK), submit_route("fix"), name="the step")
    provider.on(user_text_contains(TERMINAL_MARK), text("The run finished."), name="terminal")
    provider.on(last_is_tool_result, text("Done."), name="after a tool result")

    pi = make_pi(session_id=SESSION)

    entries = presented(pi, server)
    kinds = [e["details"]["kind"] for e in entries]
    assert kinds == ["notification"] * COUNT + ["step"]
    assert [content_text(e) for e in entries[:COUNT]] == [note_text(i) for i in range(COUNT)]
    assert content_text(entries[-1]) == step_text
    assert step_text.startswith("Classify the notes. " + "p" * 100_000)
    ids = [e["details"]["workflowMessageId"] for e in entries]
    assert len(set(ids)) == COUNT + 1
    assert ids[-1] == step_id
    done = server.wait_status(run_id, {"completed", "failed"}, 60)
    assert done["status"] == "completed"
    assert done["output"] == {"route": "fix"}
    [asked] = [r for r in provider.requests() if user_text_contains(STEP_MARK)(r)]
    assert asked.last_user_text() == step_text
    notes_seen = [t for t in asked.user_texts() if t.startswith("note ")]
    assert notes_seen == [note_text(i) for i in range(COUNT)]
    sent = wait_for(
        lambda: _all_sent(server, run_id, COUNT + 1), 30, "every message to be reported sent"
    )
    assert {row[0]: row[1] for row in sent} == {
        e["details"]["workflowMessageId"]: e["id"] for e in entries
    }
    # Nothing is presented twice after Pi settles with the whole backlog shown.
    pi.settled(0)
    assert len(workflow_messages(pi.entries(), "notification")) == COUNT


def _all_sent(server: ServerProcess, run_id: str, count: int) -> list[Any] | None:
    rows = server.query(
        "SELECT message_id, entry_id FROM workflow_messages WHERE run_id = ? AND status = 'sent'"
        " AND kind IN ('notification', 'step')",
        run_id,
    )
    return rows if len(rows) == count else None


def _set_body(server: ServerProcess, message_id: str, body: str) -> None:
    """Overwrite one workflow message's stored body behind the server (damage, or repair)."""
    conn = sqlite3.connect(server.home / "state.sqlite", timeout=30)
    try:
        with conn:
            conn.execute(
                "UPDATE workflow_messages SET body_json = ? WHERE message_id = ?",
                (body, message_id),
            )
    finally:
        conn.close()


def test_a_view_the_server_cannot_push_is_watched_again_without_harming_pi(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """While the session's view cannot be computed (a damaged row), Pi keeps running and the
    person is told once; once the row is repaired, the extension's next watch presents the
    notification and the checkpoint, each once."""
    server.write_workflow("note", NOTE)
    run_id = server.start_run("note", {"name": "the build"}, origin_session=SESSION)
    server.wait_status(run_id, "waiting")
    [(message_id, body)] = server.query(
        "SELECT message_id, body_json FROM workflow_messages WHERE run_id = ?"
        " AND kind = 'notification'",
        run_id,
    )
    _set_body(server, message_id, "{")
    provider.on(user_text_contains(CHECKPOINT_MARK), text("Noted."), name="the checkpoint")

    pi = make_pi(session_id=SESSION)

    told = pi.wait_notify(lambda r: UNAVAILABLE in str(r.get("message")))
    assert "watch again" in told["message"]
    assert workflow_messages(pi.entries()) == []
    _set_body(server, message_id, body)
    entries = wait_for(
        lambda: len(found := workflow_messages(pi.entries())) == 2 and found,
        30,
        "the notification and the checkpoint after the view is back",
    )
    assert [e["details"]["kind"] for e in entries] == ["notification", "step"]
    assert content_text(entries[0]) == "Starting the build"
    assert CHECKPOINT_MARK in content_text(entries[1])
    pi.settled(0)
    assert pi.process is not None
    assert pi.process.poll() is None
    assert len([r for r in pi.notifications() if UNAVAILABLE in str(r.get("message"))]) == 1
    assert len(workflow_messages(pi.entries())) == 2
