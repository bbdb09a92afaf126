"""Interactive steps through the real server: submissions validated in a runner child.

The Python client plays the Pi session. Every submission is recorded ``validating``, a
supervised runner runs the node's ``validate``, and the submitter hears the durable outcome:
accepted (the step is answered and the run goes on) or rejected (the exact message; the
step stays open for a corrected submission).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from pi_workflows.client import ClientError, ConflictError, RejectedError

from support.server import ServerProcess, wait_for

STEP = """
import json, os
from pathlib import Path
from pi_workflows import (Rejected, Workflow, agent, checkpoint, choice, compute, edge,
                          human_decision, seconds, switch)

PIDS = Path({pids!r})

def check(output, ctx):
    with PIDS.open("a") as out:
        out.write(json.dumps({{"pid": os.getpid(), "ppid": os.getppid()}}) + "\\n")
    if output.get("route") not in ("fix", "skip"):
        raise Rejected("route must be fix or skip")

workflow = Workflow(
    "step",
    start="classify",
    nodes={{
        "classify": agent(prompt="Classify the report", expected_output='{{"route": "fix"}}',
                          validate=check, timeout={timeout}),
        "done": compute(lambda ctx: {{"route": ctx.outputs["classify"]["route"],
                                      "result": ctx.results["classify"]["outcome"]}}),
        "late": compute(lambda ctx: {{"result": ctx.results["classify"]["outcome"]}}),
    }},
    edges=[switch("classify", on="$result.outcome",
                  cases={{"ok": "done", "failed": "done", "timed_out": "late"}})],
)
"""


def _step(server: ServerProcess, tmp_path: Path, timeout: float = 600) -> Path:
    pids = tmp_path / "validate-pids.txt"
    server.write_workflow("step", STEP.format(pids=str(pids), timeout=timeout))
    return pids


def _waiting(server: ServerProcess, **start: Any) -> tuple[str, str]:
    run_id = server.start_run("step", **start)
    view = server.wait_status(run_id, "waiting")
    return run_id, str(view["waitingOn"]["requestId"])


def test_a_rejected_submission_keeps_the_step_open_and_a_corrected_one_continues(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Reject with the exact validation message, then accept a corrected submission for the
    same request; validate ran only in runner children of the server."""
    pids = _step(server, tmp_path)
    run_id, request_id = _waiting(server)
    with server.client() as client:
        with pytest.raises(RejectedError) as rejected:
            client.submit(request_id, {"route": "maybe"})
        assert rejected.value.code == "validationRejected"
        assert rejected.value.message == "route must be fix or skip"
        view = server.wait_status(run_id, "waiting")
        assert view["waitingOn"]["requestId"] == request_id
        assert view["waitingOn"]["status"] == "pending"
        receipt = client.submit(request_id, {"route": "fix"})
    assert receipt["status"] == "accepted"
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"route": "fix", "result": "ok"}
    classify = [a for a in done["attempts"] if a["nodeId"] == "classify"]
    assert [a["status"] for a in classify] == ["completed"]  # one attempt, answered once
    seen = [json.loads(line) for line in pids.read_text().splitlines()]
    assert len(seen) == 2
    assert server.process is not None
    template = [c.pid for c in psutil.Process(server.process.pid).children()]
    for entry in seen:
        assert entry["pid"] not in (os.getpid(), server.process.pid)
        # A runner the server supervises: its child, or forked from its runner template.
        assert entry["ppid"] == server.process.pid or entry["ppid"] in template
    assert server.diagnose() == []


def test_a_duplicate_submission_adopts_and_a_changed_one_conflicts(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The same key and payload get the same submission's outcome, also after it settled;
    the same key with another payload is a conflict."""
    _step(server, tmp_path)
    run_id, request_id = _waiting(server)
    with server.client(client_id="session-1") as client:
        first = client.submit(request_id, {"route": "skip"}, idempotency_key="k-1")
        server.wait_status(run_id, "completed")
        again = client.submit(request_id, {"route": "skip"}, idempotency_key="k-1")
        assert again.adopted
        assert again["submissionId"] == first["submissionId"]
        assert again["status"] == "accepted"
        with pytest.raises(ConflictError):
            client.submit(request_id, {"route": "fix"}, idempotency_key="k-1")
        with pytest.raises(RejectedError) as closed:
            client.submit(request_id, {"route": "fix"}, idempotency_key="k-2")
        assert closed.value.code == "requestClosed"
    assert len(server.query("SELECT 1 FROM interactive_submissions")) == 1


def test_a_stale_revision_is_refused_and_nothing_is_recorded(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``expectedRevision`` older than the run's is a ``revisionConflict``."""
    _step(server, tmp_path)
    run_id, request_id = _waiting(server)
    revision = int(server.run(run_id)["revision"])
    with server.client() as client, pytest.raises(ConflictError) as stale:
        client.call(
            "interaction.submit",
            {"requestId": request_id, "output": {"route": "fix"}},
            expected_revision=revision - 1,
        )
    assert stale.value.code == "revisionConflict"
    assert server.query("SELECT COUNT(*) FROM interactive_submissions") == [(0,)]


def test_a_validation_runner_that_dies_rejects_only_that_submission(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Window: the runner validating a submission is killed; that submission is rejected
    with "validation did not finish", and a corrected retry of the same request works."""
    server.write_workflow(
        "dies",
        f"""
        import os
        from pathlib import Path
        from pi_workflows import Workflow, agent

        ONCE = Path({str(tmp_path / "died")!r})

        def check(output, ctx):
            if not ONCE.exists():
                ONCE.write_text("x")
                os.kill(os.getpid(), 9)

        workflow = Workflow("dies", start="a", nodes={{"a": agent(
            prompt="p", expected_output="{{}}", validate=check)}}, edges=[])
        """,
    )
    run_id = server.start_run("dies")
    request_id = server.wait_status(run_id, "waiting")["waitingOn"]["requestId"]
    with server.client() as client:
        with pytest.raises(RejectedError, match=r"^validation did not finish: "):
            client.submit(request_id, {"n": 1})
        assert server.run(run_id)["waitingOn"]["status"] == "pending"
        assert client.submit(request_id, {"n": 2})["status"] == "accepted"
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"n": 2}
    assert server.diagnose() == []


DECIDE = """
from pi_workflows import Workflow, checkpoint, choice, compute, edge, human_decision

workflow = Workflow(
    "decide",
    start="ask",
    nodes={
        "ask": checkpoint(lambda ctx: {"question": "go on?"}),
        "ship": human_decision(title="Ship?", choices=[choice("yes"), choice("no")]),
        "done": compute(lambda ctx: {"ask": ctx.outputs["ask"], "ship": ctx.outputs["ship"]}),
    },
    edges=[edge("ask", "ship"), edge("ship", "done")],
)
"""


def test_the_model_path_answers_a_checkpoint_but_never_a_decision(
    server: ServerProcess,
) -> None:
    """``interaction.submit`` answers an ordinary checkpoint; on a protected decision both it
    and ``checkpoint.answer`` are refused with the exact message."""
    server.write_workflow("decide", DECIDE)
    run_id = server.start_run("decide")
    ask = server.wait_status(run_id, "waiting")["waitingOn"]
    assert ask["kind"] == "checkpoint"
    with server.client() as client:
        client.submit(str(ask["requestId"]), {"yes": True})
        ship = wait_for(
            lambda: (
                (server.run(run_id).get("waitingOn") or {}).get("kind") == "decision"
                and server.run(run_id)["waitingOn"]
            ),
            30,
            "the decision",
        )
        for attempt in (
            lambda: client.submit(str(ship["requestId"]), {"choice": "yes"}),
            lambda: client.answer_checkpoint(run_id, {"choice": "yes"}),
        ):
            with pytest.raises(RejectedError) as refused:
                attempt()
            assert refused.value.message == (
                "Protected human decisions cannot be answered by the workflow tool"
            )
        client.answer_decision(run_id, "no")
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"]["ship"] == {"choice": "no", "decidedBy": "person"}


def test_concurrent_decision_answers_have_exactly_one_winner(server: ServerProcess) -> None:
    """Two people answer at once: one wins, the other gets ``decisionResolved`` naming it."""
    server.write_workflow("decide", DECIDE)
    run_id = server.start_run("decide")
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.answer_checkpoint(run_id, {"go": True})
    wait_for(
        lambda: (server.run(run_id).get("waitingOn") or {}).get("kind") == "decision",
        30,
        "the decision",
    )
    barrier = threading.Barrier(2)
    outcomes: dict[str, Any] = {}

    def answer(choice: str) -> None:
        with server.client(client_id=f"person-{choice}") as client:
            barrier.wait(10)
            try:
                outcomes[choice] = client.answer_decision(run_id, choice)["choice"]
            except ConflictError as exc:
                outcomes[choice] = exc

    threads = [threading.Thread(target=answer, args=(c,)) for c in ("yes", "no")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    winners = [c for c, o in outcomes.items() if not isinstance(o, Exception)]
    losers = [o for o in outcomes.values() if isinstance(o, ConflictError)]
    assert len(winners) == 1
    assert len(losers) == 1
    assert losers[0].code == "decisionResolved"
    assert f"answered {winners[0]!r}" in losers[0].message
    resolutions = server.query("SELECT resolution, choice_id FROM human_decision_resolutions")
    assert resolutions == [("answered", winners[0])]
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"]["ship"]["choice"] == winners[0]


def test_an_agent_deadline_that_passes_while_the_server_is_down_routes_the_same_attempt(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: the step's deadline passes with no server running; the next server closes the
    request and a runner records that same attempt as ``timed_out``, routing its timeout."""
    _step(server_process, tmp_path, timeout=1.0)
    server_process.start()
    run_id, request_id = _waiting(server_process)
    attempt = server_process.run(run_id)["attempts"][-1]["attemptId"]
    [(deadline,)] = server_process.query(
        "SELECT deadline_at FROM interactive_requests WHERE request_id = ?", request_id
    )
    server_process.kill()
    wait_for(lambda: time.time_ns() // 1_000_000 > deadline, 10, "the deadline to pass")
    server_process.start()
    done = server_process.wait_status(run_id, {"completed", "failed", "timed_out"}, 60)
    assert done["output"] == {"result": "timed_out"}
    classify = [a for a in done["attempts"] if a["nodeId"] == "classify"]
    assert [(a["attemptId"], a["status"]) for a in classify] == [(attempt, "timed_out")]
    assert server_process.query(
        "SELECT status FROM interactive_requests WHERE request_id = ?", request_id
    ) == [("timed_out",)]
    assert server_process.diagnose() == []


@pytest.mark.parametrize("point", ["command.interaction.submit", "runners.launch"])
def test_a_server_killed_after_recording_a_submission_validates_that_same_one_on_restart(
    server_process: ServerProcess, tmp_path: Path, point: str
) -> None:
    """Window: the server dies right after the ``validating`` submission commits (or right
    after the validation runner's launch commits); the next server validates that same
    submission and the client's retry with the same key gets its outcome."""
    _step(server_process, tmp_path)
    server_process.start()
    run_id, request_id = _waiting(server_process)
    server_process.stop()
    server_process.start(faults=f"{point}.after_commit=exit")
    # The server dies under the command: that is the window.
    with (
        server_process.client(client_id="s", timeout=10) as client,
        contextlib.suppress(ClientError),
    ):
        client.submit(request_id, {"route": "fix"}, idempotency_key="once")
    assert server_process.wait_exit(30) == 137
    server_process.start()
    with server_process.client(client_id="s") as client:
        receipt = client.submit(request_id, {"route": "fix"}, idempotency_key="once")
    assert receipt["status"] == "accepted"
    done = server_process.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"route": "fix", "result": "ok"}
    assert server_process.query("SELECT status FROM interactive_submissions") == [("accepted",)]
    assert server_process.diagnose() == []


LOOP = """
from pi_workflows import Workflow, agent, compute, switch

workflow = Workflow(
    "loop",
    start="ask",
    nodes={
        "ask": agent(prompt="Once more?", expected_output='{"next": "again"}'),
        "done": compute(lambda ctx: ctx.outputs["ask"]),
    },
    edges=[switch("ask", on="$.next", cases={"again": "ask"}, default="done")],
)
"""


def test_a_submission_for_an_earlier_visits_request_is_refused_and_the_new_one_stays_open(
    server: ServerProcess,
) -> None:
    """A stale attempt: the step looped through a switch and opened a new request; a
    submission for the first visit's request is a typed ``requestClosed`` rejection, and
    the new request stays open for its own answer."""
    server.write_workflow("loop", LOOP)
    run_id = server.start_run("loop")
    first = server.wait_status(run_id, "waiting")["waitingOn"]["requestId"]
    with server.client() as client:
        client.submit(first, {"next": "again"})
        second = wait_for(
            lambda: (
                (server.run(run_id).get("waitingOn") or {}).get("requestId") not in (None, first)
                and server.run(run_id)["waitingOn"]["requestId"]
            ),
            30,
            "the second visit's request",
        )
        revision = server.run(run_id)["revision"]
        with pytest.raises(RejectedError) as stale:
            client.submit(first, {"next": "stop"})
        assert stale.value.code == "requestClosed"
        assert first in stale.value.message
        view = server.run(run_id)
        assert (view["status"], view["revision"]) == ("waiting", revision)
        assert (view["waitingOn"]["requestId"], view["waitingOn"]["status"]) == (
            second,
            "pending",
        )
        assert [i["requestId"] for i in client.list_interactions()] == [second]
        client.submit(second, {"next": "stop"})
    done = server.wait_status(run_id, {"completed", "failed"})
    assert done["output"] == {"next": "stop"}
    asks = [(a["visit"], a["status"]) for a in done["attempts"] if a["nodeId"] == "ask"]
    assert asks == [(1, "completed"), (2, "completed")]
    assert server.query("SELECT status FROM interactive_submissions ORDER BY rowid") == [
        ("accepted",),
        ("accepted",),
    ]
    assert server.diagnose() == []
