"""Bounded, failure-isolated pushes on a real server: views over the frame limit are pushed in
their bounded form, and a watch whose view fails ends alone with an ``unavailable`` event.

The backlog workflow records twenty 200 KiB notifications and then opens a step whose
prompt is 100 KiB: about 4 MB of text for one session, four times the frame limit.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec
import pytest

from pi_workflows.client import Client, WatchUnavailableError
from pi_workflows.protocol import MAX_FRAME_BYTES

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

SESSION = "bounded-session"
OTHER = "other-session"
COUNT = 20

BACKLOG = f"""
from pi_workflows import Workflow, agent, compute, edge, notify

COUNT = {COUNT}


def note(i):
    return lambda ctx: f"note {{i:02d}} " + "abcd\\u00e9" * 34000


nodes = {{f"n{{i:02d}}": notify(note(i)) for i in range(COUNT)}}
nodes["step"] = agent(
    prompt="Summarise the notes. " + "p" * 100_000, expected_output='{{"summary": "..."}}'
)
nodes["done"] = compute(lambda ctx: {{"summary": ctx.outputs["step"]["summary"]}})
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
        "hello": notify(lambda ctx: "Hello " + ctx.input["name"]),
        "ask": checkpoint({"question": "Go on?"}),
        "done": compute(lambda ctx: {"answer": ctx.outputs["ask"]}),
    },
    edges=[edge("hello", "ask"), edge("ask", "done")],
)
"""


def note_text(i: int) -> str:
    """The whole text of the backlog's notification ``i`` (204,008 bytes of UTF-8)."""
    return f"note {i:02d} " + "abcd\u00e9" * 34000


def frame_bytes(name: str, payload: dict[str, Any]) -> int:
    """The size of the frame that carried the pushed event ``name`` with ``payload``."""
    return len(msgspec.json.encode({"type": "event", "name": name, "payload": payload})) + 1


def start_backlog(server: ServerProcess) -> str:
    """Start the backlog for ``SESSION`` and wait until its step waits (every note recorded)."""
    server.write_workflow("backlog", BACKLOG)
    run_id = server.start_run("backlog", origin_session=SESSION)
    server.wait_status(run_id, "waiting", 90)
    return run_id


def notification_of(server: ServerProcess, run_id: str) -> tuple[str, str]:
    """``(message id, body)`` of the run's one notification."""
    [(message_id, body)] = server.query(
        "SELECT message_id, body_json FROM workflow_messages WHERE run_id = ?"
        " AND kind = 'notification'",
        run_id,
    )
    return str(message_id), str(body)


def damage(server: ServerProcess, message_id: str, body: str) -> None:
    """Overwrite one workflow message's stored body behind the server (a damaged row)."""
    conn = sqlite3.connect(server.home / "state.sqlite", timeout=30)
    try:
        with conn:
            conn.execute(
                "UPDATE workflow_messages SET body_json = ? WHERE message_id = ?",
                (body, message_id),
            )
    finally:
        conn.close()


def test_a_backlog_over_the_frame_limit_is_pushed_bounded_and_read_whole_in_order(
    server: ServerProcess,
) -> None:
    """Every pushed view of a 4 MB backlog fits a frame and lists a few of its oldest messages
    with cut texts and a count of the rest; each whole text reads back exactly; reporting the
    listed ones brings the next, in order, each once, and then the step."""
    run_id = start_backlog(server)
    shown: list[dict[str, Any]] = []
    views = 0
    with server.client() as client:
        epoch = client.attach_session(SESSION)
        with client.watch_session(SESSION, epoch) as watch:
            while not shown or shown[-1]["kind"] != "step":
                done = {m["workflowMessageId"] for m in shown}
                view = watch.wait_for(
                    lambda v, done=done: (
                        bool(v["messages"]) and v["messages"][0]["workflowMessageId"] not in done
                    ),
                    30,
                )
                views += 1
                listed = view["messages"]
                assert frame_bytes("session.view", view) <= MAX_FRAME_BYTES
                assert len(msgspec.json.encode(listed)) <= 512 * 1024
                assert view["moreMessages"] == COUNT + 1 - len(shown) - len(listed)
                for message in listed:
                    whole = client.read_message_text(message["workflowMessageId"])
                    assert message["textBytes"] == len(whole.encode())
                    assert message["textTruncated"] is True
                    assert whole.startswith(message["text"])
                    assert 0 < len(message["text"].encode()) <= 64 * 1024
                    assert "text" not in message["body"]
                    shown.append({**message, "whole": whole})
                present = {
                    m["workflowMessageId"]: f"entry-{m['workflowMessageId']}" for m in listed
                }
                assert sorted(client.report_messages(SESSION, epoch, present)["sent"]) == sorted(
                    present
                )
        request_id = client.get_session(SESSION)["activeRequest"]["requestId"]
    assert views >= 3, "the backlog should take several bounded views"
    assert [m["kind"] for m in shown] == ["notification"] * COUNT + ["step"]
    assert [m["whole"] for m in shown[:COUNT]] == [note_text(i) for i in range(COUNT)]
    assert len({m["workflowMessageId"] for m in shown}) == COUNT + 1
    step = shown[-1]["whole"]
    assert step.startswith("Summarise the notes. " + "p" * 100_000)
    assert request_id in step
    assert server.query(
        "SELECT COUNT(*) FROM workflow_messages WHERE run_id = ? AND status = 'sent'", run_id
    ) == [(COUNT + 1,)]


def test_run_views_and_run_show_of_the_backlog_fit_a_frame(server: ServerProcess) -> None:
    """The run's pushed view and ``run.get`` carry its 21 message texts cut to 4 KiB with
    their whole sizes and fit a frame; the pushed view replaces the 100 KiB request by its
    size (``run.get`` has it whole); a cut text reads back whole."""
    run_id = start_backlog(server)
    with server.client() as client, client.watch_run(run_id) as watch:
        view = watch.wait_for(lambda v: v["run"]["status"] == "waiting", 30)
        shown = client.get_run(run_id)
        whole = client.read_message_text(view["run"]["messages"][3]["workflowMessageId"])
    assert frame_bytes("run.view", view) <= MAX_FRAME_BYTES
    for run in (view["run"], shown):
        messages = run["messages"]
        assert [m["kind"] for m in messages] == ["notification"] * COUNT + ["step"]
        assert all(m["textTruncated"] and len(m["text"].encode()) <= 4096 for m in messages)
        assert messages[3]["textBytes"] == len(note_text(3).encode())
    assert shown["waitingOn"]["request"]["prompt"].startswith("Summarise the notes.")
    assert view["run"]["waitingOn"]["request"]["omittedBytes"] > 100_000
    assert view["run"]["messagesOmitted"] == 0
    assert whole == note_text(3)


def test_a_session_whose_view_fails_ends_alone_and_the_push_task_goes_on(
    server: ServerProcess,
) -> None:
    """A damaged message row makes one session's view fail: its watch ends with one
    ``session.unavailable`` event (raised as ``WatchUnavailableError``) while another
    session's watch keeps receiving; once the row is repaired, watching again works."""
    server.write_workflow("note", NOTE)
    broken_run = server.start_run("note", {"name": "broken"}, origin_session=SESSION)
    server.wait_status(broken_run, "waiting")
    message_id, good_body = notification_of(server, broken_run)
    with server.client() as client:
        epoch = client.attach_session(SESSION)
        other_epoch = client.attach_session(OTHER)
        with (
            client.watch_session(SESSION, epoch) as broken,
            client.watch_session(OTHER, other_epoch) as other,
        ):
            broken.wait_for(lambda v: len(v["messages"]) == 2, 30)
            other.wait_for(lambda v: v["messages"] == [], 30)
            damage(server, message_id, '{"text": "cut')
            first = server.start_run("note", {"name": "first"}, origin_session=OTHER)
            with pytest.raises(WatchUnavailableError) as ended:
                broken.wait_for(lambda v: False, 30)
            seen = other.wait_for(lambda v: _notes(v) == ["Hello first"], 30)
            second = server.start_run("note", {"name": "second"}, origin_session=OTHER)
            seen = other.wait_for(lambda v: _notes(v) == ["Hello first", "Hello second"], 30)
            with pytest.raises(WatchUnavailableError):
                broken.next_view(0.1)  # an ended watch stays ended
        error = ended.value
        assert (error.code, error.event, error.retry_after) == (
            "viewFailed",
            "session.unavailable",
            1.0,
        )
        assert "watch again (session.watch)" in error.message
        assert [r["runId"] for r in seen["runs"]][:2] == [second, first]
        damage(server, message_id, good_body)
        with client.watch_session(SESSION, epoch) as again:
            view = again.wait_for(lambda v: len(v["messages"]) == 2, 30)
    assert _notes(view) == ["Hello broken"]
    assert "could not push the view of session bounded-session" in server.log.read_text()


def test_a_run_watch_whose_view_fails_ends_alone_and_the_list_goes_on(
    server: ServerProcess,
) -> None:
    """A damaged message row makes one run's view fail: its watchers get ``run.unavailable``
    while a watcher of another run and a run-list watcher keep receiving views."""
    server.write_workflow("note", NOTE)
    broken_run = server.start_run("note", {"name": "broken"}, origin_session=SESSION)
    healthy_run = server.start_run("note", {"name": "healthy"}, origin_session=OTHER)
    server.wait_status(broken_run, "waiting")
    server.wait_status(healthy_run, "waiting")
    with (
        server.client() as client,
        client.watch_run(broken_run) as broken,
        client.watch_run(healthy_run) as healthy,
        client.watch_runs(limit=10) as runs,
    ):
        broken.wait_for(lambda v: v["run"]["status"] == "waiting", 30)
        healthy.wait_for(lambda v: v["run"]["status"] == "waiting", 30)
        runs.wait_for(lambda v: len(v["runs"]) == 2, 30)
        damage(server, notification_of(server, broken_run)[0], "{")
        # One commit that moves both runs: each watch recomputes its view.
        _answer(client, broken_run)
        _answer(client, healthy_run)
        with pytest.raises(WatchUnavailableError) as ended:
            broken.wait_for(lambda v: False, 30)
        done = healthy.wait_for(lambda v: v["run"]["status"] == "completed", 30)
        listed = runs.wait_for(lambda v: {r["status"] for r in v["runs"]} == {"completed"}, 30)
    assert ended.value.event == "run.unavailable"
    assert ended.value.code == "viewFailed"
    assert done["run"]["output"] == {"answer": {"go": True}}
    assert listed["runsOmitted"] == 0


def _answer(client: Client, run_id: str) -> None:
    client.answer_checkpoint(run_id, {"go": True})


def _notes(view: dict[str, Any]) -> list[str]:
    return [m["text"] for m in view["messages"] if m["kind"] == "notification"]
