"""Every way a run leaves ``running`` with an effect body in flight, through real processes.

Each test starts a body that writes a witness file outside the database, makes the run leave
``running`` one way (node deadline, pause, server stop, repeated crashes, a shell timeout),
and checks the effect, the run, ``state diagnose`` and the witnesses: a manual body is
never run again unreviewed, an idempotent one is never left stranded.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.client import RejectedError, UnavailableError

from support.server import ServerProcess, wait_for

BODY = """
import os, sys, time
from pathlib import Path
from pi_workflows import (Workflow, action, compute, edge, idempotent_effect, manual_effect,
                          shell, switch)

WITNESS = Path({witness!r})
RELEASE = Path({release!r})
CRASHES = Path({crashes!r})

def body(ctx):
    with WITNESS.open("a") as out:
        out.write(ctx.effect_key + "\\n")
    crashed = len(CRASHES.read_text().splitlines()) if CRASHES.exists() else 0
    if crashed < {crash_times}:
        with CRASHES.open("a") as out:
            out.write("crash\\n")
        os.kill(os.getpid(), 9)
    while not RELEASE.exists():
        time.sleep(0.02)  # ignores cancellation on purpose: only a kill stops it
    return {{"applied": True}}

workflow = Workflow(
    "exits",
    start="send",
    nodes={{
        "send": action(body, effect={kind}("send"), timeout={timeout}),
        "done": compute(lambda ctx: {{"result": ctx.results["send"]["outcome"]}}),
    }},
    edges=[switch("send", on="$result.outcome",
                  cases={{"ok": "done", "failed": "done", "timed_out": "send"}})],
)
"""


def _body(server: ServerProcess, tmp_path: Path, kind: str, *, timeout: float = 600,
          crash_times: int = 0) -> tuple[Path, Path]:  # fmt: skip
    witness, release = tmp_path / "witness.txt", tmp_path / "release"
    server.write_workflow(
        "exits",
        BODY.format(
            witness=str(witness),
            release=str(release),
            crashes=str(tmp_path / "crashes.txt"),
            crash_times=crash_times,
            kind=kind,
            timeout=timeout,
        ),
    )
    return witness, release


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _keys(server: ServerProcess, run_id: str) -> list[str]:
    with server.client() as client:
        return [str(e["effectKey"]) for e in client.list_effects(run_id)]


def test_a_node_deadline_kill_of_a_manual_action_parks_instead_of_looping(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: the server kills a manual body at its node deadline while a ``timed_out``
    route leads back to the same node; the body must not run again unreviewed."""
    witness, _ = _body(server_process, tmp_path, "manual_effect", timeout=0.5)
    server_process.start(PI_WORKFLOWS_NODE_GRACE_SECONDS="0.5")
    run_id = server_process.start_run("exits")
    view = server_process.wait_status(run_id, {"ambiguous", "completed", "failed"}, 60)
    assert view["status"] == "ambiguous", view
    assert "did not finish within its timeout" in view["parkDetail"]
    [effect] = view["effects"]
    assert effect["status"] == "ambiguous"
    assert _lines(witness) == _keys(server_process, run_id)
    assert server_process.diagnose() == []
    # The operator says it did not happen: the same visit adopts the rejection and the
    # workflow routes the failure; the body never ran a second time.
    with server_process.client() as client:
        client.resolve_effect(effect["effectId"], "rejected", reason="checked: nothing sent")
        client.resume(run_id)
    done = server_process.wait_status(run_id, {"completed", "failed", "ambiguous"}, 60)
    assert done["status"] == "completed", done
    assert done["output"] == {"result": "failed"}
    assert len(_lines(witness)) == 1
    assert server_process.diagnose() == []


@pytest.mark.parametrize("kind", ["manual_effect", "idempotent_effect"])
def test_pausing_a_run_with_a_body_in_flight_settles_its_effect_by_kind(
    server: ServerProcess, tmp_path: Path, kind: str
) -> None:
    """Window: ``run pause`` parks a running run whose runner is inside an effect body."""
    witness, release = _body(server, tmp_path, kind)
    run_id = server.start_run("exits")
    wait_for(witness.exists, 30, "the body to start")
    with server.client() as client:
        client.pause(run_id)
    view = server.wait_status(run_id, {"ambiguous", "paused"}, 30)
    wait_for(lambda: server.run(run_id)["runner"] is None, 30, "the runner to be gone")
    assert server.diagnose() == []
    [effect] = view["effects"]
    release.write_text("go")
    with server.client() as client:
        if kind == "manual_effect":
            assert (view["status"], effect["status"]) == ("ambiguous", "ambiguous")
            client.resolve_effect(effect["effectId"], "applied", result={"applied": "by hand"})
        else:
            assert (view["status"], view["parkReason"], effect["status"]) == (
                "paused",
                "userPaused",
                "pending",
            )
        client.resume(run_id)
    done = server.wait_status(run_id, {"completed", "failed", "ambiguous"}, 60)
    assert done["status"] == "completed", done
    keys = _lines(witness)
    assert set(keys) == set(_keys(server, run_id))
    assert len(keys) == (1 if kind == "manual_effect" else 2)
    assert server.diagnose() == []


@pytest.mark.parametrize("kind", ["manual_effect", "idempotent_effect"])
def test_a_server_stop_with_a_body_in_flight_settles_its_effect_by_kind(
    server: ServerProcess, tmp_path: Path, kind: str
) -> None:
    """Window: an orderly ``server stop`` parks a run whose runner is inside a body."""
    witness, release = _body(server, tmp_path, kind)
    run_id = server.start_run("exits")
    wait_for(witness.exists, 30, "the body to start")
    server.stop()
    release.write_text("go")
    server.start()
    if kind == "manual_effect":
        view = server.run(run_id)
        assert view["status"] == "ambiguous", view
        assert "serverStopped" in view["parkDetail"]
        assert [e["status"] for e in view["effects"]] == ["ambiguous"]
        assert len(_lines(witness)) == 1
    else:
        view = server.wait_status(run_id, {"completed", "failed", "ambiguous", "paused"}, 60)
        assert view["status"] == "completed", view
        assert len(set(_lines(witness))) == 1
        assert len(_lines(witness)) == 2
    assert server.diagnose() == []


def test_a_node_that_keeps_crashing_its_runner_is_parked_resumable_not_trapped(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Window: the third crash of one idempotent visit parks ``runnerCrashed`` with the
    effect pending (never ``applying`` on a run without a runner); resume finishes it."""
    witness, release = _body(server, tmp_path, "idempotent_effect", crash_times=3)
    release.write_text("go")
    run_id = server.start_run("exits")
    view = server.wait_status(run_id, {"paused", "completed", "failed", "ambiguous"}, 90)
    assert (view["status"], view["parkReason"]) == ("paused", "runnerCrashed"), view
    assert [e["status"] for e in view["effects"]] == ["pending"]
    assert server.diagnose() == []
    with server.client() as client:
        client.resume(run_id)
    done = server.wait_status(run_id, {"completed", "failed", "paused", "ambiguous"}, 60)
    assert done["status"] == "completed", done
    assert len(set(_lines(witness))) == 1
    assert server.diagnose() == []


SHELL = """
import sys
from pathlib import Path
from pi_workflows import Workflow, {kind}, shell

KEYS = Path({keys!r})

def command(ctx):
    with KEYS.open("a") as out:
        out.write(ctx.effect_key + "\\n")
    return {argv}

workflow = Workflow(
    "sh",
    start="cmd",
    nodes={{"cmd": shell(command, effect={kind}("sh"), timeout={timeout})}},
    edges=[],
)
"""


def test_a_manual_shell_killed_at_its_timeout_is_ambiguous_not_rejected(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Window: the runner kills a manual effect's command at its node deadline."""
    server.write_workflow(
        "sh",
        SHELL.format(
            kind="manual_effect",
            keys=str(tmp_path / "keys.txt"),
            argv='["sleep", "30"]',
            timeout=0.5,
        ),
    )
    run_id = server.start_run("sh")
    view = server.wait_status(run_id, {"ambiguous", "timed_out", "failed", "completed"}, 60)
    assert view["status"] == "ambiguous", view
    assert "killed at its timeout" in view["parkDetail"]
    assert [e["status"] for e in view["effects"]] == ["ambiguous"]
    assert server.diagnose() == []


def test_a_shell_sees_the_key_effect_list_shows_and_a_restart_changes_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``ctx.effect_key`` of a shell command is the listed key, and a new round gets a new one."""
    keys = tmp_path / "keys.txt"
    server.write_workflow(
        "sh",
        SHELL.format(
            kind="idempotent_effect",
            keys=str(keys),
            argv='[sys.executable, "-c", "raise SystemExit(3)"]',
            timeout=None,
        ),
    )
    run_id = server.start_run("sh")
    assert server.wait_status(run_id, {"failed", "completed"}, 60)["status"] == "failed"
    with server.client() as client:
        client.restart(run_id)
    server.wait_status(run_id, {"failed"}, 60)
    wait_for(lambda: len(_keys(server, run_id)) == 2, 30, "the second round's effect")
    seen = _lines(keys)
    assert seen == _keys(server, run_id)
    assert seen[0] != seen[1]
    assert all(key.startswith("pwf-") for key in seen)


STUBBORN = """
from pi_workflows import Workflow, manual_effect, shell

SCRIPT = "trap '' TERM; echo started > {witness}; while true; do sleep 0.05; done"

workflow = Workflow("stubborn", start="send",
                    nodes={{"send": shell(lambda ctx: ["sh", "-c", SCRIPT],
                                          effect=manual_effect("send"))}})
"""


def test_an_effect_cannot_be_resolved_while_its_paused_runner_is_still_being_stopped(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: ``run pause`` committed (the manual effect is ``ambiguous``) while the server
    still stops the runner's shell command, which ignores SIGTERM until the SIGKILL after the
    kill grace: ``effect resolve`` is refused with ``runnerLive``, and accepted once the
    runner and its command are gone."""
    server = server_process.start(PI_WORKFLOWS_KILL_GRACE_SECONDS="8")
    witness = tmp_path / "witness.txt"
    server.write_workflow("stubborn", STUBBORN.format(witness=str(witness)))
    run_id = server.start_run("stubborn")
    wait_for(witness.exists, 30, "the body to start")
    with server.client() as client:
        client.pause(run_id)
        [effect] = client.list_effects(run_id)
        assert effect["status"] == "ambiguous"
        assert server.run(run_id)["runner"] is not None
        with pytest.raises(RejectedError) as refused:
            client.resolve_effect(effect["effectId"], "rejected", reason="checked by hand")
        assert refused.value.code == "runnerLive"
        wait_for(lambda: server.run(run_id)["runner"] is None, 30, "the runner to be killed")
        client.resolve_effect(effect["effectId"], "rejected", reason="checked by hand")
    [settled] = server.run(run_id)["effects"]
    assert settled["status"] == "rejected"
    assert server.query("SELECT COUNT(*) FROM runner_messages") == [(0,)]
    assert server.diagnose() == []


DRAIN_LINE = "waiting up to"


def _drain_logged(server: ServerProcess, times: int = 1) -> bool:
    return server.log.read_text(errors="replace").count(DRAIN_LINE) >= times


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["manual_effect", "idempotent_effect"])
def test_a_pause_lets_the_body_in_flight_finish_and_parks_at_the_next_node(
    server_process: ServerProcess, tmp_path: Path, kind: str
) -> None:
    """Window: ``run pause`` while an effect body runs: the pause waits for the node to
    finish (the drain), then parks ``userPaused`` with the effect applied, so nothing needs
    review; ``run resume`` finishes the run without running the body again."""
    witness, release = _body(server_process, tmp_path, kind)
    server = server_process.start(PI_WORKFLOWS_DRAIN_SECONDS="60")
    run_id = server.start_run("exits")
    wait_for(witness.exists, 30, "the body to start")
    answered: dict[str, Any] = {}

    def pause() -> None:
        with server.client(timeout=90) as client:
            answered["receipt"] = client.pause(run_id)

    pauser = threading.Thread(target=pause)
    pauser.start()
    wait_for(lambda: _drain_logged(server), 30, "the pause to wait for the node boundary")
    assert server.run(run_id)["status"] == "running"
    release.write_text("go")
    pauser.join(60)
    assert answered["receipt"]["status"] == "paused"
    view = server.wait_status(run_id, "paused")
    assert view["parkReason"] == "userPaused"
    assert [e["status"] for e in view["effects"]] == ["applied"]
    wait_for(lambda: server.run(run_id)["runner"] is None, 30, "the runner to be gone")
    assert server.diagnose() == []
    with server.client() as client:
        client.resume(run_id)
    done = server.wait_status(run_id, {"completed", "failed", "ambiguous", "paused"}, 60)
    assert done["status"] == "completed", done
    assert done["output"] == {"result": "ok"}
    assert len(_lines(witness)) == 1
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_server_stop_drains_a_manual_body_in_flight_instead_of_leaving_it_ambiguous(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: SIGTERM while a manual body runs: the server waits for its node to finish,
    parks the run ``serverStopped`` with the effect applied, and the next server resumes it
    to completion; the body ran once and nothing needed review."""
    witness, release = _body(server_process, tmp_path, "manual_effect")
    server = server_process.start(PI_WORKFLOWS_DRAIN_SECONDS="60")
    run_id = server.start_run("exits")
    wait_for(witness.exists, 30, "the body to start")
    assert server.process is not None
    server.process.terminate()
    wait_for(lambda: _drain_logged(server), 30, "the stop to drain")
    release.write_text("go")
    assert server.wait_exit(60) == 0
    [(status, reason)] = server.query("SELECT status, park_reason FROM runs")
    assert (status, reason) == ("paused", "serverStopped")
    assert server.query("SELECT status FROM effects") == [("applied",)]
    server.start()
    done = server.wait_status(run_id, {"completed", "failed", "ambiguous", "paused"}, 60)
    assert done["status"] == "completed", done
    assert len(_lines(witness)) == 1
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("second", ["SIGTERM", "server stop", "SIGINT"])
def test_a_second_stop_during_the_drain_stops_at_once(
    server_process: ServerProcess, tmp_path: Path, second: str
) -> None:
    """Window: a second stop (SIGTERM, or `server stop` over the socket, which a draining
    server still answers) while the server drains a manual body ends the wait: the run parks
    at once and its manual effect is ``ambiguous`` (the documented price of a forced stop),
    and the body is never run again unreviewed."""
    witness, release = _body(server_process, tmp_path, "manual_effect")
    server = server_process.start(PI_WORKFLOWS_DRAIN_SECONDS="600")
    run_id = server.start_run("exits")
    wait_for(witness.exists, 30, "the body to start")
    assert server.process is not None
    server.process.terminate()
    wait_for(lambda: _drain_logged(server), 30, "the stop to drain")
    if second == "SIGTERM":
        server.process.terminate()
    elif second == "SIGINT":
        server.process.send_signal(signal.SIGINT)
    else:
        with server.client() as client:
            with pytest.raises(UnavailableError) as refused:
                client.get_run(run_id)  # a draining server answers only status and stop
            assert refused.value.code == "serverStopping"
            receipt = client.stop(wait=True, timeout=60)
        assert receipt["drainSeconds"] == 0
    assert server.wait_exit(60) == 0
    assert server.query("SELECT status FROM effects") == [("ambiguous",)]
    release.write_text("go")
    server.start()
    view = server.run(run_id)
    assert view["status"] == "ambiguous", view
    assert len(_lines(witness)) == 1
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigint_stops_at_once_without_a_drain(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Window: SIGINT (Ctrl-C) while a manual body runs: the server does not drain; the
    run parks at once with its manual effect ``ambiguous``, and the body never runs again."""
    witness, release = _body(server_process, tmp_path, "manual_effect")
    server = server_process.start(PI_WORKFLOWS_DRAIN_SECONDS="600")
    run_id = server.start_run("exits")
    wait_for(witness.exists, 30, "the body to start")
    assert server.process is not None
    server.process.send_signal(signal.SIGINT)
    assert server.wait_exit(60) == 0
    assert not _drain_logged(server)
    assert server.query("SELECT status FROM effects") == [("ambiguous",)]
    release.write_text("go")
    server.start()
    assert server.run(run_id)["status"] == "ambiguous"
    assert len(_lines(witness)) == 1
    assert server.diagnose() == []
