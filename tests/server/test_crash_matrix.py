"""Kill a live server (as SIGKILL would) at the commit points of the main path, end to end.

Each case arms one fault point in the first server process. Whatever dies there, a fresh
server must finish the run with every node completed exactly once, the idempotent effect's
body seen with only one key, the client's receipts intact, and ``state diagnose`` clean.
The interactive points (a submission, a decision, a session's reports, a request's
deadline) are driven by a second workflow whose run has an origin session played by the
Python client; there the oracle also holds every workflow message presented once.
Every declared commit point (these and all the others) is crashed by an exception and by a
process exit in ``tests/store/test_commit_points.py``; this matrix adds the real processes.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.client import ClientError, RejectedError

from support.server import ServerProcess, wait_for

WORKFLOW = """
from pathlib import Path
from pi_workflows import (Rejected, Workflow, action, checkpoint, compute, edge,
                          idempotent_effect)

LEDGER = Path({ledger!r})

def record(ctx):
    with LEDGER.open("a") as ledger:
        ledger.write(ctx.effect_key + "\\n")
    return {{"recorded": True}}

def must_go(answer, ctx):
    if answer.get("go") is not True:
        raise Rejected("say go")

workflow = Workflow(
    "matrix",
    start="prepare",
    nodes={{
        "prepare": compute(lambda ctx: {{"n": 1}}),
        "ask": checkpoint(lambda ctx: {{"question": "go?"}}, validate=must_go),
        "record": action(record, effect=idempotent_effect("ledger")),
        "finish": compute(lambda ctx: {{"answer": ctx.outputs["ask"], "n": 2}}),
    }},
    edges=[edge("prepare", "ask"), edge("ask", "record"), edge("record", "finish")],
)
"""

POINTS = [
    "command.run.start",
    "runners.launch",
    "runners.ready",
    "runner.node.start",
    "runner.node.finish",
    "runner.node.wait",
    "command.checkpoint.answer",
    "runner.interaction.reject",
    "runner.effect.reserve",
    "runner.effect.settle",
    "runners.exited",
]
CLIENT = "matrix-client"


def _restart_if_dead(server: ServerProcess) -> bool:
    assert server.process is not None
    if server.process.poll() is None:
        return False
    assert server.process.returncode == 137, server.tail()
    server.remember_children()
    server.start()
    return True


def _command(server: ServerProcess, call: Any) -> Any:
    """Send a command; if the armed server died under it, restart and retry the same key."""
    for _ in range(3):
        try:
            with server.client(client_id=CLIENT, timeout=10) as client:
                return call(client)
        except ClientError:
            try:
                server.wait_exit(30)
            except subprocess.TimeoutExpired:
                raise
            _restart_if_dead(server)
    raise AssertionError("the command never went through")


def _rejection(client: Any, run_id: str) -> RejectedError:
    """The refused answer's error (a refusal is the expected outcome, not a failure)."""
    try:
        client.answer_checkpoint(run_id, {"go": False}, idempotency_key="refused")
    except RejectedError as exc:
        if exc.code == "validationRejected":
            return exc
        raise
    raise AssertionError("the refused answer was accepted")


def _settled(server: ServerProcess, run_id: str, wanted: str) -> bool:
    if _restart_if_dead(server):
        return False
    try:
        return str(server.run(run_id)["status"]) == wanted
    except ClientError:
        return False


@pytest.mark.parametrize("phase", ["before_commit", "after_commit"])
@pytest.mark.parametrize("point", POINTS)
def test_a_server_killed_at_a_commit_point_loses_nothing(
    server_process: ServerProcess, tmp_path: Path, point: str, phase: str
) -> None:
    """Window: the server process exits just before / after the commit named ``point``."""
    ledger = tmp_path / "ledger.txt"
    server = server_process
    server.write_workflow("matrix", WORKFLOW.format(ledger=str(ledger)))
    server.start(faults=f"{point}.{phase}=exit")
    first = _command(
        server,
        lambda c: c.start_run("matrix", {}, project_dir=server.project, idempotency_key="start"),
    )
    run_id = str(first["runId"])
    wait_for(lambda: _settled(server, run_id, "waiting"), 60, "the run to wait")
    refused = _command(server, lambda c: _rejection(c, run_id))
    assert refused.message == "say go"
    wait_for(lambda: _settled(server, run_id, "waiting"), 60, "the run to wait again")
    answered = _command(
        server, lambda c: c.answer_checkpoint(run_id, {"go": True}, idempotency_key="answer")
    )
    wait_for(lambda: _settled(server, run_id, "completed"), 60, "the run to complete")
    view = server.run(run_id)
    assert view["output"] == {"answer": {"go": True}, "n": 2}
    completed = Counter(a["nodeId"] for a in view["attempts"] if a["status"] == "completed")
    assert completed == {"prepare": 1, "ask": 1, "record": 1, "finish": 1}
    keys = ledger.read_text().splitlines()
    assert len(set(keys)) == 1, keys
    if point == "runner.effect.settle" and phase == "after_commit":
        assert len(keys) == 1
    assert [e["status"] for e in view["effects"]] == ["applied"]
    # Receipts are intact: repeating both commands adopts the stored receipts.
    with server.client(client_id=CLIENT) as client:
        again = client.start_run("matrix", {}, project_dir=server.project, idempotency_key="start")
        assert again["runId"] == run_id
        assert again.adopted
        repeat = client.answer_checkpoint(run_id, {"go": True}, idempotency_key="answer")
        assert repeat.adopted
        assert repeat["requestId"] == answered["requestId"]
        assert _rejection(client, run_id).message == "say go"  # the refusal is durable too
    assert server.diagnose() == []
    assert len(server.query("SELECT run_id FROM runs")) == 1
    # The fault point was really hit: exactly one server died and one replaced it.
    assert server.query("SELECT epoch FROM server_state") == [(2,)]


# --- interactive steps ------------------------------------------------------------------

TALK = """
from pi_workflows import (Rejected, Workflow, agent, checkpoint, choice, compute, edge,
                          human_decision, notify, switch)

def must_title(output, ctx):
    if not output.get("title"):
        raise Rejected("say a title")

workflow = Workflow(
    "talk",
    start="hello",
    nodes={
        "hello": notify(lambda ctx: "Starting"),
        "write": agent(prompt="Write a title", expected_output='{"title": "..."}',
                       validate=must_title),
        "ship": human_decision(title="Ship?", choices=[choice("yes"), choice("no")]),
        "late": checkpoint(lambda ctx: {"question": "anything else?"}, timeout=1),
        "finish": compute(lambda ctx: {"title": ctx.outputs["write"]["title"],
                                       "ship": ctx.outputs["ship"]["choice"],
                                       "late": ctx.results["late"]["outcome"]}),
    },
    edges=[edge("hello", "write"), edge("write", "ship"), edge("ship", "late"),
           switch("late", on="$result.outcome", cases={"timed_out": "finish"})],
)
"""

INTERACTIVE_POINTS = [
    "command.interaction.submit",
    "command.decision.answer",
    "sessions.report_messages",
    "sessions.report_turn",
    "lifecycle.expire_request",
]
SESSION = "matrix-session"


class Coordinator:
    """The run's origin session: presents each workflow message once (its branch maps
    message ids to entry ids) and reports the whole branch. After the server died under a
    report it attaches again, as the Pi extension does; a lost turn report is not repeated
    (the extension does not either), a message report is (the next one carries it)."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.branch: dict[str, str] = {}
        self.presented: list[str] = []
        self.epoch = 0
        self.seat = "matrix-seat"  # one seat: the same Pi process attaches again
        self.turn_open = False  # idle (every turn reported ended) only while none is open

    def _session(self, call: Any, *, again: bool) -> Any:
        for _ in range(3):
            try:
                with self.server.client(client_id=CLIENT, timeout=10) as client:
                    if not self.epoch:
                        self.epoch = client.attach_session(SESSION, seat_id=self.seat)
                    return call(client)
            except ClientError:
                self.server.wait_exit(30)
                _restart_if_dead(self.server)
                self.epoch = 0
                if not again:
                    return None
        raise AssertionError("the session never got through")

    def sync(self) -> dict[str, Any]:
        """Present what the view adds that the branch lacks, then report the branch."""

        def call(client: Any) -> dict[str, Any]:
            view = client.get_session(SESSION)
            for message in view["messages"]:
                if message["workflowMessageId"] not in self.branch:
                    self.branch[message["workflowMessageId"]] = f"entry-{len(self.branch)}"
                    self.presented.append(message["workflowMessageId"])
                    # As in Pi: a step is sent with its turn, so the session is busy now.
                    self.turn_open = self.turn_open or message["kind"] == "step"
            client.report_messages(SESSION, self.epoch, self.branch, idle=not self.turn_open)
            return dict(view)

        return dict(self._session(call, again=True))

    def turn(self, event: str, **fields: Any) -> None:
        """Report a model turn once."""
        self.turn_open = event == "started"
        self._session(lambda c: c.report_turn(SESSION, self.epoch, event, **fields), again=False)


def _waiting_on(server: ServerProcess, run_id: str, kind: str) -> dict[str, Any] | None:
    if not _settled(server, run_id, "waiting"):
        return None
    waiting = server.run(run_id).get("waitingOn") or {}
    return waiting if waiting.get("kind") == kind else None


def _refused_submit(client: Any, request_id: str) -> RejectedError:
    """The refused submission's error (a refusal is the expected outcome, not a failure)."""
    try:
        client.submit(request_id, {"title": ""}, idempotency_key="refused")
    except RejectedError as exc:
        if exc.code == "validationRejected":
            return exc
        raise
    raise AssertionError("the refused submission was accepted")


@pytest.mark.parametrize("phase", ["before_commit", "after_commit"])
@pytest.mark.parametrize("point", INTERACTIVE_POINTS)
def test_a_server_killed_at_an_interactive_commit_point_loses_nothing(
    server_process: ServerProcess, point: str, phase: str
) -> None:
    """Window: the server process exits just before / after the commit named ``point``
    while a run of an origin session is submitted to, decided, reported on and timed out."""
    server = server_process
    server.write_workflow("talk", TALK)
    server.start(faults=f"{point}.{phase}=exit")
    first = _command(
        server,
        lambda c: c.start_run(
            "talk", {}, project_dir=server.project, origin_session=SESSION,
            idempotency_key="start",
        ),
    )  # fmt: skip
    run_id = str(first["runId"])
    session = Coordinator(server)
    write = wait_for(lambda: _waiting_on(server, run_id, "agent"), 60, "the agent step")
    view = session.sync()
    step = view["activeRequest"]["workflowMessageId"]
    session.turn("started", workflow_message_id=step)
    request_id = str(write["requestId"])
    refused = _command(server, lambda c: _refused_submit(c, request_id))
    assert refused.message == "say a title"
    answered = _command(
        server, lambda c: c.submit(request_id, {"title": "T"}, idempotency_key="answer")
    )
    assert answered["status"] == "accepted"
    session.turn("ended", stop_reason="completed")
    wait_for(lambda: _waiting_on(server, run_id, "decision"), 60, "the decision")
    session.sync()
    decided = _command(server, lambda c: c.answer_decision(run_id, "yes", idempotency_key="ship"))
    wait_for(lambda: _settled(server, run_id, "completed"), 60, "the run to complete")
    final = session.sync()
    assert [m["kind"] for m in final["messages"]] == ["terminal"]
    view = server.run(run_id)
    assert view["output"] == {"title": "T", "ship": "yes", "late": "timed_out"}
    settled = Counter((a["nodeId"], a["status"]) for a in view["attempts"])
    assert settled == {
        ("hello", "completed"): 1,
        ("write", "completed"): 1,
        ("ship", "completed"): 1,
        ("late", "timed_out"): 1,
        ("finish", "completed"): 1,
    }
    # Receipts are intact: each command again adopts (or, refused, is refused again).
    with server.client(client_id=CLIENT) as client:
        again = client.submit(request_id, {"title": "T"}, idempotency_key="answer")
        assert (again.adopted, again["submissionId"]) == (True, answered["submissionId"])
        repeat = client.answer_decision(run_id, "yes", idempotency_key="ship")
        assert repeat["requestId"] == decided["requestId"]
        assert _refused_submit(client, request_id).message == "say a title"
        after = client.get_session(SESSION)
    assert after["messages"] == []
    assert after["activeRequest"] is None
    # Every message was presented once, and each reached the session once (or was
    # withdrawn unsent: the late step, if its deadline came first).
    assert len(session.presented) == len(set(session.presented))
    rows = server.query(
        "SELECT message_id, kind, status, resumed FROM workflow_messages WHERE run_id = ?"
        " ORDER BY created_at, rowid",
        run_id,
    )
    assert [kind for _, kind, _, _ in rows] == [
        "notification", "step", "decision", "step", "terminal"
    ]  # fmt: skip
    assert all(resumed == 0 for *_, resumed in rows)
    for message_id, kind, status, _ in rows:
        wanted = {"sent", "cancelled"} if kind == "step" and message_id != step else {"sent"}
        assert status in wanted, (kind, status)
        assert (status == "sent") == (message_id in session.branch)
    submissions = server.query("SELECT status FROM interactive_submissions ORDER BY rowid")
    assert submissions == [("rejected",), ("accepted",)]
    turns = server.query("SELECT status, stop_reason FROM workflow_turns")
    assert turns == [("ended", "completed")] or (point, turns) == ("sessions.report_turn", [])
    assert server.query("SELECT resolution, choice_id FROM human_decision_resolutions") == [
        ("answered", "yes")
    ]
    assert server.diagnose() == []
    assert len(server.query("SELECT run_id FROM runs")) == 1
    assert server.query("SELECT epoch FROM server_state") == [(2,)]
