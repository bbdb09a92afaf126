"""Origin sessions through the real server: the coordinator, its pushed view, its reports.

The Python client plays the Pi extension: it attaches to a session, watches the view the
server pushes, reports which workflow messages are in its branch and which model turns it
ran. Messages are delivered exactly once across client and server restarts; one request is
active per session at a time; a newer coordinator fences the older one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.client import RejectedError

from support.server import ServerProcess, wait_for

SESSION = "session-a"

FLOW = """
from pi_workflows import Workflow, agent, compute, edge, notify

workflow = Workflow(
    "flow",
    start="hello",
    nodes={
        "hello": notify(lambda ctx: "Starting " + ctx.input.get("name", "?")),
        "step": agent(prompt="Write a title", expected_output='{"title": "..."}'),
        "done": compute(lambda ctx: {"title": ctx.outputs["step"]["title"]}),
    },
    edges=[edge("hello", "step"), edge("step", "done")],
)
"""


def _kinds(view: dict[str, Any]) -> list[str]:
    return [m["kind"] for m in view["messages"]]


def _start(server: ServerProcess, name: str = "a", session: str = SESSION) -> str:
    server.write_workflow("flow", FLOW)
    return server.start_run("flow", {"name": name}, origin_session=session)


def test_a_step_is_presented_once_and_reported_messages_are_never_presented_again(
    server: ServerProcess,
) -> None:
    """The session's view carries the notification and the step (with its request id in the
    text); once reported present they leave the view. A restarted client (a new seat) is
    not given the notification again; the step, which no turn worked on, is presented to it
    once more (a delivery is to one seat), and only once."""
    run_id = _start(server)
    with server.client() as client:
        epoch = client.attach_session(SESSION)
        with client.watch_session(SESSION, epoch) as watch:
            view = watch.wait_for(lambda v: v["activeRequest"] is not None, 30)
    active = view["activeRequest"]
    assert active["runId"] == run_id
    assert active["kind"] == "agent"
    assert _kinds(view) == ["notification", "step"]
    step = view["messages"][1]
    assert step["workflowMessageId"] == active["workflowMessageId"]
    assert active["requestId"] in step["text"]
    assert "Write a title" in step["text"]
    assert view["messages"][0]["text"] == "Starting a"
    present = {m["workflowMessageId"]: f"entry-{i}" for i, m in enumerate(view["messages"])}
    with server.client() as client:
        result = client.report_messages(SESSION, epoch, present)
        assert sorted(result["sent"]) == sorted(present)
        # The Pi process restarts: a new seat, to which only the step is presented again.
        epoch2 = client.attach_session(SESSION, seat_id="second-pi")
        client.report_messages(SESSION, epoch2, present, idle=True)
        client.report_messages(SESSION, epoch2, present, idle=True)
        again = client.get_session(SESSION)
    assert _kinds(again) == ["step"]
    assert again["messages"][0]["body"]["again"] == "notWorked"
    assert again["activeRequest"]["messageStatus"] == "pending"
    statuses = server.query("SELECT kind, status FROM workflow_messages ORDER BY created_at")
    assert statuses == [("notification", "sent"), ("step", "sent"), ("step", "pending")]


def test_a_sent_step_missing_from_an_idle_session_is_presented_again_once(
    server: ServerProcess,
) -> None:
    """A step reported sent that an idle session no longer holds (a rewound branch) is
    re-created once as a ``resumed`` step; the same report again adds nothing more."""
    _start(server)
    with server.client() as client:
        epoch = client.attach_session(SESSION)
        view = wait_for(lambda: client.get_session(SESSION)["activeRequest"], 30, "the step")
        step = client.get_session(SESSION)["activeRequest"]["workflowMessageId"]
        client.report_messages(SESSION, epoch, {step: "entry-1"})
        first = client.report_messages(SESSION, epoch, {}, idle=True)
        second = client.report_messages(SESSION, epoch, {}, idle=True)
        view = client.get_session(SESSION)
    assert len(first["resumed"]) == 1
    assert second["resumed"] == []
    [message] = [m for m in view["messages"] if m["kind"] == "step"]
    assert message["resumed"] is True
    assert "presented again" in message["text"]


def test_only_the_oldest_request_of_a_session_is_active(server: ServerProcess) -> None:
    """Two runs of one session wait: the older request is presented, the newer one only once
    the older one is answered."""
    first = _start(server, "first")
    server.wait_status(first, "waiting")
    second = _start(server, "second")
    server.wait_status(second, "waiting")
    with server.client() as client:
        view = client.get_session(SESSION)
        assert view["activeRequest"]["runId"] == first
        assert [m["kind"] for m in view["messages"] if m["runId"] == second] == ["notification"]
        client.submit(view["activeRequest"]["requestId"], {"title": "one"})
        wait_for(
            lambda: client.get_session(SESSION)["activeRequest"]["runId"] == second,
            30,
            "the second request to become active",
        )
        assert client.list_interactions(SESSION)[0]["runId"] == second


def test_a_terminal_message_appears_only_after_the_run_completed(server: ServerProcess) -> None:
    """The terminal message is in the same view as the completed run, never before it."""
    run_id = _start(server)
    with server.client() as client:
        epoch = client.attach_session(SESSION)
        request_id = wait_for(
            lambda: (client.get_session(SESSION)["activeRequest"] or {}).get("requestId"),
            30,
            "step",
        )
        with client.watch_session(SESSION, epoch) as watch:
            client.submit(request_id, {"title": "Done"})
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                pushed = watch.next_view(deadline - time.monotonic())
                if pushed is None:
                    continue
                view = pushed
                status = {r["runId"]: r["status"] for r in view["runs"]}[run_id]
                if "terminal" in _kinds(view):
                    assert status == "completed"
                    break
            else:
                raise AssertionError("no view with the terminal message")
    [terminal] = [m for m in view["messages"] if m["kind"] == "terminal"]
    assert terminal["body"]["status"] == "completed"
    assert terminal["body"]["output"] == {"title": "Done"}


def test_a_newer_coordinator_fences_the_older_one(server: ServerProcess) -> None:
    """After a second attach the first coordinator's reports are refused and its watch is
    told it was fenced."""
    _start(server)
    with server.client() as client:
        old = client.attach_session(SESSION)
        with client.watch_session(SESSION, old) as watch:
            watch.wait_for(lambda v: v["activeRequest"] is not None, 30)
            new = client.attach_session(SESSION)
            assert new == old + 1
            wait_for(lambda: watch.next_view(1) is None and watch.fenced, 30, "the fence event")
        with pytest.raises(RejectedError) as fenced:
            client.report_messages(SESSION, old, {})
        assert fenced.value.code == "coordinatorFenced"
        client.report_messages(SESSION, new, {})


def test_an_aborted_turn_pauses_the_run_and_resume_presents_the_step_again(
    server: ServerProcess,
) -> None:
    """The person stops the model turn the step started: the run pauses (``turnAborted``);
    ``run resume`` makes it wait again and presents the step once more."""
    run_id = _start(server)
    with server.client() as client:
        epoch = client.attach_session(SESSION)
        step = wait_for(lambda: client.get_session(SESSION)["activeRequest"], 30, "the step")
        message = step["workflowMessageId"]
        client.report_messages(SESSION, epoch, {message: "entry-1"})
        client.report_turn(SESSION, epoch, "started", workflow_message_id=message)
        ended = client.report_turn(SESSION, epoch, "ended", stop_reason="aborted")
        assert ended["paused"] == run_id
        view = server.run(run_id)
        assert (view["status"], view["parkReason"]) == ("paused", "turnAborted")
        assert client.get_session(SESSION)["activeRequest"] is None
        client.resume(run_id)
        assert server.run(run_id)["status"] == "waiting"
        again = client.get_session(SESSION)
    [resumed] = [m for m in again["messages"] if m["kind"] == "step"]
    assert resumed["resumed"] is True
    assert again["activeRequest"]["workflowMessageId"] == resumed["workflowMessageId"]
    turns = server.query("SELECT status, stop_reason, run_id FROM workflow_turns")
    assert turns == [("ended", "aborted", run_id)]


TWO_STEPS = """
from pi_workflows import Workflow, agent, edge

workflow = Workflow(
    "two",
    start="first",
    nodes={
        "first": agent(prompt="First title", expected_output='{"title": "..."}'),
        "second": agent(prompt="Second title", expected_output='{"title": "..."}'),
    },
    edges=[edge("first", "second")],
)
"""


def test_an_aborted_turn_of_an_answered_step_pauses_nothing(server: ServerProcess) -> None:
    """The model submits the first step inside its turn and the person aborts that turn
    afterwards: the run already waits on its second step, which stays waiting and presented
    (a turn pauses its run only when it was for the run's open request)."""
    server.write_workflow("two", TWO_STEPS)
    run_id = server.start_run("two", {}, origin_session=SESSION)
    with server.client() as client:
        epoch = client.attach_session(SESSION)
        step = wait_for(lambda: client.get_session(SESSION)["activeRequest"], 30, "the step")
        message = step["workflowMessageId"]
        client.report_messages(SESSION, epoch, {message: "entry-1"})
        client.report_turn(SESSION, epoch, "started", workflow_message_id=message)
        client.submit(step["requestId"], {"title": "one"})

        def second() -> dict[str, Any] | None:
            active = client.get_session(SESSION)["activeRequest"]
            return active if active and active["nodeId"] == "second" else None

        wait_for(second, 30, "the second step")
        ended = client.report_turn(SESSION, epoch, "ended", stop_reason="aborted")
    assert ended["paused"] is None
    view = server.run(run_id)
    assert (view["status"], view["parkReason"]) == ("waiting", None)
    assert server.diagnose() == []


def test_runs_without_an_origin_keep_their_messages_in_run_show(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A run started without a session presents nothing anywhere but lists its messages."""
    server.write_workflow("flow", FLOW)
    run_id = server.start_run("flow", {"name": "solo"})
    view = server.wait_status(run_id, "waiting")
    assert view["originSession"] is None
    assert [m["kind"] for m in view["messages"]] == ["notification", "step"]
    assert view["messages"][0]["text"] == "Starting solo"


def test_a_fenced_coordinators_turn_report_is_refused_and_changes_nothing(
    server: ServerProcess,
) -> None:
    """After a newer attach, the older coordinator's ``workflowTurn.report`` (a start, or an
    aborted end that would pause the run) is ``coordinatorFenced`` and records nothing."""
    run_id = _start(server)
    with server.client() as client:
        old = client.attach_session(SESSION)
        step = wait_for(lambda: client.get_session(SESSION)["activeRequest"], 30, "the step")
        new = client.attach_session(SESSION)
        message = step["workflowMessageId"]
        with pytest.raises(RejectedError) as fenced:
            client.report_turn(SESSION, old, "started", workflow_message_id=message)
        assert fenced.value.code == "coordinatorFenced"
        assert server.query("SELECT COUNT(*) FROM workflow_turns") == [(0,)]
        started = client.report_turn(SESSION, new, "started", workflow_message_id=message)
        with pytest.raises(RejectedError) as fenced_end:
            client.report_turn(SESSION, old, "ended", stop_reason="aborted")
        assert fenced_end.value.code == "coordinatorFenced"
        assert server.run(run_id)["status"] == "waiting"
        assert server.query("SELECT turn_id, status FROM workflow_turns") == [
            (started["turnId"], "started")
        ]
        ended = client.report_turn(SESSION, new, "ended", stop_reason="completed")
    assert (ended["turnId"], ended["paused"]) == (started["turnId"], None)
    assert server.run(run_id)["status"] == "waiting"


CHATTY = """
from pi_workflows import Workflow, compute, edge, notify, switch

def count(ctx):
    return {"left": ctx.outputs.get("count", {"left": ctx.input["n"]})["left"] - 1}

workflow = Workflow(
    "chatty",
    start="count",
    max_steps=200,
    nodes={
        "count": compute(count),
        "say": notify(lambda ctx: f"tick {ctx.outputs['count']['left']} " + "x" * 12000),
        "done": compute(lambda ctx: {"finished": True}),
    },
    edges=[switch("count", on="$.left", cases={0: "done"}, default="say"),
           edge("say", "count")],
)
"""


def test_a_slow_session_watcher_gets_the_latest_view_not_every_one(
    server: ServerProcess,
) -> None:
    """Window: the session's watcher reads nothing while its run makes dozens of changes
    (each view ~0.5 MB of pending notifications), then reads: it gets far fewer views than
    changes, and the last one is the session's final view (the run completed, its terminal
    message pending)."""
    server.write_workflow("chatty", CHATTY)
    with server.client() as client:
        epoch = client.attach_session(SESSION)
        with client.watch_session(SESSION, epoch) as watch:
            run_id = server.start_run("chatty", {"n": 30}, origin_session=SESSION)
            final = server.wait_status(run_id, "completed", 60)
            views: list[dict[str, Any]] = []

            def finished(view: dict[str, Any]) -> bool:
                views.append(view)
                return "terminal" in _kinds(view)

            last = watch.wait_for(finished, 30)
    assert len(views) < final["revision"] / 2, (len(views), final["revision"])
    assert [r["status"] for r in last["runs"]] == ["completed"]
    notes = [m for m in last["messages"] if m["kind"] == "notification"]
    assert len(notes) == 29
    assert notes[-1]["text"].startswith("tick 1 ")
    revisions = [v["revision"] for v in views]
    assert revisions == sorted(set(revisions))


def test_the_active_requests_contract_names_its_request_id(server: ServerProcess) -> None:
    """The active step's text (in its message, the view's one copy) has the real request id
    in place of the runner's ``<requestId>`` placeholder, and so has ``waitingOn``'s
    contract; the active request itself carries no text."""
    run_id = _start(server)
    with server.client() as client:
        view = wait_for(
            lambda: (v := client.get_session(SESSION))["activeRequest"] and v, 30, "the step"
        )
        contract = client.get_run(run_id)["waitingOn"]["request"]["contract"]
    active = view["activeRequest"]
    [step] = [m for m in view["messages"] if m["workflowMessageId"] == active["workflowMessageId"]]
    assert "text" not in active
    assert "request" not in active
    assert active["requestId"] in step["text"]
    assert "<requestId>" not in step["text"]
    assert contract in step["text"]


def test_run_show_and_interaction_list_name_the_request_id_in_the_contract(
    server: ServerProcess,
) -> None:
    """``waitingOn.request.contract`` (``run show``) and each ``interaction.list`` item's
    contract have the real request id in place of ``<requestId>``."""
    run_id = _start(server)
    waiting = server.wait_status(run_id, "waiting")["waitingOn"]
    with server.client() as client:
        [listed] = client.list_interactions(SESSION)
    for shown in (waiting, listed):
        assert shown["requestId"] in shown["request"]["contract"]
        assert "<requestId>" not in shown["request"]["contract"]
