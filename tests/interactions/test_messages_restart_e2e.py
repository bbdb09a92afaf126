"""Workflow messages are presented exactly once across a *server* restart.

The Python client plays the Pi session's coordinator: it attaches, takes the pushed view,
appends each message it does not hold yet to its branch (the only copy a person sees), and
reports the whole branch. The server is SIGKILLed between a message's creation and its
report, either before the coordinator saw it or after it presented it; either way the
message ends ``sent`` once and is in the branch once.
"""

from __future__ import annotations

from typing import Any

import pytest

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

SESSION = "session-m"

FLOW = """
from pi_workflows import Workflow, agent, compute, edge, notify

workflow = Workflow(
    "flow",
    start="hello",
    nodes={
        "hello": notify(lambda ctx: "Starting"),
        "step": agent(prompt="Write a title", expected_output='{"title": "..."}'),
        "done": compute(lambda ctx: {"title": ctx.outputs["step"]["title"]}),
    },
    edges=[edge("hello", "step"), edge("step", "done")],
)
"""


class Coordinator:
    """A Pi session's coordinator: its branch maps workflow message ids to entry ids."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.branch: dict[str, str] = {}
        self.presented: list[str] = []
        self.epoch = 0

    def attach(self) -> None:
        """Attach (again, after a server restart): a new coordinator epoch."""
        with self.server.client() as client:
            self.epoch = client.attach_session(SESSION, seat_id="restart-seat")

    def present(self, until: Any) -> dict[str, Any]:
        """Take pushed views until ``until(view)``; append every message not yet in the
        branch (never one twice). Returns that view."""
        with (
            self.server.client() as client,
            client.watch_session(SESSION, self.epoch) as watch,
        ):
            view = watch.wait_for(until, 30)
        for message in view["messages"]:
            message_id = message["workflowMessageId"]
            if message_id not in self.branch:
                self.branch[message_id] = f"entry-{len(self.branch)}"
                self.presented.append(message["kind"])
        return view

    def report(self) -> dict[str, Any]:
        """Report the whole branch of an idle session."""
        with self.server.client() as client:
            return client.report_messages(SESSION, self.epoch, self.branch, idle=True)


def _kinds(view: dict[str, Any]) -> list[str]:
    return [m["kind"] for m in view["messages"]]


@pytest.mark.parametrize("seen", [True, False], ids=["presented-then-killed", "killed-unseen"])
def test_notify_and_terminal_messages_are_presented_once_across_a_server_restart(
    server: ServerProcess, seen: bool
) -> None:
    """Window: the server is SIGKILLed after a notification (then the terminal message) was
    created and before the session reported it, with the coordinator having presented it
    (``seen``) or not; after the restart each is presented once and ends ``sent`` once."""
    server.write_workflow("flow", FLOW)
    run_id = server.start_run("flow", origin_session=SESSION)
    session = Coordinator(server)
    session.attach()
    if seen:
        session.present(lambda v: _kinds(v) == ["notification", "step"])
    else:
        server.wait_status(run_id, "waiting")
    server.kill()
    server.start()
    session.attach()
    view = session.present(lambda v: v["activeRequest"] is not None)
    assert session.presented == ["notification", "step"]
    assert sorted(session.report()["sent"]) == sorted(session.branch)
    request_id = view["activeRequest"]["requestId"]
    with server.client() as client:
        client.submit(request_id, {"title": "Done"})
    server.wait_status(run_id, "completed")
    if seen:
        session.present(lambda v: _kinds(v) == ["terminal"])
    server.kill()
    server.start()
    session.attach()
    view = session.present(lambda v: _kinds(v) == ["terminal"])
    assert view["messages"][0]["body"]["status"] == "completed"
    assert session.presented == ["notification", "step", "terminal"]
    assert session.report()["sent"] == [view["messages"][0]["workflowMessageId"]]
    # Nothing is left to present, and reporting the same branch again changes nothing.
    after = session.present(lambda v: True)
    assert after["messages"] == []
    assert after["activeRequest"] is None
    assert session.report() == {"sent": [], "resumed": []}
    assert session.presented == ["notification", "step", "terminal"]
    rows = server.query(
        "SELECT kind, status, entry_id FROM workflow_messages WHERE run_id = ?"
        " ORDER BY created_at, rowid",
        run_id,
    )
    assert [(kind, status) for kind, status, _ in rows] == [
        ("notification", "sent"),
        ("step", "sent"),
        ("terminal", "sent"),
    ]
    assert sorted(entry for _, _, entry in rows) == sorted(session.branch.values())
    assert server.diagnose() == []
