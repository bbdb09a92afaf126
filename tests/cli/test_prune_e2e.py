"""`state prune` and the server's scheduled prune, through the real CLI and server."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pi_workflows.cli.main import cli

from support.server import ServerProcess, running_server, wait_for

pytestmark = pytest.mark.timeout(120)

QUICK = """
from pi_workflows import Workflow, compute, edge
workflow = Workflow("quick", start="a", nodes={"a": compute(lambda ctx: print("hi") or {"n": 1}),
                    "b": compute(lambda ctx: {"big": "x" * 40000})}, edges=[edge("a", "b")])
"""


def invoke(server: ServerProcess, *args: str) -> Result:
    """`pi-workflows --home HOME ARGS` in-process."""
    return CliRunner().invoke(cli, ["--home", str(server.home), *args])


def _session_dir(server: ServerProcess, run_id: str) -> Path:
    """Where a detached run's headless Pi keeps its session (its conversation)."""
    folder = server.home / "agents" / run_id
    folder.mkdir(parents=True)
    (folder / "session.jsonl").write_text('{"type": "session"}\n')
    return folder


def _counts(server: ServerProcess, run_id: str) -> dict[str, int]:
    tables = ("runs", "events", "node_attempts", "attempt_logs", "server_commands", "viewer_runs")
    return {
        t: server.query(f"SELECT COUNT(*) FROM {t} WHERE run_id = ?", run_id)[0][0] for t in tables
    }


def test_state_prune_removes_ended_runs_after_a_verified_backup(tmp_path: Path) -> None:
    """Ended runs go with every row; a waiting run and its receipts stay; diagnose is clean."""
    with running_server(tmp_path) as server:
        server.write_workflow("quick", QUICK)
        ended = [server.start_run("quick") for _ in range(2)]
        for run_id in ended:
            server.wait_status(run_id, "completed")
        waiting = server.start_run("builtin:demo")
        server.wait_status(waiting, "waiting")
        blobs_before = server.query("SELECT COUNT(*) FROM blobs")[0][0]
        sessions = {run_id: _session_dir(server, run_id) for run_id in [*ended, waiting]}
        result = invoke(server, "state", "prune", "--older-than", "0s", "--json")
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["runs"] == 2
        assert report["attempts"] == 4
        assert report["receipts"] == 2  # the two ended runs' `run.start` receipts
        assert report["blobs"] >= 2  # the definition of `quick` and both large outputs
        assert report["backup"]["verified"] is True
        backup = Path(report["backup"]["path"])
        assert backup.parent == server.home / "backups"
        copy = sqlite3.connect(backup)
        try:
            kept = copy.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        finally:
            copy.close()
        assert kept == 3  # the backup holds what was there before
        for run_id in ended:
            assert set(_counts(server, run_id).values()) == {0}
            gone = invoke(server, "run", "show", run_id)
            assert gone.exit_code == 1
        assert server.query("SELECT COUNT(*) FROM blobs")[0][0] < blobs_before
        assert _counts(server, waiting)["server_commands"] == 1  # its run.start receipt
        assert _counts(server, waiting)["events"] > 0
        pruned = server.query("SELECT run_id, status, events FROM pruned_runs ORDER BY run_id")
        assert [(r[0], r[1]) for r in pruned] == sorted((run_id, "completed") for run_id in ended)
        assert server.diagnose() == []
        assert [run_id for run_id, folder in sessions.items() if folder.exists()] == [waiting]
        human = invoke(server, "state", "prune", "--older-than", "0s", "--no-backup")
        assert human.exit_code == 0
        assert human.stdout.startswith("removed 0 run(s) that ended before ")
        assert (
            not (server.home / "backups").exists()
            or len(list((server.home / "backups").iterdir())) == 1
        )


def test_state_prune_counts_the_receipts_of_the_runs_it_removed(tmp_path: Path) -> None:
    """The human report names the pruned runs' command receipts, not 0."""
    with running_server(tmp_path) as server:
        run_id = server.start_run("builtin:demo")
        server.wait_status(run_id, "waiting")
        with server.client() as client:
            client.answer_checkpoint(run_id, "yes")  # a second receipt of the same run
        server.wait_status(run_id, "completed")
        wait_for(lambda: server.run(run_id)["runner"] is None, 30, "the runner to be gone")
        result = invoke(server, "state", "prune", "--older-than", "0s", "--no-backup")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("removed 1 run(s) that ended before ")
    assert ", 2 receipts, " in result.stdout


def test_prune_refuses_bad_durations_and_conflicting_backup_options(tmp_path: Path) -> None:
    """`--older-than` needs a duration; `--backup` and `--no-backup` exclude each other."""
    server = ServerProcess(tmp_path)
    bad = invoke(server, "state", "prune", "--older-than", "soon")
    assert bad.exit_code == 2
    assert "is not a duration like 30d" in bad.stderr
    both = invoke(
        server,
        "state",
        "prune",
        "--older-than",
        "1d",
        "--no-backup",
        "--backup",
        str(tmp_path / "b"),
    )
    assert both.exit_code == 2


def test_the_server_prunes_on_its_schedule(tmp_path: Path) -> None:
    """With PI_WORKFLOWS_RETENTION_DAYS set, ended runs past it disappear by themselves."""
    env = {"PI_WORKFLOWS_RETENTION_DAYS": "0.00001", "PI_WORKFLOWS_PRUNE_INTERVAL_SECONDS": "1"}
    with running_server(tmp_path, env) as server:
        server.write_workflow("quick", QUICK)
        run_id = server.start_run("quick")
        server.wait_status(run_id, "completed")
        waiting = server.start_run("builtin:demo")
        server.wait_status(waiting, "waiting")
        session, kept = _session_dir(server, run_id), _session_dir(server, waiting)
        wait_for(
            lambda: not server.query("SELECT 1 FROM runs WHERE run_id = ?", run_id), 30, "a prune"
        )
        wait_for(lambda: not session.exists(), 30, "the pruned run's session to go")
        assert kept.exists()
        assert server.query("SELECT status FROM runs WHERE run_id = ?", waiting) == [("waiting",)]
        assert server.diagnose() == []
        assert "pruned 1 runs that ended more than" in server.tail(200)


def test_a_new_server_removes_sessions_a_stopped_prune_left_behind(tmp_path: Path) -> None:
    """A session directory whose run no longer exists (the server stopped between the prune's
    commit and the removal) goes at the next start; a live run's stays."""
    with running_server(tmp_path) as server:
        waiting = server.start_run("builtin:demo")
        server.wait_status(waiting, "waiting")
        kept = _session_dir(server, waiting)
        server.stop()
        left = _session_dir(server, "run_0000000000000000000000gone")
        server.start()
        assert not left.exists()
        assert kept.exists()
        assert server.diagnose() == []
