"""`run show`, `run history`, `run logs` and `run list` through the real CLI and server."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from itertools import takewhile
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pi_workflows.cli.main import cli
from pi_workflows.cli.output import format_time

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
    assert "Traceback of node boom (visit 1, try 1)" in text
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
    """Each event is one line with its revision, node and actor (in a terminal wide enough
    for every detail); --json has every event."""
    run_id = failed_run(server)
    result = invoke_at(server, 120, "run", "history", run_id)
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
    limited = invoke_at(server, 120, "run", "history", run_id, "--after", "2", "--limit", "3")
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
    event_lines = [line for line in history_out.splitlines() if not line.startswith(" ")]
    assert event_lines[-1].split()[2] == "run.failed"  # (a long detail wraps below it)
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
    assert f"more runs: pi-workflows run list --limit 2 --after {page['next']}" in human.stdout
    # The hint repeats every filter (--since as the instant it meant), so pasting it gives
    # the next page of the same listing.
    filtered = invoke(
        server, "run", "list", "--workflow", "quick", "--status", "completed", "--since",
        "1h", "--limit", "1",
    )  # fmt: skip
    (hint,) = [line for line in filtered.stdout.splitlines() if line.startswith("more runs:")]
    words = shlex.split(hint.removeprefix("more runs: pi-workflows "))
    assert words[:8] == ["run", "list", "--status", "completed", "--workflow", "quick",
                         "--since", words[7]]  # fmt: skip
    assert words[8:10] == ["--limit", "1"]
    assert words[10] == "--after"
    second = json.loads(invoke(server, *words, "--json").stdout)
    assert [r["runId"] for r in second["runs"]] == [quick[1]]
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


LONG_WORKFLOW = "a-very-long-workflow-name-for-the-list"  # 38 characters
LONG_NODE = "classify-every-incoming-ticket-x"  # 32 characters
LONG = f"""
from pi_workflows import Workflow, checkpoint, compute, edge, idempotent_effect, action

def fail(ctx):
    raise ValueError("the ticket could not be classified because " + "it was unclear " * 6)

workflow = Workflow(
    "{LONG_WORKFLOW}",
    start="{LONG_NODE}",
    nodes={{
        "{LONG_NODE}": action(lambda ctx: {{"sent": True}},
                              effect=idempotent_effect("write-the-classification-record")),
        "wait-for-a-person-to-look-at-it": checkpoint(lambda ctx: {{"question": "Fine?"}}),
        "fail-with-a-rather-long-message": compute(fail),
    }},
    edges=[edge("{LONG_NODE}", "wait-for-a-person-to-look-at-it"),
           edge("wait-for-a-person-to-look-at-it", "fail-with-a-rather-long-message")],
)
"""


def invoke_at(server: ServerProcess, columns: int, *args: str) -> Result:
    """`pi-workflows --home HOME ARGS` in-process in a terminal `columns` wide."""
    env = {"HOME": str(server.user_home), "COLUMNS": str(columns)}
    return CliRunner().invoke(cli, ["--home", str(server.home), *args], env=env)


def column(lines: list[str], start: int, end: int | None) -> str:
    """The text between two character offsets of `lines`, joined without spaces (a wrapped
    cell whole)."""
    return "".join("".join(line[start:end].split()) for line in lines)


def test_run_list_shows_every_column_whole_at_80_columns_with_long_names(
    server: ServerProcess,
) -> None:
    """At 80 columns a run with a 38-character workflow name and a 32-character node keeps
    its id, status and time whole on its first line, and its workflow and node (moved under
    the workflow) wrap whole in their column."""
    server.write_workflow(LONG_WORKFLOW, LONG)
    run_id = server.start_run(LONG_WORKFLOW)
    server.wait_status(run_id, "waiting")
    short = server.start_run("logs")
    server.wait_status(short, "waiting")
    result = invoke_at(server, 80, "run", "list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    header = lines[0]
    assert header.split() == ["run", "workflow", "/", "node", "status", "updated"]
    starts = [header.index(name) for name in ("workflow", "status", "updated")]
    first = next(i for i, line in enumerate(lines) if line.startswith(run_id))
    block = [lines[first]]
    for line in lines[first + 1 :]:
        if line.startswith("run_"):
            break
        block.append(line)
    updated = server.run(run_id)["updatedAt"]
    assert lines[first][starts[1] :].split()[0] == "waiting"
    assert lines[first][starts[2] :].strip() == format_time(updated, short=True)
    assert column(block, starts[0], starts[1]) == f"{LONG_WORKFLOW}↳wait-for-a-person-to-look-at-it"
    short_row = next(line for line in lines if line.startswith(short))
    assert short_row.split()[1:3] == ["logs", "waiting"]


def test_run_list_at_60_columns_keeps_ids_statuses_and_times_and_drops_the_names(
    server: ServerProcess,
) -> None:
    """Too narrow for the names, `run list` leaves out workflow and node and says so;
    ids, statuses and times stay whole."""
    run_id = server.start_run("logs")
    view = server.wait_status(run_id, "waiting")
    result = invoke_at(server, 60, "run", "list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["run", "status", "updated"]
    assert lines[2].split() == [
        run_id,
        "waiting",
        *format_time(view["updatedAt"], short=True).split(),
    ]
    assert lines[-1] == "(workflow and node left out at 60 columns; --json has them)"
    assert all(len(line) <= 60 for line in lines)


def test_run_show_keeps_long_node_ids_and_effect_types_whole_at_80_columns(
    server: ServerProcess,
) -> None:
    """Node ids and effect ids and types are printed whole; errors give way instead; the
    execution mode and the origin session are shown."""
    server.write_workflow(LONG_WORKFLOW, LONG)
    run_id = server.start_run(LONG_WORKFLOW, origin_session="session-for-show")
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.answer_checkpoint(run_id, "yes")
    server.wait_status(run_id, "failed")
    for verbose in ((), ("--verbose",)):
        result = invoke_at(server, 80, "run", "show", run_id, *verbose)
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert all(len(line) <= 80 for line in lines), [x for x in lines if len(x) > 80]
        words = result.stdout.split()
        for node in (
            LONG_NODE,
            "wait-for-a-person-to-look-at-it",
            "fail-with-a-rather-long-message",
        ):
            assert node in words, node
        assert "write-the-classification-record" in words
        (effect,) = server.run(run_id)["effects"]
        assert effect["effectId"] in words
        assert any(line.split() == ["mode", "attached"] for line in lines)
        assert any(line.split() == ["session", "session-for-show"] for line in lines)
        assert any(
            line.startswith("fail-with-a-rather-long-message (visit 1): ValueError: the ticket")
            for line in lines
        )
    assert "(idempotent)" in result.stdout  # with --verbose, the effect's kind


def test_run_show_output_of_a_failed_node_prints_only_its_error(server: ServerProcess) -> None:
    """`--output NODE` of a failed node prints one error line and nothing else, exit 1."""
    run_id = failed_run(server)
    failed = invoke(server, "run", "show", run_id, "--output", "boom")
    assert failed.exit_code == 1
    assert failed.stdout == ""
    assert failed.stderr == "pi-workflows: error: node boom failed: ValueError: the answer was no\n"


def test_run_history_fits_80_columns_and_says_json_details_in_words(
    server: ServerProcess,
) -> None:
    """Every history line fits 80 columns; a submitted answer reads as words, not JSON."""
    run_id = failed_run(server)
    result = invoke_at(server, 80, "run", "history", run_id)
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [x for x in lines if len(x) > 80]
    at = next(i for i, line in enumerate(lines) if "interaction.submitted" in line)
    detail_at = lines[0].index("detail")
    wrapped = [lines[at], *takewhile(lambda line: line.startswith(" "), lines[at + 1 :])]
    assert " ".join(line[detail_at:].strip() for line in wrapped) == "answer submitted, validating"
    assert "{" not in result.stdout
    assert not any(line.startswith("── ") for line in lines)  # every event is from today


def test_run_logs_for_a_node_the_run_does_not_have_names_its_nodes(
    server: ServerProcess,
) -> None:
    """`run logs RUN --node nosuch` is one error line listing the run's nodes, exit 1."""
    run_id = failed_run(server)
    result = invoke(server, "run", "logs", run_id, "--node", "nosuch")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"pi-workflows: error: run {run_id} has no node 'nosuch'; its nodes: hello, chatty,"
        " say, ask, boom\n"
    )
    quiet = invoke(server, "run", "logs", run_id, "--node", "ask")
    assert (quiet.exit_code, quiet.stdout) == (0, "no output captured for node ask\n")


def _next_line(shown: str) -> str:
    lines = shown.splitlines()
    (index,) = [i for i, line in enumerate(lines) if line.startswith("next ")]
    following = []
    for line in lines[index + 1 :]:  # a long next step wraps under its column
        if not line.startswith(" " * 4) or not line.strip():
            break
        following.append(line.strip())
    return " ".join([lines[index].removeprefix("next").strip(), *following])


def test_run_show_says_what_to_do_next_in_every_state_that_is_not_running(
    server: ServerProcess,
) -> None:
    """Without `-v`: a waiting run names the command that answers it; the same run paused
    names the resume (and offers no answer that would be refused); a failed run names the
    restart."""
    run_id = server.start_run("logs")
    server.wait_status(run_id, "waiting")
    waiting = invoke(server, "run", "show", run_id).stdout
    assert _next_line(waiting) == f"pi-workflows checkpoint answer {run_id} --value JSON"
    assert invoke(server, "run", "pause", run_id).exit_code == 0
    paused = invoke(server, "run", "show", run_id).stdout
    assert _next_line(paused) == f"pi-workflows run resume {run_id}"
    assert f"after pi-workflows run resume {run_id}" in paused
    assert "pi-workflows checkpoint answer" not in paused
    refused = invoke(server, "checkpoint", "answer", run_id, "--value", '"no"')
    assert refused.exit_code != 0
    assert invoke(server, "run", "resume", run_id).exit_code == 0
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.answer_checkpoint(run_id, "no")
    server.wait_status(run_id, "failed")
    failed = invoke(server, "run", "show", run_id).stdout
    assert (
        _next_line(failed) == f"to run it again from the start: pi-workflows run restart {run_id}"
    )
