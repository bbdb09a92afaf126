"""`workflows check FILE` looks up the workflows a file names (`fan_out`, `subworkflow`) in
the file's own project, as `run start PATH` does, or in `--project DIR`: through the real CLI
in a child process against a real server, from a directory outside the project."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

ITEM = """\
from pi_workflows import Workflow, compute

workflow = Workflow("item", start="go", nodes={"go": compute(lambda ctx: ctx.input)})
"""

ALL = """\
from pi_workflows import Workflow, fan_out, subworkflow, edge

workflow = Workflow(
    "all", start="each",
    nodes={
        "each": fan_out("item", items=lambda ctx: [1, 2]),
        "one": subworkflow("item", input=lambda ctx: {}),
    },
    edges=[edge("each", "one")],
)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server whose project holds `all` and its sibling `item`."""
    process = ServerProcess(tmp_path)
    process.write_workflow("item", ITEM)
    process.write_workflow("all", ALL)
    process.start()
    yield process
    process.cleanup()


def check(server: ServerProcess, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`pi-workflows workflows check ARGS` from `cwd`, at 80 columns."""
    return subprocess.run(
        [sys.executable, "-m", "pi_workflows.cli.main", "--home", str(server.home),
         "workflows", "check", *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=cwd,
        env={**server.env, "COLUMNS": "80"},
    )  # fmt: skip


def test_check_finds_siblings_in_the_files_own_project_from_anywhere(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A project workflow whose fan_out and subworkflow name a sibling checks ok (exit 0)
    from a directory outside the project."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = server.project / ".pi" / "workflows" / "all.workflow.py"
    done = check(server, elsewhere, str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"{path}: ok (workflow all)"]


def test_check_project_option_names_where_siblings_are(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A file outside any project finds its sibling only with `--project DIR`; without it
    the problem names the missing workflow and where it was searched (exit 1)."""
    loose = tmp_path / "loose"
    loose.mkdir()
    path = loose / "all.workflow.py"
    path.write_text(ALL)
    alone = check(server, loose, str(path))
    assert alone.returncode == 1
    assert "no workflow 'item'" in alone.stdout, alone.stdout
    done = check(server, loose, str(path), "--project", str(server.project))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"{path}: ok (workflow all)"]
