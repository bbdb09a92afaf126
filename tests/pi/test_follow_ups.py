"""Follow-up prompts from and to the real Pi: queued with `/workflow queue-follow-up` and the
CLI, presented in the run's origin session only after its result, in queue order, each
exactly once, across a Pi restart and a server killed while one is being delivered.

The session's entries (what Pi keeps) and the scripted model's requests (what the model
was sent) are the oracles, with the server's follow-up rows.
"""

from __future__ import annotations

import threading
from typing import Any

from pi.support.mock_provider import ChatRequest, MockProvider, Reply, text, user_text_contains
from pi.support.pi_rpc import MakePi, PiProcess
from pi.support.records import content_text, workflow_messages

from support.server import ServerProcess, wait_for

SESSION = "follow-session"
CHECKPOINT_MARK = "--- Workflow checkpoint ---"
TERMINAL_MARK = "--- Workflow run finished ---"
ONE = "FOLLOW ONE: now open a pull request"
TWO = "FOLLOW TWO: and tell the team"

ASK = """
from pi_workflows import Workflow, checkpoint, compute, edge

workflow = Workflow(
    "ask",
    start="ask",
    nodes={"ask": checkpoint("Go on?"), "done": compute(lambda ctx: {"ok": True})},
    edges=[edge("ask", "done")],
)
"""


def _rules(provider: MockProvider, one: Any = None) -> None:
    provider.on(user_text_contains(CHECKPOINT_MARK), text("Waiting for the person."))
    provider.on(user_text_contains(TERMINAL_MARK), text("The run finished."))
    provider.on(user_text_contains(ONE), one or text("Opened it."))
    provider.on(user_text_contains(TWO), text("Told them."))


def _waiting_run(server: ServerProcess) -> str:
    server.write_workflow("ask", ASK)
    run_id = server.start_run("ask", origin_session=SESSION)
    server.wait_status(run_id, "waiting")
    return run_id


def _answer(server: ServerProcess, run_id: str) -> None:
    view = server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.answer_checkpoint(run_id, "go", view["waitingOn"]["requestId"], wait=None)
    server.wait_status(run_id, "completed")


def _statuses(server: ServerProcess, run_id: str) -> list[str]:
    rows = server.query("SELECT status FROM run_follow_ups WHERE run_id = ? ORDER BY seq", run_id)
    return [str(row[0]) for row in rows]


def _last_user_texts(provider: MockProvider) -> list[str]:
    return [r.user_texts()[-1] for r in provider.requests() if r.user_texts()]


def _idle(pi: PiProcess) -> None:
    """Wait until Pi streams no turn."""
    wait_for(lambda: not pi.command({"type": "get_state"})["data"]["isStreaming"], 30, "idle")


def _follow_entries(pi: PiProcess) -> list[str]:
    return [content_text(e) for e in workflow_messages(pi.entries(), "followUp")]


def test_follow_ups_come_after_the_result_in_order_and_once_across_a_pi_restart(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """Two follow-ups (the Pi command without a run id, and the CLI) wait while the run
    waits; the run completes while no Pi is open; the next Pi on the session presents the
    result, then follow-up 1, then 2, each in a turn of its own; a third Pi presents
    nothing again."""
    _rules(provider)
    run_id = _waiting_run(server)
    first = make_pi(session_id=SESSION)
    wait_for(lambda: workflow_messages(first.entries(), "step"), 30, "the checkpoint's step")
    _idle(first)
    queued = first.slash(f"/workflow queue-follow-up {ONE}")
    assert queued["message"].startswith("Queued follow-up fup_")
    assert f"(#1) on run {run_id}" in queued["message"]
    cli = server.cli("run", "follow-up", run_id, "--prompt", TWO)
    assert cli.returncode == 0, cli.stderr
    listed = first.slash(f"/workflow follow-ups {run_id}")
    assert "#1" in listed["message"]
    assert "queued (sent after the run completes)" in listed["message"]
    first.stop()

    _answer(server, run_id)
    assert _statuses(server, run_id) == ["queued", "queued"]
    second = make_pi(session_id=SESSION)
    wait_for(lambda: _statuses(server, run_id) == ["sent", "sent"], 60, "both follow-ups sent")
    _idle(second)

    texts = _last_user_texts(provider)
    at = [next(i for i, t in enumerate(texts) if mark in t) for mark in (TERMINAL_MARK, ONE, TWO)]
    assert at == sorted(at), texts
    assert [sum(mark in t for t in texts) for mark in (ONE, TWO)] == [1, 1]
    assert _follow_entries(second) == [ONE, TWO]
    second.stop()

    asked = len(provider.requests())
    third = make_pi(session_id=SESSION)
    wait_for(
        lambda: (
            server.query("SELECT coordinator_epoch FROM sessions WHERE session_id = ?", SESSION)
            == [(3,)]
        ),
        30,
        "the third Pi to attach",
    )
    _idle(third)
    assert _follow_entries(third) == [ONE, TWO]
    assert len(provider.requests()) == asked
    assert server.diagnose() == []


def test_a_server_killed_while_a_follow_up_is_delivered_leaves_each_sent_once(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The server is SIGKILLed while the model works on follow-up 1 (its reply held back);
    a new server takes over, Pi reconnects, and follow-up 1 is not presented again while
    follow-up 2 comes after it: each is in the session once and marked sent once."""
    gate, reached = threading.Event(), threading.Event()

    def held(_request: ChatRequest) -> Reply:
        reached.set()
        gate.wait(60)
        return Reply(text="Opened it.")

    _rules(provider, held)
    run_id = _waiting_run(server)
    with server.client() as client:
        client.follow_up(run_id, ONE)
        client.follow_up(run_id, TWO)
    pi = make_pi(session_id=SESSION)
    wait_for(lambda: _last_user_texts(provider), 30, "the checkpoint's turn")
    _answer(server, run_id)
    wait_for(reached.is_set, 60, "follow-up 1's turn")
    server.kill()
    server.start()
    gate.set()
    wait_for(lambda: _statuses(server, run_id) == ["sent", "sent"], 60, "both follow-ups sent")
    _idle(pi)
    assert _follow_entries(pi) == [ONE, TWO]
    texts = _last_user_texts(provider)
    assert [sum(mark in t for t in texts) for mark in (ONE, TWO)] == [1, 1]
    assert server.query(
        "SELECT COUNT(*) FROM workflow_messages WHERE run_id = ? AND kind = 'followUp'"
        " AND status = 'sent'",
        run_id,
    ) == [(2,)]
    assert server.diagnose() == []
