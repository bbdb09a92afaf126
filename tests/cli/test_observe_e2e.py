"""`run show`, `run history`, `run logs` and `run list` through the real CLI and server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pi_workflows.cli.main import cli

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

LOGS_WORKFLOW = """
import logging
from pi_workflows import Workflow, checkpoint, compute, edge, idempotent_effect, shell

def hello(ctx):
    print("hello from", ctx.node_id)
    logging.getLogger("wf.hello").info("an info record")
    return {"greeting": "hi"}

def chatty(ctx):
    for index in range(4000):
        print(f"line {index:05d} " + "x" * 40)
    return {"lines": 4000}

def boom(ctx):
    print("about to fail")
    raise ValueError("the answer was " + str(ctx.outputs["ask"]))

workflow = Workflow(
    "logs",
    start="hello",
    nodes={
        "hello": compute(hello),
        "chatty": compute(chatty),
        "say": shell(lambda ctx: ["sh", "-c", "echo out-line; echo err-line >&2"],
                     effect=idempotent_effect("say")),
        "ask": checkpoint(lambda ctx: {"question": "Go on?"}),
        "boom": compute(boom),
    },
    edges=[edge("hello", "chatty"), edge("chatty", "say"), edge("say", "ask"),
           edge("ask", "boom")],
)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server whose project has the `logs` workflow."""
    process = ServerProcess(tmp_path)
    process.write_workflow("logs", LOGS_WORKFLOW)
    process.start()
    yield process
    process.cleanup()


def invoke(server: ServerProcess, *args: str) -> Result:
    """`pi-workflows --home HOME ARGS` in-process (80 columns, as in a plain terminal)."""
    return CliRunner().invoke(
        cli, ["--home", str(server.home), *args], env={"HOME": str(server.user_home)}
    )


def pw(server: ServerProcess, *args: str) -> subprocess.Popen[str]:
    """`pi-workflows --home HOME ARGS` as a child process (for `--follow`)."""
    return subprocess.Popen(
        [sys.executable, "-m", "pi_workflows.cli.main", "--home", str(server.home), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=server.env,
        cwd=server.project,
    )


def failed_run(server: ServerProcess) -> str:
    """A run of `logs` that printed, logged, ran a shell command, was answered and failed."""
    run_id = server.start_run("logs")
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.answer_checkpoint(run_id, "no")
    server.wait_status(run_id, "failed")
    return run_id


def test_run_show_lists_attempts_with_timings_outcomes_errors_and_the_traceback(
    server: ServerProcess,
) -> None:
    """`run show` fits 80 columns and shows each attempt, the error and the traceback."""
    run_id = failed_run(server)
    result = invoke(server, "run", "show", run_id)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert any(run_id in line for line in lines)
    text = result.stdout
    for node in ("hello", "chatty", "say", "ask", "boom"):
        assert node in text
    assert "failed" in text
    assert "completed" in text
    assert "ValueError: the answer was no" in text
    assert "Traceback of node boom (visit 1)" in text
    assert 'raise ValueError("the answer was "' in text
    assert "pi_workflows/runner" not in text  # the runner's own frames are left out
    assert " ms" in text or " s" in text  # durations
    assert "run / queue" not in text
    assert "generation" not in text


def test_run_show_verbose_and_output_of_one_node(server: ServerProcess) -> None:
    """`--verbose` adds the internal fields; `--output NODE` prints that node's output."""
    run_id = failed_run(server)
    verbose = invoke(server, "run", "show", run_id, "--verbose")
    assert "run / queue" in verbose.stdout
    assert "generation" in verbose.stdout
    output = invoke(server, "run", "show", run_id, "--output", "hello")
    assert output.exit_code == 0
    assert json.loads(output.stdout) == {"greeting": "hi"}
    failed = invoke(server, "run", "show", run_id, "--output", "boom")
    assert failed.exit_code == 1
    assert "node boom failed: ValueError: the answer was no" in failed.stderr
    missing = invoke(server, "run", "show", run_id, "--output", "nowhere")
    assert missing.exit_code == 1
    assert "has no result" in missing.stderr


def test_run_logs_shows_prints_records_shell_output_and_the_bounded_tail(
    server: ServerProcess,
) -> None:
    """Each attempt's output is listed under its header; a large one keeps its last 64 KiB."""
    run_id = failed_run(server)
    result = invoke(server, "run", "logs", run_id)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "── node hello · visit 1 · completed" in text
    assert "hello from hello" in text
    assert "INFO wf.hello: an info record" in text
    assert "out-line" in text
    assert "err-line" in text
    assert "about to fail" in text
    assert "ValueError: the answer was no" in text
    assert "line 03999" in text  # the newest lines are kept ...
    assert "line 00000" not in text  # ... the oldest are not, and the listing says so
    assert "earlier bytes not kept" in text
    as_json = json.loads(invoke(server, "run", "logs", run_id, "--node", "chatty", "--json").stdout)
    (chatty,) = as_json["logs"]
    assert chatty["totalBytes"] == 4000 * len("line 00000 " + "x" * 40 + "\n")
    assert chatty["keptBytes"] <= 64 * 1024 < chatty["totalBytes"]
    assert chatty["truncated"] is True
    (boom,) = json.loads(invoke(server, "run", "logs", run_id, "--node", "boom", "--json").stdout)[
        "logs"
    ]
    assert boom["traceback"].startswith("Traceback (most recent call last):")
    assert boom["traceback"].rstrip().endswith("ValueError: the answer was no")


def test_run_history_is_readable_and_paged(server: ServerProcess) -> None:
    """Each event is one line with its revision, node and actor; --json has every event."""
    run_id = failed_run(server)
    result = invoke(server, "run", "history", run_id)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["time", "rev", "event", "node", "actor", "detail"]
    assert "run.reserved" in lines[1]
    assert "client:" in lines[1]
    assert any("node.logs" in line and "boom" in line and "traceback" in line for line in lines)
    assert any("interaction.submitted" in line and "client:" in line for line in lines)
    assert "run.failed" in lines[-1]
    events = json.loads(invoke(server, "run", "history", run_id, "--json").stdout)["events"]
    assert [e["revision"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["runStatus"] == "failed"
    limited = invoke(server, "run", "history", run_id, "--after", "2", "--limit", "3")
    assert [line.split()[1] for line in limited.stdout.splitlines()[1:]] == ["3", "4", "5"]


def test_history_and_logs_follow_a_run_until_it_ends(server: ServerProcess) -> None:
    """`--follow` prints what happens after it started, and exits when the run has ended
    (whether the run ends before or after the follower subscribed: it reads what it missed)."""
    run_id = server.start_run("logs")
    server.wait_status(run_id, "waiting")
    history = pw(server, "run", "history", run_id, "--follow")
    logs = pw(server, "run", "logs", run_id, "--follow", "--node", "boom")
    try:
        assert history.stdout is not None
        first = history.stdout.readline()  # it has read the history so far
        with server.client() as client:
            client.answer_checkpoint(run_id, "later")
        history_out, _ = history.communicate(timeout=60)
        history_out = first + history_out
        logs_out, _ = logs.communicate(timeout=60)
    finally:
        for child in (history, logs):
            if child.poll() is None:
                child.kill()
                child.wait()
    assert history.returncode == 0
    assert logs.returncode == 0
    assert "interaction.submitted" in history_out
    assert history_out.splitlines()[-1].split()[2] == "run.failed"
    assert "── node boom · visit 1 ──" in logs_out
    assert "about to fail" in logs_out
    assert "ValueError: the answer was later" in logs_out


def test_run_list_filters_and_pages_newest_first(server: ServerProcess) -> None:
    """--workflow, --status and --since filter; --limit pages with a cursor; --all gets all."""
    server.write_workflow(
        "quick",
        "from pi_workflows import Workflow, compute\n"
        "workflow = Workflow('quick', start='a', nodes={'a': compute(lambda ctx: 1)}, edges=[])\n",
    )
    quick = [server.start_run("quick") for _ in range(3)]
    for run_id in quick:
        server.wait_status(run_id, "completed")
    waiting = server.start_run("logs")
    server.wait_status(waiting, "waiting")
    page = json.loads(invoke(server, "run", "list", "--limit", "2", "--json").stdout)
    assert [r["runId"] for r in page["runs"]] == [waiting, quick[2]]
    rest = json.loads(invoke(server, "run", "list", "--after", page["next"], "--json").stdout)
    assert [r["runId"] for r in rest["runs"]] == [quick[1], quick[0]]
    assert rest["next"] is None
    human = invoke(server, "run", "list", "--limit", "2")
    assert f"more runs: pi-workflows run list --after {page['next']}" in human.stdout
    every = json.loads(
        invoke(server, "run", "list", "--all", "--workflow", "quick", "--json").stdout
    )
    assert [r["runId"] for r in every["runs"]] == quick[::-1]
    by_status = json.loads(invoke(server, "run", "list", "--status", "waiting", "--json").stdout)
    assert [r["runId"] for r in by_status["runs"]] == [waiting]
    recent = json.loads(invoke(server, "run", "list", "--since", "1h", "--json").stdout)
    assert len(recent["runs"]) == 4
    future = json.loads(invoke(server, "run", "list", "--since", "2999-01-01", "--json").stdout)
    assert future["runs"] == []
    bad = invoke(server, "run", "list", "--since", "yesterday")
    assert bad.exit_code == 2


def test_run_list_fits_80_columns_without_cutting_ids_or_statuses(server: ServerProcess) -> None:
    """Long workflow names give way; run ids, statuses and times are printed whole."""
    server.write_workflow(
        "a-very-long-workflow-name-for-the-list",
        "from pi_workflows import Workflow, compute\n"
        "workflow = Workflow('a-very-long-workflow-name-for-the-list', start='a-rather-long-node',"
        " nodes={'a-rather-long-node': compute(lambda ctx: 1)}, edges=[])\n",
    )
    run_id = server.start_run("a-very-long-workflow-name-for-the-list")
    server.wait_status(run_id, "completed")
    result = invoke(server, "run", "list")
    rows = [line for line in result.stdout.splitlines() if run_id in line]
    assert len(rows) == 1
    assert "completed" in rows[0]
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
