"""`run show` of a retried node labels each traceback with its visit and try, and once the
visit completed, summarises the failed tries in one line with the command that prints them.
The real CLI in a child process at 80 columns, against a real server."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

FLAKY = """
from pathlib import Path
from pi_workflows import Workflow, compute, retry

def flaky(ctx):
    counter = Path(ctx.input["counter"])
    tries = int(counter.read_text() or "0") + 1 if counter.exists() else 1
    counter.write_text(str(tries))
    if tries <= ctx.input["fail"]:
        raise ValueError(f"flaky failure number {tries}")
    return {"tries": tries}

workflow = Workflow(
    "flaky", start="fetch",
    nodes={"fetch": compute(flaky, retry=retry(attempts=3, delay=0))},
)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server whose project holds `flaky`; output 80 columns wide."""
    process = ServerProcess(tmp_path, env={"COLUMNS": "80"})
    process.write_workflow("flaky", FLAKY)
    process.start()
    yield process
    process.cleanup()


def _show(server: ServerProcess, run_id: str) -> str:
    shown: subprocess.CompletedProcess[str] = server.cli("run", "show", run_id, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert max(len(line) for line in shown.stdout.splitlines()) <= 80, shown.stdout
    return shown.stdout


def test_a_node_that_completed_after_failures_summarises_them(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Two failed tries then a success: no traceback is printed, one line says it failed
    twice before it completed on try 3 and names `run logs RUN --node fetch`."""
    run_id = server.start_run("flaky", {"counter": str(tmp_path / "a"), "fail": 2})
    assert server.wait_status(run_id, "completed")["output"] == {"tries": 3}
    text = _show(server, run_id)
    flat = " ".join(text.split())
    assert "Traceback" not in text, text
    assert (
        "node fetch (visit 1) failed 2 times before it completed on try 3; its tracebacks:"
        f" pi-workflows run logs {run_id} --node fetch"
    ) in flat, text
    assert server.diagnose() == []


def test_each_failed_try_is_labelled_with_its_visit_and_try(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Every try fails: each of the three tracebacks is labelled with visit 1 and its try."""
    run_id = server.start_run("flaky", {"counter": str(tmp_path / "b"), "fail": 9})
    server.wait_status(run_id, "failed")
    text = _show(server, run_id)
    for attempt in (1, 2, 3):
        assert f"Traceback of node fetch (visit 1, try {attempt})" in text, text
        assert f"ValueError: flaky failure number {attempt}" in text
    assert text.count("Traceback of node fetch") == 3
    assert server.diagnose() == []
