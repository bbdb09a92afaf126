"""Follow-up prompts through real processes: queued on a run, sent to its origin session in
order only after the run completed and its result was delivered, cancelled otherwise.

The origin session is played by the Python client, as the Pi extension's coordinator does
(``session.attach``, ``session.get``, ``workflowMessage.report``): the tests check what the
session is given to add, and when, and what each follow-up became (``run follow-ups``), and
``state diagnose``.
"""

from __future__ import annotations

from typing import Any

import pytest

from pi_workflows.client import NotFoundError, RejectedError

from support.server import ServerProcess, wait_for

SESSION = "session-follow"

ASK = """
from pi_workflows import Workflow, checkpoint, compute, edge, subworkflow

def finish(ctx):
    if ctx.outputs["ask"] == "fail":
        raise ValueError("told to fail")
    return {"answer": ctx.outputs["ask"]}

workflow = Workflow(
    "ask",
    start="ask",
    nodes={"ask": checkpoint("Go on?"), "finish": compute(finish)},
    edges=[edge("ask", "finish")],
)
"""


def _waiting(server: ServerProcess, **kwargs: Any) -> str:
    server.write_workflow("ask", ASK)
    run_id = server.start_run("ask", **kwargs)
    server.wait_status(run_id, "waiting")
    return run_id


def _answer(server: ServerProcess, run_id: str, value: Any = "ok") -> None:
    view = server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.answer_checkpoint(run_id, value, view["waitingOn"]["requestId"], wait=None)


def _pending(server: ServerProcess, session: str = SESSION) -> list[dict[str, Any]]:
    with server.client() as client:
        return list(client.get_session(session)["messages"])


def _report(server: ServerProcess, messages: list[dict[str, Any]], epoch: int) -> Any:
    with server.client() as client:
        present = {m["workflowMessageId"]: f"entry-{m['workflowMessageId']}" for m in messages}
        return client.report_messages(SESSION, epoch, present, idle=True)


def _statuses(server: ServerProcess, run_id: str) -> list[tuple[int, str]]:
    with server.client() as client:
        listed = client.follow_ups(run_id)["followUps"]
    return [(f["seq"], f["status"]) for f in listed]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_follow_ups_are_sent_in_order_only_after_the_result_was_delivered(
    server: ServerProcess,
) -> None:
    """Two follow-ups queued (the CLI and the client) on a waiting run stay queued through its
    completion, and while its result message waits for the session; the report that proves
    the result delivered makes them the session's next messages, in queue order, each once;
    their reports mark them sent."""
    run_id = _waiting(server, origin_session=SESSION)
    queued = server.cli("run", "follow-up", run_id, "--prompt", "Now open a pull request")
    assert queued.returncode == 0, queued.stderr
    assert "queued as #1" in queued.stdout
    with server.client() as client:
        epoch = client.attach_session(SESSION)
        second = client.follow_up(run_id, "And tell the team\nin two lines")
    assert second["seq"] == 2
    step = [m for m in _pending(server) if m["kind"] == "step"]
    _report(server, step, epoch)
    _answer(server, run_id)
    server.wait_status(run_id, "completed")
    [terminal] = wait_for(lambda: _pending(server), 30, "the result message")
    assert terminal["kind"] == "terminal"
    assert _statuses(server, run_id) == [(1, "queued"), (2, "queued")]
    _report(server, [terminal], epoch)
    follow = _pending(server)
    assert [(m["kind"], m["text"]) for m in follow] == [
        ("followUp", "Now open a pull request"),
        ("followUp", "And tell the team\nin two lines"),
    ]
    assert _statuses(server, run_id) == [(1, "ready"), (2, "ready")]
    _report(server, follow[:1], epoch)
    assert [m["text"] for m in _pending(server)] == ["And tell the team\nin two lines"]
    _report(server, follow, epoch)
    _report(server, follow, epoch)  # a report repeated after a reconnect changes nothing
    assert _pending(server) == []
    assert _statuses(server, run_id) == [(1, "sent"), (2, "sent")]
    assert server.query(
        "SELECT COUNT(*) FROM workflow_messages WHERE run_id = ? AND kind = 'followUp'", run_id
    ) == [(2,)]
    listing = server.cli("run", "follow-ups", run_id)
    assert "#1" in listing.stdout
    assert "sent" in listing.stdout
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("end", ["failed", "cancelled"])
def test_a_run_that_does_not_complete_cancels_its_follow_ups_with_the_reason(
    server: ServerProcess, end: str
) -> None:
    """A failure or a cancel cancels every queued follow-up, saying why; nothing of them
    reaches the session, and the result message is still delivered."""
    run_id = _waiting(server, origin_session=SESSION)
    with server.client() as client:
        client.follow_up(run_id, "one")
        client.follow_up(run_id, "two")
        epoch = client.attach_session(SESSION)
        if end == "failed":
            _answer(server, run_id, "fail")
        else:
            client.cancel(run_id, "not needed")
    server.wait_status(run_id, end)
    terminal = wait_for(
        lambda: [m for m in _pending(server) if m["kind"] == "terminal"], 30, "the result"
    )
    _report(server, _pending(server), epoch)
    assert _pending(server) == []
    with server.client() as client:
        listed = client.follow_ups(run_id)["followUps"]
    assert [f["status"] for f in listed] == ["cancelled", "cancelled"]
    reason = "the run failed" if end == "failed" else "the run was cancelled"
    assert all(f["reason"].startswith(reason) for f in listed)
    assert terminal
    listing = server.cli("run", "follow-ups", run_id)
    assert f"cancelled: {reason}" in listing.stdout
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_follow_ups_are_refused_where_they_could_not_be_delivered_and_bounded(
    server: ServerProcess,
) -> None:
    """A run with no origin session, an ended run, a child run, an empty or too long text
    and a 21st waiting follow-up are each refused with one line; a queued follow-up can be
    removed, one being sent cannot."""
    outside = _waiting(server)
    with server.client() as client, pytest.raises(RejectedError) as nowhere:
        client.follow_up(outside, "hello")
    assert nowhere.value.code == "followUpRefused"
    assert "has no origin session" in str(nowhere.value)
    cli = server.cli("run", "follow-up", outside, "--prompt", "hello")
    assert cli.returncode == 1
    assert len(cli.stderr.strip().splitlines()) == 1
    assert "has no origin session" in cli.stderr
    run_id = _waiting(server, origin_session=SESSION)
    with server.client() as client:
        with pytest.raises(RejectedError, match="65537 characters long; the limit is 65536"):
            client.follow_up(run_id, "x" * 65_537)
        with pytest.raises(RejectedError, match="text is empty"):
            client.follow_up(run_id, "  ")
        made = [client.follow_up(run_id, f"prompt {n}") for n in range(20)]
        with pytest.raises(RejectedError, match="already has 20 follow-ups waiting"):
            client.follow_up(run_id, "one too many")
        client.remove_follow_up(made[3]["followUpId"], run_id=run_id)
        with pytest.raises(RejectedError, match="it was removed already"):
            client.remove_follow_up(made[3]["followUpId"])
        with pytest.raises(NotFoundError):
            client.remove_follow_up("fup_nothing")
        epoch = client.attach_session(SESSION)
    _report(server, [m for m in _pending(server) if m["kind"] == "step"], epoch)
    _answer(server, run_id)
    server.wait_status(run_id, "completed")
    _report(server, wait_for(lambda: _pending(server), 30, "the result"), epoch)
    follow = _pending(server)
    assert len(follow) == 19
    assert "prompt 3" not in [m["text"] for m in follow]
    with server.client() as client:
        with pytest.raises(RejectedError, match="it is being sent"):
            client.remove_follow_up(made[0]["followUpId"])
        with pytest.raises(RejectedError, match="has ended"):
            client.follow_up(run_id, "late")
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "point", ["sessions.report_messages.before_commit", "sessions.report_messages.after_commit"]
)
def test_a_server_killed_while_releasing_follow_ups_sends_each_once(
    server_process: ServerProcess, point: str
) -> None:
    """The server dies (as SIGKILL would) at the commit of the report that proves the result
    delivered (the one that releases the follow-ups): the next server, given the same report
    again, releases each follow-up exactly once, in order."""
    server = server_process.start()
    run_id = _waiting(server, origin_session=SESSION)
    with server.client() as client:
        client.follow_up(run_id, "first")
        client.follow_up(run_id, "second")
        epoch = client.attach_session(SESSION)
    _report(server, [m for m in _pending(server) if m["kind"] == "step"], epoch)
    _answer(server, run_id)
    server.wait_status(run_id, "completed")
    terminal = wait_for(lambda: _pending(server), 30, "the result")
    server.stop()
    server.start(faults=f"{point}=exit")
    with server.client() as client:
        epoch = client.attach_session(SESSION)
    with pytest.raises(Exception):  # noqa: B017, PT011 - the server dies mid-answer
        _report(server, terminal, epoch)
    assert server.wait_exit(30) != 0
    server.start()
    with server.client() as client:
        epoch = client.attach_session(SESSION)
    _report(server, terminal, epoch)
    follow = _pending(server)
    assert [m["text"] for m in follow] == ["first", "second"]
    _report(server, follow, epoch)
    assert _statuses(server, run_id) == [(1, "sent"), (2, "sent")]
    assert server.query(
        "SELECT COUNT(*) FROM workflow_messages WHERE run_id = ? AND kind = 'followUp'", run_id
    ) == [(2,)]
    assert server.diagnose() == []
