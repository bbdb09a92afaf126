"""Actions and shell commands run only inside an applying effect reservation."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import psutil

from pi_workflows.protocol import RunnerMessage, effect_key, fingerprint

from .peer import RUN_ID, Project, ScriptedServer, envelope_for

_ACTION = """
from pathlib import Path
from typing import Any

from pi_workflows import Workflow, action, idempotent_effect, manual_effect

def send(ctx):
    ctx.publish_update({{"status": "sending"}})
    Path({marker!r}).write_text(ctx.effect_key)
    return {{"sent": True, "key": ctx.effect_key}}

workflow = Workflow("act", "send", {{"send": action(send, effect=manual_effect("mail"))}})
"""


def _action_server(project: Project, **kwargs: Any) -> tuple[ScriptedServer, Path]:
    marker = project.root / "sent"
    project.write("act.workflow.py", _ACTION.format(marker=str(marker)))
    return ScriptedServer(project, envelope_for(project.load("act"), project), **kwargs), marker


def test_action_body_runs_only_after_an_applying_reservation(project: Project) -> None:
    """The body runs after effect.reserve says applying, gets its key, and is settled applied."""
    seen_before_reserve: list[bool] = []

    def look(server: ScriptedServer, message: RunnerMessage) -> None:
        seen_before_reserve.append(marker.exists())  # then the scripted answer follows

    server, marker = _action_server(project, hooks={"effect.reserve": look})
    assert server.run() == 0
    assert seen_before_reserve == [False]
    assert server.kinds()[2:] == [
        "node.start",
        "effect.reserve",
        "node.update",
        "effect.settle",
        "node.finish",
    ]
    (reserve,) = server.sent("effect.reserve")
    assert reserve == {
        "attemptId": "att-1",
        "effectType": "mail",
        "effectKind": "manual",
        "nodeId": "send",
        "visit": 1,
        "fingerprint": fingerprint(
            {"type": "mail", "kind": "manual", "nodeId": "send", "visit": 1}
        ),
    }
    assert server.sent("node.update") == [
        {"attemptId": "att-1", "body": {"status": "sending"}, "published": 1}
    ]
    (settle,) = server.sent("effect.settle")
    assert settle["effectId"] == "eff-2"
    assert settle["status"] == "applied"
    key = effect_key(RUN_ID, 0, "send", 1, "mail")
    assert settle["result"] == {"sent": True, "key": key}
    assert marker.read_text() == key
    assert server.sent("node.finish")[0]["output"] == {"sent": True, "key": key}


def test_stored_applied_receipt_is_adopted_and_the_body_never_runs(project: Project) -> None:
    """A stored applied outcome from the reservation is the node's output; the body never runs."""
    stored = {"send": {"status": "applied", "result": {"sent": True, "key": "earlier"}}}
    server, marker = _action_server(project, stored_effects=stored)
    assert server.run() == 0
    assert not marker.exists()
    assert "effect.settle" not in server.kinds()
    assert "node.update" not in server.kinds()
    (finish,) = server.sent("node.finish")
    assert finish["outcome"] == "completed"
    assert finish["output"] == {"sent": True, "key": "earlier"}


def test_stored_rejection_is_adopted_as_the_node_failure(project: Project) -> None:
    """A stored rejected outcome fails the node with the stored error; the body never runs."""
    stored = {"send": {"status": "rejected", "error": "SMTPError: refused"}}
    server, marker = _action_server(project, stored_effects=stored)
    assert server.run() == 0
    assert not marker.exists()
    (finish,) = server.sent("node.finish")
    assert (finish["outcome"], finish["error"]) == ("failed", "SMTPError: refused")


_POLITE = """
from pi_workflows import Workflow, action, manual_effect, seconds

def wait_for_cancel(ctx):
    ctx.cancellation.wait()
    ctx.cancellation.raise_if_set()

workflow = Workflow(
    "polite", "send", {"send": action(wait_for_cancel, effect=manual_effect("mail"),
                                       timeout=seconds(0.3))}
)
"""


def test_action_that_stops_on_cancellation_is_rejected_as_timed_out(project: Project) -> None:
    """An action past its deadline is cancelled; one that stops settles rejected and times out."""
    project.write("polite.workflow.py", _POLITE)
    server = ScriptedServer(project, envelope_for(project.load("polite"), project))
    assert server.run() == 0
    (settle,) = server.sent("effect.settle")
    assert settle["status"] == "rejected"
    assert settle["result"] == {"outcome": "timed_out"}
    assert settle["error"] == "node 'send' produced no result within 0.3 seconds"
    (finish,) = server.sent("node.finish")
    assert finish["outcome"] == "timed_out"


_SHELL = """
import sys

from pi_workflows import Workflow, idempotent_effect, seconds, shell

SCRIPT = {script!r}

workflow = Workflow(
    "sh",
    "cmd",
    {{"cmd": shell([sys.executable, "-c", SCRIPT], effect=idempotent_effect("probe"),
                   allow_exit_codes=[0, 3], timeout={timeout})}},
)
"""


def _shell_server(project: Project, script: str, timeout: str = "None") -> ScriptedServer:
    project.write("sh.workflow.py", _SHELL.format(script=script, timeout=timeout))
    return ScriptedServer(project, envelope_for(project.load("sh"), project))


def test_shell_node_settles_its_effect_with_a_receipt(project: Project) -> None:
    """The command runs after reservation; the settle carries output and a complete receipt."""
    script = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    server = _shell_server(project, script)
    assert server.run() == 0
    (reserve,) = server.sent("effect.reserve")
    command = [sys.executable, "-c", script]
    assert reserve["fingerprint"] == fingerprint(
        {"type": "probe", "kind": "idempotent", "nodeId": "cmd", "visit": 1, "command": command}
    )
    (settle,) = server.sent("effect.settle")
    assert settle["status"] == "applied"
    assert settle["result"] == {"exitCode": 3, "stdout": "out\n", "stderr": "err\n"}
    receipt = settle["receipt"]
    assert isinstance(receipt.pop("durationMs"), int)
    assert receipt == {
        "command": command,
        "exitCode": 3,
        "signal": None,
        "stdoutBytes": 4,
        "stderrBytes": 4,
        "truncated": False,
    }
    (finish,) = server.sent("node.finish")
    assert finish["outcome"] == "completed"


def test_shell_output_beyond_the_capture_bound_is_dropped_and_marked(project: Project) -> None:
    """A command writing more than 1 MiB keeps a bounded head and its receipt says truncated."""
    script = "import sys; sys.stdout.write('x' * (3 * 1024 * 1024))"
    server = _shell_server(project, script)
    assert server.run() == 0
    (settle,) = server.sent("effect.settle")
    assert settle["receipt"]["stdoutBytes"] == 3 * 1024 * 1024
    assert settle["receipt"]["truncated"] is True
    stdout = settle["result"]["stdout"]
    assert 0 < len(stdout) <= 96 * 1024
    assert set(stdout) == {"x"}


def test_shell_timeout_kills_the_command_and_times_the_node_out(project: Project) -> None:
    """At the node deadline the command's group gets SIGTERM; the node and effect record it."""
    server = _shell_server(project, "import time; time.sleep(60)", timeout="seconds(0.5)")
    assert server.run() == 0
    (settle,) = server.sent("effect.settle")
    assert settle["status"] == "rejected"
    assert settle["result"] == {"outcome": "timed_out"}
    assert settle["receipt"]["signal"] == signal.SIGTERM
    (finish,) = server.sent("node.finish")
    assert finish["outcome"] == "timed_out"
    assert finish["next"]["status"] == "timed_out"


_GROUP_SCRIPT = """
import os, subprocess, sys, time
sleeper = subprocess.Popen(["sleep", "60"])
with open(sys.argv[1], "w") as fifo:
    fifo.write(f"{os.getpid()} {sleeper.pid}")
time.sleep(60)
"""


def test_sigterm_stops_the_shell_process_group_and_exits_143(project: Project) -> None:
    """SIGTERM to the runner stops the command and its children; the child sends nothing more."""
    fifo = project.root / "pids.fifo"
    os.mkfifo(fifo)
    project.write(
        "sh.workflow.py",
        f"""
        import sys

        from pi_workflows import Workflow, manual_effect, shell

        workflow = Workflow("sh", "cmd", {{"cmd": shell(
            [sys.executable, "-c", {_GROUP_SCRIPT!r}, {str(fifo)!r}],
            effect=manual_effect("long"))}})
        """,
    )
    pids: list[int] = []

    def terminate(server: ScriptedServer, message: RunnerMessage) -> None:
        with fifo.open() as reader:  # blocks until the command has started its sleeper
            pids.extend(int(pid) for pid in reader.read().split())
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGTERM)

    server = ScriptedServer(
        project, envelope_for(project.load("sh"), project), after={"process.register": terminate}
    )
    assert server.run() == 143
    assert server.kinds()[-2:] == ["effect.reserve", "process.register"]
    assert len(pids) == 2
    for pid in pids:
        assert _gone(pid), f"process {pid} survived the runner's SIGTERM"


def _gone(pid: int) -> bool:
    """Whether ``pid`` is dead: gone, or a zombie (its new parent may reap it late)."""
    try:
        process = psutil.Process(pid)
        if process.status() != psutil.STATUS_ZOMBIE:
            psutil.wait_procs([process], timeout=5)  # a SIGKILL may still be in flight
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
