"""A node's latest progress on the real Pi's widget: a run started in a Pi session whose node
published 1,000 updates shows the last value on its line while it runs, and the widget is
cleared once it ended; no update becomes a session message or starts a model turn."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pi.support.mock_provider import MockProvider, text, user_text_contains
from pi.support.pi_rpc import MakePi, PiProcess, Record
from pi.support.records import workflow_messages

from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SESSION = "progress-origin"
TERMINAL_MARK = "--- Workflow run finished ---"

COUNT = """
import os, time
from pi_workflows import Workflow, action, idempotent_effect

def count(ctx):
    for done in range(1, 1001):
        ctx.publish_update({"done": done, "total": 1000})
    while not os.path.exists(ctx.input["go"]) and not ctx.cancellation.is_set():
        time.sleep(0.05)
    return {"counted": 1000}

workflow = Workflow("count", start="count", nodes={
    "count": action(count, effect=idempotent_effect("count")),
})
"""


def widgets(pi: PiProcess) -> list[list[str]]:
    """The lines of every widget the extension showed, in order (`[]` for a cleared one)."""
    return [list(r.get("widgetLines") or []) for r in pi.ui_requests("setWidget")]


def test_the_widget_shows_the_latest_progress_of_the_node_a_run_runs(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider, root: Path
) -> None:
    """The run's widget line ends with the node's last published value (`at count:
    {"done":1000,...}`), though history kept only the first; once the run completes the
    widget is cleared, and the only workflow message of the session is the run's end."""
    provider.on(user_text_contains(TERMINAL_MARK), text("Counted."), name="terminal")
    server.write_workflow("count", COUNT)
    pi = make_pi(session_id=SESSION)
    wait_for(
        lambda: server.query("SELECT 1 FROM sessions WHERE session_id = ?", SESSION),
        60,
        "the origin session's coordinator to attach",
    )
    go = root / "go"
    run_id = server.start_run("count", {"go": str(go)}, origin_session=SESSION)

    pattern = re.compile(rf'  {run_id} count running at count: \{{"done":1000,"total":1000\}}')

    def shows_latest(record: Record) -> bool:
        if record.get("type") != "extension_ui_request" or record.get("method") != "setWidget":
            return False
        return any(pattern.fullmatch(line) for line in record.get("widgetLines") or [])

    pi.wait_for(shows_latest, 60, "the widget line with the latest progress")
    assert server.query(
        "SELECT COUNT(*) FROM events WHERE run_id = ? AND type = 'node.update'", run_id
    ) == [(1,)]
    go.touch()
    assert server.wait_status(run_id, "completed", 60)["output"] == {"counted": 1000}
    wait_for(lambda: widgets(pi)[-1:] == [[]], 30, "the widget to be cleared")
    shown = [line for lines in widgets(pi) for line in lines if run_id in line]
    assert all(line.startswith(f"  {run_id} count ") for line in shown), shown
    # Progress is for the widget: never a message of the session.
    wait_for(lambda: workflow_messages(pi.entries(), "terminal"), 60, "the run's end message")
    kinds = [m["details"]["kind"] for m in workflow_messages(pi.entries())]
    assert kinds == ["terminal"], kinds
