"""A run whose workflow code changed: every refusal it causes (an answer, `run resume`)
names `run upgrade` (dry run first), `run restart` and `run cancel`; `run show` does not send
the person to `run resume`; `run upgrade --dry-run` exits as the upgrade itself would. The
real CLI in a child process at 80 columns, against a real server."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

STEPS = """
from pi_workflows import Workflow, checkpoint, compute, edge
from greeting import greet

workflow = Workflow(
    "steps",
    start="a",
    nodes={
        "a": compute(lambda ctx: {"n": 1}),
        "ask": checkpoint(lambda ctx: {"question": "name?"}),
        "greet": compute(lambda ctx: {"text": greet(ctx.outputs["ask"]["name"])}),
    },
    edges=[edge("a", "ask"), edge("ask", "greet")],
)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server for one test, always cleaned up."""
    process = ServerProcess(tmp_path, env={"COLUMNS": "80"})
    process.start()
    yield process
    process.cleanup()


def pw(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """The real `pi-workflows --home HOME ARGS` at 80 columns."""
    return server.cli(*args, timeout=60)


def _greeting(server: ServerProcess, word: str) -> None:
    server.write_module("greeting", f"def greet(name):\n    return {word!r} + ' ' + name\n")


def _advice(run_id: str) -> list[str]:
    return [
        f"pi-workflows run upgrade {run_id} --dry-run",
        f"pi-workflows run upgrade {run_id}' goes on",
        f"pi-workflows run restart {run_id}",
        f"pi-workflows run cancel {run_id}",
    ]


def _parked_on_changed_code(server: ServerProcess) -> tuple[str, subprocess.CompletedProcess[str]]:
    """A run of `steps` waiting at its checkpoint when its module changed; the answer that
    found it out, as the CLI printed it."""
    _greeting(server, "hello")
    server.write_workflow("steps", STEPS)
    run_id = server.start_run("steps")
    server.wait_status(run_id, "waiting")
    _greeting(server, "bye")
    answered = pw(server, "checkpoint", "answer", run_id, "--value", '{"name": "Ada"}')
    server.wait_status(run_id, "paused")
    return run_id, answered


def test_every_refusal_of_a_changed_run_names_upgrade_restart_and_cancel(
    server: ServerProcess,
) -> None:
    """The answer that finds the change, a second answer and `run resume` are each refused
    in one line that names the dry run, the upgrade, restart and cancel; `run show` does
    not offer `run resume`; after the files are put back, `run resume` works."""
    run_id, answered = _parked_on_changed_code(server)
    assert answered.returncode == 1, answered.stdout + answered.stderr
    for words in _advice(run_id):
        assert words in answered.stderr, answered.stderr
    assert "resume it and submit again" not in answered.stderr
    again = pw(server, "checkpoint", "answer", run_id, "--value", '{"name": "Ada"}')
    assert again.returncode == 1
    assert len(again.stderr.splitlines()) == 1, again.stderr
    for words in _advice(run_id):
        assert words in again.stderr, again.stderr
    resumed = pw(server, "run", "resume", run_id)
    assert resumed.returncode == 1, resumed.stdout
    assert len(resumed.stderr.splitlines()) == 1, resumed.stderr
    assert "code changed since it started (workflowSourceChanged)" in resumed.stderr
    for words in _advice(run_id):
        assert words in resumed.stderr, resumed.stderr
    assert server.wait_status(run_id, "paused")["parkReason"] == "workflowSourceChanged"
    shown = pw(server, "run", "show", run_id)
    assert shown.returncode == 0, shown.stderr
    flat = " ".join(shown.stdout.split())
    assert f"after pi-workflows run resume {run_id}" not in flat
    assert f"answer after pi-workflows run upgrade {run_id}" in flat, shown.stdout
    assert max(len(line) for line in shown.stdout.splitlines()) <= 80
    _greeting(server, "hello")  # the code as the run recorded it: a resume is fine again
    back = pw(server, "run", "resume", run_id)
    assert back.returncode == 0, back.stderr
    server.wait_status(run_id, "waiting")
    assert server.diagnose() == []


def test_a_dry_run_exits_as_the_upgrade_would(server: ServerProcess) -> None:
    """`run upgrade --dry-run` exits 0 when the upgrade would be carried out and 1 (after
    its plan) when it would be refused, as the upgrade itself then does."""
    run_id, _ = _parked_on_changed_code(server)
    dry = pw(server, "run", "upgrade", run_id, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert dry.stdout.splitlines()[0] == f"run {run_id} (paused) can be upgraded:"
    server.write_workflow("steps", STEPS.replace('"ask"', '"asked"'))  # its node is gone
    refused = pw(server, "run", "upgrade", run_id, "--dry-run")
    assert refused.stdout.splitlines()[0] == f"run {run_id} (paused) cannot be upgraded:"
    real = pw(server, "run", "upgrade", run_id)
    assert real.returncode == 1, real.stdout
    assert refused.returncode == real.returncode
    as_json = pw(server, "run", "upgrade", run_id, "--dry-run", "--json")
    assert as_json.returncode == 1
    assert '"possible": false' in as_json.stdout
    assert server.wait_status(run_id, "paused")["parkReason"] == "workflowSourceChanged"
    assert server.diagnose() == []
