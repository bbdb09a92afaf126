"""A person's pause is durable: a deadline passing while a waiting run is paused closes the
request, but the run stays paused and runs no route (and no effect) until ``run resume``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from support.server import ServerProcess, wait_for

FLOW = """
from pathlib import Path
from pi_workflows import (Workflow, action, checkpoint, compute, edge, manual_effect,
                          seconds, switch)


def send(ctx):
    with open(ctx.input["witness"], "a") as out:
        out.write(ctx.effect_key + "\\n")
    return {"sent": True}


workflow = Workflow(
    "late",
    start="ask",
    nodes={
        "ask": checkpoint(lambda ctx: {"question": "Go?"}, timeout=seconds(1.5)),
        "escalate": action(send, effect=manual_effect("escalate")),
        "done": compute(lambda ctx: {"answered": True}),
    },
    edges=[
        switch("ask", on="$result.outcome",
               cases={"ok": "done", "failed": "done", "timed_out": "escalate"}),
    ],
)
"""


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_deadline_passing_while_paused_keeps_the_run_paused_until_resume(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The run waits on a checkpoint with a 1.5 s deadline and is paused; the deadline
    passes: the request is closed as timed out, the run stays ``userPaused`` and its timeout
    route (a manual effect) does not run; after ``run resume`` it runs once."""
    witness = tmp_path / "witness.txt"
    server.write_workflow("late", FLOW)
    run_id = server.start_run("late", {"witness": str(witness)})
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.pause(run_id)
    [(deadline,)] = server.query(
        "SELECT deadline_at FROM interactive_requests WHERE run_id = ?", run_id
    )
    wait_for(lambda: time.time_ns() // 1_000_000 > deadline + 500, 15, "the deadline to pass")
    wait_for(
        lambda: (
            server.query("SELECT status FROM interactive_requests WHERE run_id = ?", run_id)
            == [("timed_out",)]
        ),
        15,
        "the request to be closed",
    )
    view = server.run(run_id)
    assert (view["status"], view["parkReason"]) == ("paused", "userPaused")
    assert not witness.exists()
    assert server.diagnose() == []
    with server.client() as client:
        client.resume(run_id)
    done = server.wait_status(run_id, {"completed", "failed", "ambiguous", "paused"}, 60)
    assert done["status"] == "completed", done
    assert done["output"] == {"sent": True}
    assert len(witness.read_text().splitlines()) == 1
    assert server.diagnose() == []
