"""A built-in changed under a waiting run (pi-workflows upgraded) parks the run, as a file does.

The server of this test runs a copy of the ``pi_workflows`` package (first on its
``PYTHONPATH``), so the test can change a shipped built-in the way an upgrade does without
touching the source tree. A ``builtin:watch`` run sleeps between checks; the server stops,
the copy's ``watch.workflow.py`` gains a line that would leave a mark if it ran, and the
server starts again: the run is parked ``workflowSourceChanged`` naming the built-in's file
and the new code never runs. ``run restart`` then starts it afresh on the new revision, or
``run upgrade`` lets it continue on it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import pi_workflows
from pi_workflows.sources import load, resolve

from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.mark.parametrize("way", ["restart", "upgrade"])
def test_a_changed_builtin_parks_its_waiting_run_and_restart_or_upgrade_takes_the_new_revision(
    tmp_path: Path, way: str
) -> None:
    """The sleeping watch run is parked when the built-in's file changed while the server
    was down; the changed file is never executed for it; the recorded revision is the old
    one; `run restart` runs the new revision from the start, and `run upgrade` lets the
    same run go on with it (its checks so far kept)."""
    package = tmp_path / "site"
    shutil.copytree(
        Path(pi_workflows.__file__).parent,
        package / "pi_workflows",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    builtin = package / "pi_workflows" / "sources" / "builtins" / "watch.workflow.py"
    old_revision = load(resolve("builtin:watch", None)).identity.revision
    server = ServerProcess(tmp_path / "root", env={"PYTHONPATH": str(package)})
    marker = tmp_path / "new-code-ran"
    try:
        server.start()
        run_id = server.start_run(
            "builtin:watch",
            {"command": ["echo", "same"], "everySeconds": 2, "maxChecks": 5},
        )
        [(revision,)] = server.query(
            "SELECT source_revision FROM run_sources WHERE run_id = ?", run_id
        )
        assert revision == old_revision
        wait_for(
            lambda: server.query(
                "SELECT 1 FROM run_waits WHERE run_id = ? AND kind = 'sleep'"
                " AND status = 'pending'",
                run_id,
            ),
            60,
            "the watch to sleep",
        )
        server.stop()
        builtin.write_text(
            builtin.read_text() + f"\nfrom pathlib import Path\nPath({str(marker)!r}).touch()\n"
        )
        server.start()

        parked = server.wait_status(run_id, {"paused", "completed", "failed"}, 60)

        assert (parked["status"], parked["parkReason"]) == ("paused", "workflowSourceChanged")
        assert str(builtin) in str(parked.get("parkDetail"))
        assert not marker.exists()
        with server.client() as client:
            if way == "restart":
                client.restart(run_id)
            else:
                plan = client.upgrade(run_id, dry_run=True).body
                assert plan["possible"] is True, plan
                done = client.upgrade(run_id).body
                assert done["continues"] is True, done
        wait_for(marker.exists, 60, f"the new revision to run after the {way}")
        if way == "upgrade":
            with server.client() as client:
                history = [e["type"] for e in client.history(run_id)]
            assert history.count("run.upgraded") == 1
            assert "run.restarted" not in history
        [(revision,)] = server.query(
            "SELECT source_revision FROM run_sources WHERE run_id = ?", run_id
        )
        assert revision != old_revision
        with server.client() as client:
            client.cancel(run_id)
        assert server.diagnose() == []
    finally:
        server.cleanup()
