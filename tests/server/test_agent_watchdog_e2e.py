"""A headless agent that works on none of its step is prompted again, replaced, then its run
parks: an idle agent never holds a place for ever.

The server runs a stand-in `pi` (``PI_WORKFLOWS_PI``) that starts and then does nothing (it
never attaches, never presents, never starts a turn), with a short
``PI_WORKFLOWS_AGENT_STALL_SECONDS``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

IDLE_PI = """#!{python}
# A headless agent that starts and then does nothing until its server ends it.
import sys

sys.stdin.buffer.read()
"""

STEP = """
from pi_workflows import Workflow, agent

workflow = Workflow("step", start="classify", nodes={
    "classify": agent(prompt="Classify the report", expected_output='{"route": "fix"}'),
})
"""


def test_an_agent_that_never_works_on_its_step_is_nudged_replaced_then_its_run_parks(
    tmp_path: Path,
) -> None:
    pi = tmp_path / "idle-pi"
    pi.write_text(IDLE_PI.format(python=sys.executable))
    pi.chmod(0o700)
    server = ServerProcess(tmp_path, env={"PI_WORKFLOWS_PI": str(pi)})
    try:
        server.start(PI_WORKFLOWS_AGENT_STALL_SECONDS="0.5")
        server.write_workflow("step", STEP)
        run_id = server.start_run("step", detached=True)

        parked = server.wait_status(run_id, {"paused", "completed", "failed"}, 60)

        assert (parked["status"], parked["parkReason"]) == ("paused", "agentUnavailable")
        assert "started no model turn for step classify" in parked["parkDetail"]
        nudges = server.query(
            "SELECT json_extract(data_json, '$.prompted') FROM events WHERE run_id = ?"
            " AND type = 'agent.nudged' ORDER BY event_id",
            run_id,
        )
        assert nudges == [(1,), (0,), (0,)], "prompted again once, then replaced twice"
        agents = server.query(
            "SELECT status FROM agent_processes WHERE run_id = ? ORDER BY started_at", run_id
        )
        assert len(agents) == 3, agents
        wait_for(
            lambda: (
                server.query("SELECT COUNT(*) FROM agent_processes WHERE status = 'live'") == [(0,)]
            ),
            30,
            "the last agent to be stopped (its run is paused)",
        )
        steps = server.query(
            "SELECT json_extract(body_json, '$.again') FROM workflow_messages WHERE run_id = ?"
            " AND kind = 'step' ORDER BY created_at, rowid",
            run_id,
        )
        assert steps == [(None,), ("agentIdle",)]
        assert server.diagnose() == []
    finally:
        server.cleanup()


FORGETFUL_PI = """#!{python}
# A headless agent whose branch already holds the step when it starts (as after a server
# SIGKILL): it attaches and watches like the extension, reports every message present, and
# starts a turn (and submits) only for a step presented again.
import argparse, os, sys, threading
from pathlib import Path

sys.path.insert(0, {src!r})
from pi_workflows.client import Client

parser = argparse.ArgumentParser()
parser.add_argument("--session-id")
args, _ = parser.parse_known_args()
threading.Thread(target=lambda: (sys.stdin.buffer.read(), os._exit(0)), daemon=True).start()
log = Path({log!r})
client = Client(Path(os.environ["PI_WORKFLOWS_HOME"]), autostart=False)
epoch = client.attach_session(args.session_id, seat_id="forgetful-%d" % os.getpid())
watch = client.watch_session(args.session_id, epoch)
done = set()
while True:
    view = watch.next_view(1.0)
    if view is None:
        continue
    for message in view.get("messages") or []:
        mid = message["workflowMessageId"]
        client.report_messages(args.session_id, epoch, {{mid: "entry-" + mid}})
        again = (message.get("body") or {{}}).get("again")
        with log.open("a") as out:
            out.write("%s %s\\n" % (mid, again))
        if message["kind"] != "step" or again is None or mid in done:
            continue
        done.add(mid)
        client.report_turn(args.session_id, epoch, "started", workflow_message_id=mid)
        request = message["body"]["requestId"]
        client.submit(request, {{"route": "fix"}}, idempotency_key="fix-" + request, wait=30)
        client.report_turn(args.session_id, epoch, "ended", stop_reason="completed",
                           workflow_message_id=mid)
"""


def test_a_step_presented_again_to_a_watching_agent_reaches_it_at_once(tmp_path: Path) -> None:
    """The agent holds the step in its branch but starts no turn: the watchdog presents it
    again, and that commit reaches the agent's session watch at once (the agent's own
    server wakes its watchers), so the same agent works on it: no replacement, no park."""
    log = tmp_path / "seen.log"
    src = Path(__file__).resolve().parents[2] / "src"
    pi = tmp_path / "forgetful-pi"
    pi.write_text(FORGETFUL_PI.format(python=sys.executable, src=str(src), log=str(log)))
    pi.chmod(0o700)
    server = ServerProcess(tmp_path, env={"PI_WORKFLOWS_PI": str(pi)})
    try:
        server.start(PI_WORKFLOWS_AGENT_STALL_SECONDS="1")
        server.write_workflow("step", STEP)
        run_id = server.start_run("step", detached=True)

        done = server.wait_status(run_id, {"paused", "completed", "failed"}, 90)

        assert done["status"] == "completed", done.get("parkDetail")
        assert done["output"] == {"route": "fix"}
        nudges = server.query(
            "SELECT json_extract(data_json, '$.prompted') FROM events WHERE run_id = ?"
            " AND type = 'agent.nudged' ORDER BY event_id",
            run_id,
        )
        assert nudges == [(1,)], "presented again once; the agent was never replaced"
        agents = server.query("SELECT COUNT(*) FROM agent_processes WHERE run_id = ?", run_id)
        assert agents == [(1,)]
        seen = [line.split() for line in log.read_text().splitlines()]
        assert [again for _mid, again in seen if again != "None"] == ["agentIdle"]
        assert server.diagnose() == []
    finally:
        server.cleanup()
