"""Detached runs: the server's headless agent is supervised like a runner.

These tests put a stand-in program where ``pi`` would be (``PI_WORKFLOWS_PI``), so they
check the server's side — spawn with the run's session id, record the process identity,
stop it with its run, stop an orphan at start-up, park the run when the agent cannot work
— without a model. tests/pi/test_detached.py runs the real Pi.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
from pathlib import Path

import psutil

from support.server import ServerProcess, wait_for

STEP = """
from pi_workflows import Workflow, agent

workflow = Workflow("step", start="a",
                    nodes={"a": agent(prompt="Do it", expected_output="{}")}, edges=[])
"""

STAND_IN = """#!{python}
import json, os, sqlite3, sys, time
from pi_workflows.client import Client
home = os.environ.get("PI_WORKFLOWS_HOME")
# First thing, ask the server something: it answers only after it committed this agent's
# record (the OS may run this process before that commit; the server handles nothing first).
with Client(home, autostart=False, timeout=30) as client:
    client.status()
db = sqlite3.connect("file:" + home + "/state.sqlite?mode=ro", uri=True)
recorded = db.execute("SELECT COUNT(*) FROM agent_processes WHERE pid = ? AND status = 'live'",
                      (os.getpid(),)).fetchone()[0] == 1
db.close()
with open({record!r}, "a") as out:
    seen = {{name: os.environ.get(name) for name in ("PWF_X", "PWF_SERVER_ONLY", "PI_SETTING",
                                                   "PI_WORKFLOWS_IDLE_EXIT_SECONDS")}}
    out.write(json.dumps({{"pid": os.getpid(), "argv": sys.argv[1:], "cwd": os.getcwd(),
                          "home": home, "recorded": recorded, "env": seen}}) + "\\n")
if {exit_code!r} is not None:
    sys.exit({exit_code!r})
while True:
    time.sleep(0.05)
"""


def _stand_in(tmp_path: Path, exit_code: int | None = None) -> tuple[Path, Path]:
    record = tmp_path / "agent-starts.jsonl"
    program = tmp_path / "fake-pi"
    program.write_text(
        STAND_IN.format(python=sys.executable, record=str(record), exit_code=exit_code)
    )
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program, record


def _starts(record: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_detached_run_gets_a_supervised_agent_that_goes_with_its_run(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """The agent starts on ``detached-<run>`` in the project directory, is recorded before
    the server answers its first request, and is stopped when the run is cancelled."""
    program, record = _stand_in(tmp_path)
    server_process.write_workflow("step", STEP)
    server_process.start(PI_WORKFLOWS_PI=str(program))
    run_id = server_process.start_run("step", detached=True)
    view = server_process.wait_status(run_id, "waiting")
    assert (view["executionMode"], view["originSession"]) == ("detached", f"detached-{run_id}")
    wait_for(lambda: _starts(record), 30, "the agent to start")
    [start] = _starts(record)
    argv = start["argv"]
    assert isinstance(argv, list)
    assert argv[argv.index("--session-id") + 1] == f"detached-{run_id}"
    assert argv[:2] == ["--mode", "rpc"]
    assert start["cwd"] == str(server_process.project)
    assert start["home"] == str(server_process.home)
    assert start["recorded"] is True
    pid = int(str(start["pid"]))
    assert server_process.query("SELECT pid, status FROM agent_processes") == [(pid, "live")]
    with server_process.client() as client:
        client.cancel(run_id)
    wait_for(lambda: not _alive(pid), 30, "the agent to be stopped")
    wait_for(
        lambda: server_process.query("SELECT status FROM agent_processes") == [("ended",)],
        30,
        "the agent's record to end",
    )
    assert server_process.diagnose() == []


def test_the_agent_gets_the_runs_environment_and_pis_settings_not_the_servers(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """The headless Pi runs with the environment recorded from the starting client (with its
    added variables) and in its working directory, plus Pi's own ``PI_*`` settings and
    ``PI_WORKFLOWS_HOME`` from the server, never the server's other variables or settings."""
    program, record = _stand_in(tmp_path)
    server_process.write_workflow("step", STEP)
    server_process.start(PI_WORKFLOWS_PI=str(program), PWF_SERVER_ONLY="server", PI_SETTING="pi's")
    with server_process.client() as client:
        run_id = str(
            client.start_run(
                "step", {}, project_dir=server_process.project, detached=True,
                env={"PWF_X": "the client's"},
            )["runId"]
        )  # fmt: skip
    wait_for(lambda: _starts(record), 30, "the agent to start")
    [start] = _starts(record)
    assert start["env"] == {
        "PWF_X": "the client's",
        "PWF_SERVER_ONLY": None,
        "PI_SETTING": "pi's",
        "PI_WORKFLOWS_IDLE_EXIT_SECONDS": None,
    }
    assert start["home"] == str(server_process.home)
    assert start["cwd"] == str(server_process.project)
    with server_process.client() as client:
        client.cancel(run_id)


def test_a_missing_pi_parks_the_run_with_the_reason(server_process: ServerProcess) -> None:
    """No ``pi`` where the server looks: the run parks ``agentUnavailable``, saying what to do."""
    server_process.write_workflow("step", STEP)
    server_process.start(PI_WORKFLOWS_PI="/nonexistent/pi")
    run_id = server_process.start_run("step", detached=True)
    view = server_process.wait_status(run_id, {"paused", "completed", "failed"}, 60)
    assert (view["status"], view["parkReason"]) == ("paused", "agentUnavailable")
    assert "cannot start the headless Pi" in view["parkDetail"]
    assert "PI_WORKFLOWS_PI" in view["parkDetail"]


def test_an_agent_that_dies_while_its_run_waits_parks_the_run(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """The agent exits by itself: the run parks with its exit code instead of waiting on."""
    program, _ = _stand_in(tmp_path, exit_code=3)
    server_process.write_workflow("step", STEP)
    server_process.start(PI_WORKFLOWS_PI=str(program))
    run_id = server_process.start_run("step", detached=True)
    view = server_process.wait_status(run_id, {"paused", "completed", "failed"}, 60)
    assert (view["status"], view["parkReason"]) == ("paused", "agentUnavailable")
    assert "exited with code 3" in view["parkDetail"]
    assert server_process.query("SELECT status, exit_code FROM agent_processes") == [("ended", 3)]


def test_an_orphaned_agent_is_stopped_by_the_next_server(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: the server is SIGKILLed while an agent works; the next server stops that agent
    (its identity still matches) and starts a new one for the still-waiting run."""
    program, record = _stand_in(tmp_path)
    server_process.write_workflow("step", STEP)
    server_process.start(PI_WORKFLOWS_PI=str(program))
    run_id = server_process.start_run("step", detached=True)
    wait_for(lambda: _starts(record), 30, "the agent to start")
    first = int(str(_starts(record)[0]["pid"]))
    server_process.kill()
    assert _alive(first), "the orphan must still run when the new server starts"
    server_process.start(PI_WORKFLOWS_PI=str(program))
    wait_for(lambda: not _alive(first), 30, "the orphaned agent to be stopped")
    wait_for(lambda: len(_starts(record)) == 2, 30, "a new agent")
    second = int(str(_starts(record)[1]["pid"]))
    assert _alive(second)
    assert server_process.run(run_id)["status"] == "waiting"
    os.kill(second, signal.SIGKILL)  # the test's cleanup does not know this pid


TALKER = """#!{python}
import sys
sys.stdout.write('{{"type": "message_end", "text": "SECRET-CONVERSATION: hunter2"}}\\n')
sys.stdout.flush()
sys.stderr.write("Error: the provider refused the API key\\n")
sys.exit(3)
"""


def test_a_dead_agents_conversation_is_never_logged_or_stored(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """The agent's stdout (its RPC stream: conversation and file contents) is dropped; what
    is kept for diagnosis is the end of its stderr, in its record and the park detail, and
    the server log gets the exit code (the error line only at info level)."""
    program = tmp_path / "talking-pi"
    program.write_text(TALKER.format(python=sys.executable))
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    server_process.write_workflow("step", STEP)
    server_process.start(PI_WORKFLOWS_PI=str(program))
    run_id = server_process.start_run("step", detached=True)
    view = server_process.wait_status(run_id, {"paused", "completed", "failed"}, 60)
    assert (view["status"], view["parkReason"]) == ("paused", "agentUnavailable")
    assert "the provider refused the API key" in view["parkDetail"]
    [(tail,)] = server_process.query("SELECT output_tail FROM agent_processes")
    assert "the provider refused the API key" in tail
    assert "SECRET-CONVERSATION" not in tail
    assert "SECRET-CONVERSATION" not in json.dumps(view)
    server_process.stop()
    log = server_process.log.read_text(errors="replace")
    assert "SECRET-CONVERSATION" not in log
    warnings = [line for line in log.splitlines() if " WARNING " in line and "headless" in line]
    assert warnings, log[-2000:]
    assert all("provider refused" not in line for line in warnings)


ASK_THEN_SLEEP = """
from pi_workflows import Workflow, checkpoint, compute, edge, seconds, sleep

workflow = Workflow("asknap", start="ask", nodes={
    "ask": checkpoint("Go?"),
    "nap": sleep(seconds(60)),
    "done": compute(lambda ctx: {"ok": True}),
}, edges=[edge("ask", "nap"), edge("nap", "done")])
"""


def test_a_detached_run_holds_no_agent_while_it_sleeps(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """A detached run's agent serves its checkpoint; once the run sleeps (a durable wait,
    no request open) the agent is stopped, and the run waits on without being parked."""
    program, record = _stand_in(tmp_path)
    server_process.write_workflow("asknap", ASK_THEN_SLEEP)
    server_process.start(PI_WORKFLOWS_PI=str(program))
    run_id = server_process.start_run("asknap", detached=True)
    server_process.wait_status(run_id, "waiting")
    wait_for(lambda: _starts(record), 30, "the agent to start")
    pid = int(str(_starts(record)[0]["pid"]))
    with server_process.client() as client:
        client.answer_checkpoint(run_id, "yes")
    wait_for(lambda: (server_process.run(run_id).get("wait") or {}).get("kind") == "sleep", 30,
             "the run to sleep")  # fmt: skip
    wait_for(lambda: not _alive(pid), 30, "the agent to be stopped")
    wait_for(
        lambda: server_process.query("SELECT status FROM agent_processes") == [("ended",)],
        30,
        "the agent's record to end",
    )
    view = server_process.run(run_id)
    assert (view["status"], view["parkReason"]) == ("waiting", None)
    assert len(_starts(record)) == 1
    assert server_process.diagnose() == []


FAN_OF_AGENTS = """
from pi_workflows import Workflow, fan_out

workflow = Workflow("agents", start="each", nodes={
    "each": fan_out("step", items=lambda ctx: [0, 1, 2], concurrency=3, detached=True)})
"""


def test_detached_children_each_get_an_agent_within_the_agent_capacity(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """A fan_out with ``detached=True``: each child is a detached run on its own headless
    agent, at most ``PI_WORKFLOWS_MAX_AGENTS`` at once (the oldest first); when one child
    ends, its agent stops and the waiting child's agent starts. Each child's step is
    labelled with the parent and item it belongs to."""
    program, record = _stand_in(tmp_path)
    server_process.write_workflow("step", STEP)
    server_process.write_workflow("agents", FAN_OF_AGENTS)
    server_process.start(PI_WORKFLOWS_PI=str(program), PI_WORKFLOWS_MAX_AGENTS="2")
    parent = server_process.start_run("agents")
    wait_for(lambda: len(_starts(record)) == 2, 30, "two agents to start")
    children = server_process.query(
        "SELECT run_id, execution_mode, origin_session FROM runs WHERE parent_run_id = ?"
        " ORDER BY created_at, run_id",
        parent,
    )
    assert len(children) == 3
    assert {(mode, session) for _, mode, session in children} == {
        ("detached", f"detached-{run_id}") for run_id, _, _ in children
    }

    def session_of(start: dict[str, object]) -> str:
        argv = start["argv"]
        assert isinstance(argv, list)
        return str(argv[argv.index("--session-id") + 1])

    ids = {f"detached-{run_id}": run_id for run_id, _, _ in children}
    first_two = [session_of(start) for start in _starts(record)]
    assert set(first_two) < set(ids), "two of the three children got an agent"

    def labels() -> list[tuple[object, ...]]:
        return server_process.query(
            "SELECT json_extract(body_json, '$.child.item'), json_extract(body_json, '$.text')"
            " FROM workflow_messages WHERE kind = 'step' ORDER BY created_at"
        )

    wait_for(lambda: len(labels()) == 3, 30, "every child's step")
    assert sorted(int(str(item)) for item, _ in labels()) == [0, 1, 2]
    assert all(str(text).startswith(f"[child run of {parent}: item ") for _, text in labels())
    with server_process.client() as client:
        client.cancel(ids[first_two[0]])
    wait_for(lambda: len(_starts(record)) == 3, 30, "the third child's agent to start")
    (left,) = set(ids) - set(first_two)
    assert session_of(_starts(record)[2]) == left
    assert not _alive(int(str(_starts(record)[0]["pid"]))), "the cancelled child's agent stopped"
    assert server_process.query("SELECT COUNT(*) FROM agent_processes WHERE status = 'live'") <= [
        (2,)
    ]
    with server_process.client() as client:
        client.cancel(parent)
    wait_for(
        lambda: (
            server_process.query("SELECT COUNT(*) FROM agent_processes WHERE status = 'live'")
            == [(0,)]
        ),
        30,
        "every agent to stop with the tree",
    )
    assert server_process.diagnose() == []


TOOLED = """
from pi_workflows import Workflow, agent

workflow = Workflow("tooled", start="a", nodes={
    "a": agent(prompt="Do it", expected_output="{}", allowed_tools=TOOLS)}, edges=[])
"""


def test_an_upgrade_gives_a_detached_run_an_agent_with_the_new_codes_tools(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """A detached run's agent starts with the tools its steps allow; the run is upgraded to
    code whose step allows another: the old agent is stopped and a new one starts with the
    new tools (one agent serves the run's steps, and its tools are fixed when it starts)."""
    program, record = _stand_in(tmp_path)
    server_process.write_workflow("tooled", TOOLED.replace("TOOLS", repr(["read"])))
    server_process.start(PI_WORKFLOWS_PI=str(program))
    run_id = server_process.start_run("tooled", detached=True)
    server_process.wait_status(run_id, "waiting")
    wait_for(lambda: _starts(record), 30, "the agent to start")
    [first] = _starts(record)
    argv = first["argv"]
    assert isinstance(argv, list)
    assert argv[argv.index("--tools") + 1] == "read,workflow"
    server_process.write_workflow("tooled", TOOLED.replace("TOOLS", repr(["read", "grep"])))
    with server_process.client() as client:
        client.upgrade(run_id)
    wait_for(lambda: len(_starts(record)) == 2, 30, "a new agent to start")
    wait_for(lambda: not _alive(int(str(first["pid"]))), 30, "the old agent to be stopped")
    second = _starts(record)[1]["argv"]
    assert isinstance(second, list)
    assert second[second.index("--tools") + 1] == "grep,read,workflow"
    assert server_process.wait_status(run_id, "waiting")["waitingOn"]["nodeId"] == "a"
    assert server_process.diagnose() == []
