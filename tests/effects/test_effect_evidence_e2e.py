"""A manual effect whose report was lost: the server is SIGKILLed while the effect's shell
runs, the orphaned runner finishes the command and keeps its outcome as evidence on disk,
and the next server shows it (`effect show`, `run show`) and lets a person accept it with
`effect resolve EFFECT --from-evidence`. Real server processes, the real runner and the real
CLI in child processes at 80 columns."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(180)

SHIP = """
from pi_workflows import Workflow, manual_effect, shell

workflow = Workflow(
    "ship", start="deploy",
    nodes={{"deploy": shell(
        ["sh", "-c",
         "echo start >> {witness}; while [ ! -e {release} ]; do sleep 0.05; done;"
         " echo end >> {witness}; echo deployed-42"],
        effect=manual_effect("deploy"),
    )}},
)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server (not yet started) whose output is 80 columns wide."""
    process = ServerProcess(tmp_path, env={"COLUMNS": "80"})
    yield process
    process.cleanup()


def pw(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return server.cli(*args, timeout=60)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_finished_manual_shell_whose_report_was_lost_is_resolved_from_its_evidence(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Crash window: the server dies while the manual effect's command runs. The orphaned
    runner finishes it and leaves a user-only evidence file; the restarted server parks the
    run `effectAmbiguous` and shows the evidence; `--from-evidence` resolves it applied with
    the command's output, the resume completes without running the command again, the file
    is removed and `state diagnose` is clean."""
    witness, release = tmp_path / "witness.txt", tmp_path / "release"
    server.write_workflow("ship", SHIP.format(witness=witness, release=release))
    server.start()
    run_id = server.start_run("ship")
    wait_for(lambda: _lines(witness) == ["start"], 30, "the command to start")
    server.kill()
    release.touch()  # the orphaned runner's command finishes with no server to report to
    folder = server.home / "evidence" / run_id
    files = wait_for(lambda: list(folder.glob("*.json")), 30, "the runner's evidence")
    assert _lines(witness) == ["start", "end"]
    assert stat.S_IMODE(os.stat(files[0]).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700

    server.start()
    assert server.wait_status(run_id, "ambiguous")["parkReason"] == "effectAmbiguous"
    with server.client() as client:
        [effect] = client.list_effects(run_id)
    effect_id = effect["effectId"]
    assert effect["status"] == "ambiguous"

    shown = pw(server, "effect", "show", effect_id)
    assert shown.returncode == 0, shown.stderr
    flat = " ".join(shown.stdout.split())
    assert f"evidence for {effect_id}: its command finished at" in flat
    assert "with exit code 0" in flat
    assert "stdout: deployed-42" in flat
    assert f"pi-workflows effect resolve {effect_id} --from-evidence" in flat
    assert max(len(line) for line in shown.stdout.splitlines()) <= 80, shown.stdout
    as_json = json.loads(pw(server, "effect", "show", effect_id, "--json").stdout)
    assert as_json["effect"]["evidence"]["status"] == "applied"
    assert as_json["effect"]["evidence"]["result"]["stdout"] == "deployed-42\n"
    page = " ".join(pw(server, "run", "show", run_id).stdout.split())
    assert f"evidence for {effect_id}: its command finished at" in page
    assert f"pi-workflows effect resolve {effect_id} --from-evidence, then" in page
    assert server.run(run_id)["status"] == "ambiguous", "nothing resolved it without a person"

    resolved = pw(server, "effect", "resolve", effect_id, "--from-evidence")
    assert resolved.returncode == 0, resolved.stderr
    assert f"effect {effect_id} resolved as applied from its evidence" in resolved.stdout
    assert not list(folder.glob("*.json")), "resolved: the evidence is removed"
    assert pw(server, "run", "resume", run_id).returncode == 0
    done = server.wait_status(run_id, "completed")
    assert done["output"]["stdout"] == "deployed-42\n"
    assert _lines(witness) == ["start", "end"], "the command never ran again"
    assert server.diagnose() == []


def test_without_evidence_from_evidence_is_refused_in_one_line(
    server: ServerProcess, tmp_path: Path
) -> None:
    """An ambiguous effect whose runner left nothing (the runner was killed too): `effect
    show` says there is no evidence, `--from-evidence` is refused in one line and the run
    stays parked for a person."""
    witness, release = tmp_path / "witness.txt", tmp_path / "release"
    server.write_workflow("ship", SHIP.format(witness=witness, release=release))
    server.start()
    run_id = server.start_run("ship")
    wait_for(lambda: _lines(witness) == ["start"], 30, "the command to start")
    server.kill()  # its runner is stopped by the next server before the command ends
    server.start()
    server.wait_status(run_id, "ambiguous")
    with server.client() as client:
        [effect] = client.list_effects(run_id)
    effect_id = effect["effectId"]
    shown = pw(server, "effect", "show", effect_id)
    assert "no evidence of its outcome" in shown.stdout
    refused = pw(server, "effect", "resolve", effect_id, "--from-evidence")
    assert refused.returncode == 1
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "has no evidence of its outcome" in refused.stderr
    assert server.run(run_id)["status"] == "ambiguous"
    release.touch()
    assert server.diagnose() == []
