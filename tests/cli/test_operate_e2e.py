"""Workflows, paths, effect resolution, versions and JSON errors through the real CLI."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pi_workflows.cli.main import cli

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(120)

GOOD = """
from pi_workflows import Workflow, checkpoint, compute, edge, switch
workflow = Workflow(
    "good",
    start="ask",
    nodes={
        "ask": checkpoint(lambda ctx: {"question": "Which way?"}),
        "left": compute(lambda ctx: {"went": "left"}),
        "right": compute(lambda ctx: {"went": "right"}),
    },
    edges=[switch("ask", on="$.way", cases={"left": "left", "right": "right"})],
)
"""
BROKEN = """
from pi_workflows import Workflow, compute, edge
workflow = Workflow("broken", start="a", nodes={"a": compute(lambda ctx: 1)},
                    edges=[edge("a", "nowhere")])
"""
HOLD = """
import time
from pathlib import Path
from pi_workflows import Workflow, action, manual_effect

STARTED = Path({started!r})
RELEASE = Path({release!r})

def send(ctx):
    STARTED.write_text("started")
    while not RELEASE.exists():
        time.sleep(0.02)  # only a kill stops it
    return {{"sent": True}}

workflow = Workflow(
    "hold", start="send", nodes={{"send": action(send, effect=manual_effect("send"))}}, edges=[]
)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server with good, broken and shadowing workflows in its project."""
    process = ServerProcess(tmp_path)
    process.write_workflow("good", GOOD)
    process.write_workflow("broken", BROKEN)
    user_dir = process.user_home / ".pi" / "agent" / "workflows"
    user_dir.mkdir(parents=True)
    (user_dir / "good.workflow.py").write_text(GOOD)
    process.start()
    yield process
    process.cleanup()


def invoke(server: ServerProcess, *args: str) -> Result:
    """`pi-workflows --home HOME ARGS` in-process, with the server's HOME."""
    return CliRunner().invoke(
        cli, ["--home", str(server.home), *args], env={"HOME": str(server.user_home)}
    )


def test_workflows_list_shows_load_errors_and_shadowed_files(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken file's error and the user file a project file hides are listed."""
    monkeypatch.chdir(server.project)
    listed = json.loads(invoke(server, "workflows", "list", "--json").stdout)["workflows"]
    by_name = {(w["name"], w["origin"]): w for w in listed}
    assert "nowhere" in by_name[("broken", "project")]["error"]
    good = by_name[("good", "project")]
    assert "error" not in good
    assert good["shadows"] == [str(server.user_home / ".pi/agent/workflows/good.workflow.py")]
    human = invoke(server, "workflows", "list").stdout
    assert "shadows" in human
    assert "error:" in human


def test_workflows_list_says_in_one_line_what_each_builtin_does(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every built-in is listed with the first line of its docstring as what it does (in
    `--json` as `summary`); a file without a docstring has none."""
    monkeypatch.chdir(server.project)
    listed = json.loads(invoke(server, "workflows", "list", "--json").stdout)["workflows"]
    summaries = {w["name"]: w["summary"] for w in listed}
    assert summaries["good"] is None
    assert summaries["implement"].startswith("from a task to a tested change")
    assert summaries["review"].startswith("review the current change, one sub-agent per")
    assert summaries["watch"].startswith("run a command every interval")
    human = invoke(server, "workflows", "list").stdout
    assert "what it does" in human
    assert "from a task to a tested" in human


def test_workflows_show_prints_each_builtins_graph(server: ServerProcess) -> None:
    """`workflows show builtin:NAME` prints a built-in's nodes, effects and routes, and its
    revision in `--json`."""
    for name, parts in {
        "implement": ["human_decision", "choices approve, change, stop", "run-tests", "$.next"],
        "review": ["fan_out", "git-read", "$result.outcome"],
        "watch": ["sleep", "watch-check", "$.route"],
    }.items():
        shown = invoke(server, "workflows", "show", f"builtin:{name}")
        assert shown.exit_code == 0, shown.output
        assert f"builtin:{name}" in shown.stdout
        for part in parts:
            assert part in shown.stdout, (name, part)
        source = json.loads(invoke(server, "workflows", "show", f"builtin:{name}", "--json").stdout)
        assert source["source"]["kind"] == "builtin"
        assert len(source["source"]["revision"]) == 64


def test_workflows_show_prints_the_graph_as_text_and_mermaid(server: ServerProcess) -> None:
    """Nodes with their kinds and edges with their switch cases; Mermaid for docs."""
    text = invoke(server, "workflows", "show", "good", "--project", str(server.project))
    assert text.exit_code == 0, text.output
    for part in ("workflow good", "ask", "checkpoint", "left", 'when $.way = "left"'):
        assert part.split()[0] in text.stdout
    assert '$.way = "left"' in text.stdout
    mermaid = invoke(
        server, "workflows", "show", "good", "--mermaid", "--project", str(server.project)
    )
    lines = mermaid.stdout.splitlines()
    assert lines[0] == "flowchart TD"
    assert '    n_ask(["ask (checkpoint)"])' in lines
    assert "    n_ask -->|$.way = #quot;left#quot;| n_left" in lines


def test_mermaid_lists_edges_in_graph_order(server: ServerProcess) -> None:
    """Edges follow the workflow's nodes in the order it declares them, not the alphabet."""
    mermaid = invoke(server, "workflows", "show", "builtin:demo", "--mermaid").stdout.splitlines()
    assert [line for line in mermaid if "-->" in line] == [
        "    n_prepare --> n_summarize",
        "    n_summarize --> n_announce",
        "    n_announce --> n_python_version",
        "    n_python_version --> n_parse_version",
        "    n_parse_version --> n_ask",
        "    n_ask --> n_report",
    ]


def test_workflows_check_validates_files_for_editors_and_ci(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One line per file: ok, or each of its problems, then the count; exit 1 when any has
    one."""
    workflows_dir = server.project / ".pi" / "workflows"
    monkeypatch.chdir(workflows_dir)
    good = invoke(server, "workflows", "check", "good.workflow.py")
    assert (good.exit_code, good.stdout) == (
        0,
        f"{workflows_dir / 'good.workflow.py'}: ok (workflow good)\n",
    )
    (workflows_dir / "syntax.workflow.py").write_text("from pi_workflows import Workflow\nx = (\n")
    both = invoke(
        server, "workflows", "check", "good.workflow.py", "broken.workflow.py", "syntax.workflow.py"
    )
    assert both.exit_code == 1
    lines = both.stdout.splitlines()
    assert len(lines) == 4
    assert lines[3] == "2 problems in 2 of 3 files"
    broken, syntax = workflows_dir / "broken.workflow.py", workflows_dir / "syntax.workflow.py"
    assert re.fullmatch(
        rf"{re.escape(str(broken))}:\d+: error: workflow 'broken', node 'a': edge to unknown"
        r" node 'nowhere'",
        lines[1],
    ), lines[1]
    assert lines[2] == f"{syntax}:2: error: syntax error: '(' was never closed"
    assert all(line.count(str(workflows_dir)) == 1 for line in lines[:3])  # the path once


def test_a_relative_path_and_the_project_are_found_from_the_working_directory(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a subdirectory, a relative file path and a workflow name both resolve."""
    server.write_workflow("projonly", GOOD.replace('"good"', '"projonly"'))
    inner = server.project / "src" / "deep"
    inner.mkdir(parents=True)
    monkeypatch.chdir(inner)
    by_name = invoke(server, "run", "start", "projonly", "--json")
    assert by_name.exit_code == 0, by_name.output
    run_id = json.loads(by_name.stdout)["runId"]
    assert server.wait_status(run_id, "waiting")["workflow"] == "projonly"
    (inner / "local.workflow.py").write_text(GOOD.replace('"good"', '"local"'))
    by_path = invoke(server, "run", "start", "./local.workflow.py", "--json")
    assert by_path.exit_code == 0, by_path.output
    assert server.wait_status(json.loads(by_path.stdout)["runId"], "waiting")["workflow"] == "local"
    other = server.root / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    outside = invoke(server, "run", "start", "projonly")  # no project up from here
    assert outside.exit_code == 1
    assert "projonly" in outside.stderr
    override = invoke(server, "run", "start", "projonly", "--project", str(server.project))
    assert override.exit_code == 0, override.output


def test_effect_resolve_takes_exactly_one_resolution(server: ServerProcess) -> None:
    """Two resolutions (or none) are a usage error before any server is contacted."""
    both = invoke(server, "effect", "resolve", "eff_1", "--applied", "--rejected", "--reason", "x")
    assert both.exit_code == 2
    assert (
        "exactly one of --applied, --rejected, --retry or --from-evidence (got --applied and"
        " --rejected)"
    ) in " ".join(both.stderr.split())
    assert invoke(server, "effect", "resolve", "eff_1").exit_code == 2
    assert invoke(server, "effect", "resolve", "eff_1", "--retry", "--reason", "x").exit_code == 2
    evidence_and_result = invoke(
        server, "effect", "resolve", "eff_1", "--from-evidence", "--result", "{}"
    )
    assert evidence_and_result.exit_code == 2
    assert "--from-evidence takes no --result or --reason" in evidence_and_result.stderr


@pytest.mark.parametrize(
    ("stop", "hint"), [("pause", "run resume"), ("cancel", "nothing to resume")]
)
def test_effect_resolve_hints_match_the_run(
    server: ServerProcess, tmp_path: Path, stop: str, hint: str
) -> None:
    """After a paused run's effect: resume it; after a cancelled run's: nothing to resume."""
    started, release = tmp_path / "started", tmp_path / "release"
    server.write_workflow("hold", HOLD.format(started=str(started), release=str(release)))
    run_id = server.start_run("hold")
    wait_for(started.exists, 30, "the body to start")
    with server.client() as client:
        client.pause(run_id) if stop == "pause" else client.cancel(run_id)
    view = server.wait_status(run_id, {"ambiguous", "cancelled"})
    wait_for(lambda: server.run(run_id)["runner"] is None, 30, "the runner to be gone")
    release.write_text("go")
    (effect,) = view["effects"]
    result = invoke(server, "effect", "resolve", effect["effectId"], "--rejected", "--reason", "no")
    assert result.exit_code == 0, result.output
    assert hint in result.stdout
    if stop == "cancel":
        assert "run resume" not in result.stdout


def test_version_and_json_errors_keep_their_exit_codes(server: ServerProcess) -> None:
    """`--version` names the version; under --json an error is a JSON object on stdout."""
    version = invoke(server, "--version")
    assert version.exit_code == 0
    assert version.stdout.startswith("pi-workflows 0.")
    missing = invoke(server, "run", "show", "run_nope", "--json")
    assert missing.exit_code == 1
    assert json.loads(missing.stdout) == {
        "error": {"code": "notFound", "message": missing_message("run_nope")}
    }
    assert missing.stderr == ""
    usage = invoke(server, "run", "list", "--limit", "0", "--json")
    assert usage.exit_code == 2
    assert json.loads(usage.stdout)["error"]["code"] == "usage"
    human = invoke(server, "run", "show", "run_nope")
    assert human.stderr.startswith("pi-workflows: error: no run with id run_nope")


def missing_message(run_id: str) -> str:
    """The server's line for an unknown run."""
    return f"no run with id {run_id}; list runs with 'pi-workflows run list'"


def test_a_damaged_state_file_gives_the_reset_instruction_not_a_traceback(tmp_path: Path) -> None:
    """A database damaged in the middle of its pages: one line saying how to reset."""
    server = ServerProcess(tmp_path)
    try:
        server.start()
        for _ in range(3):
            server.wait_status(server.start_run("builtin:demo"), "waiting")
        server.stop()
        database = server.home / "state.sqlite"
        size = database.stat().st_size
        with database.open("r+b") as handle:
            for page in range(2, size // 4096):
                handle.seek(page * 4096 + 1024)
                handle.write(b"\xff" * 2048)
        result = CliRunner().invoke(
            cli, ["--home", str(server.home), "run", "list"], env={**server.env}
        )
    finally:
        server.cleanup()
    assert result.exit_code == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in lines[0]
    assert 'File "' not in lines[0]
    assert lines[0].startswith(f"pi-workflows: error: the server cannot start: {database} ")
    assert "Back it up and move it away together with its -wal and -shm files" in lines[0]
    assert f"mv {database} {database}-wal {database}-shm" in lines[0]
    assert os.environ.get("PI_WORKFLOWS_DEBUG") != "1"


BIG = """
from pi_workflows import Workflow, compute, edge
workflow = Workflow("big", start="small", nodes={
    "small": compute(lambda ctx: {"text": "q" * 40000}),  # stored apart, sent inline
    "large": compute(lambda ctx: {"text": "y" * 100000}),  # stored apart, sent by reference
}, edges=[edge("small", "large")])
"""


def test_a_damaged_stored_value_gives_the_reset_instruction_of_a_damaged_page() -> None:
    """A blob whose bytes no longer match their digest (damaged inside the state file, where
    SQLite cannot see it) answers `stateDamaged` with the one-line reset instruction, and
    the CLI exits 3, as for a damaged database page."""
    # A short state path, so the instruction (which names it four times) is not shortened.
    root = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))
    server = ServerProcess(root)
    try:
        server.write_workflow("big", BIG)
        server.start()
        run_id = server.start_run("big")
        server.wait_status(run_id, "completed")
        server.stop()
        database = server.home / "state.sqlite"
        with contextlib.closing(sqlite3.connect(database)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        data = database.read_bytes()
        for letter in (b"q", b"y"):  # every copy in the file, so the blob's for certain
            data = data.replace(letter * 1000, b"z" * 1000)
        database.write_bytes(data)
        server.start()
        shown = {
            "inline": invoke(server, "run", "show", run_id, "--output", "small"),
            "by reference": invoke(server, "run", "show", run_id, "--output", "large"),
            "run output": invoke(server, "run", "show", run_id),
        }
        as_json = invoke(server, "run", "show", run_id, "--json")
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)
    instruction = (
        f"the state database {database} is damaged; stop the server, back the file up and"
        f" move it away with its -wal and -shm files (mv {database} {database}-wal"
        f" {database}-shm /some/backup/dir/), then run the command again to start with an"
        " empty one"
    )
    for how, human in shown.items():
        assert (human.exit_code, human.stdout, human.stderr) == (
            3,
            "",
            f"pi-workflows: error: {instruction}\n",
        ), how
    assert as_json.exit_code == 3
    assert json.loads(as_json.stdout) == {"error": {"code": "stateDamaged", "message": instruction}}
