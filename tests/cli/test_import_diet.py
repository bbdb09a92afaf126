"""What a read-only CLI command imports: nothing it does not use.

A new ``pi-workflows`` process spends most of its time importing (docs/performance.md); the
commands people run most often, ``run list`` and ``run show``, must not also pay for
starting a server (``subprocess``), hashing (``hashlib``, OpenSSL's binding), the run
history and log commands, the live view (Textual), the server, the store, the runner or
the JSON Schema library of typed contracts.
Each command runs in a new interpreter against a real server, which writes the names of
every module it imported when it exits.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

PROBE = """
import atexit, os, sys
atexit.register(
    lambda: open(os.environ["MODULES_OUT"], "w").write("\\n".join(sorted(sys.modules)))
)
from pi_workflows.cli.main import main
sys.argv = ["pi-workflows", *sys.argv[1:]]
main()
"""

NOT_IMPORTED = frozenset(
    {
        "subprocess",
        "hashlib",
        "asyncio",
        "textual",
        "psutil",
        "pi_workflows.cli.commands.run_history",
        "pi_workflows.cli.timeline",
        "pi_workflows.server",
        "pi_workflows.store",
        "pi_workflows.runner",
        "pi_workflows.engine",
        # typed contracts' JSON Schema checks run in the server and the runner only
        "jsonschema",
        "pydantic",
        # the web page's stack runs in its own process (`pi-workflows ui` starts it)
        "aiohttp",
        "jinja2",
        "pi_workflows.web",
        # the channels extra runs in the channel process only (docs/channels.md)
        "telegram",
        "apprise",
        "httpx",
        "pi_workflows.channels",
    }
)

WORKFLOW = """
from pi_workflows import Workflow, compute

workflow = Workflow("one", start="a", nodes={"a": compute(lambda ctx: {"ok": True})}, edges=[])
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path)
    process.write_workflow("one", WORKFLOW)
    process.start()
    yield process
    process.cleanup()


def _imported(server: ServerProcess, tmp_path: Path, *args: str) -> set[str]:
    out = tmp_path / "modules.txt"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        env={**server.env, "MODULES_OUT": str(out)},
        cwd=server.project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), "the command printed nothing"
    return set(out.read_text().split())


@pytest.mark.parametrize("command", ["run list", "run show", "server status"])
def test_a_read_only_command_imports_only_what_it_uses(
    server: ServerProcess, tmp_path: Path, command: str
) -> None:
    """``run list``, ``run show`` and ``server status`` import none of the modules above
    (nor any submodule of them)."""
    run_id = server.start_run("one")
    server.wait_status(run_id, "completed", 60)
    args = command.split() + ([run_id] if command == "run show" else [])
    imported = _imported(server, tmp_path, *args)
    assert "pi_workflows.cli.commands.runs" in imported or command == "server status"
    found = {
        name
        for name in imported
        if any(name == root or name.startswith(f"{root}.") for root in NOT_IMPORTED)
    }
    assert found == set()


NOT_IMPORTED_FOR_JSON = frozenset(
    {
        # tables and their layout: `--json` prints with the json module alone
        "rich",
        "pi_workflows.cli.output",
        "pi_workflows.cli.show",
        "pi_workflows.cli.requests",
        "pi_workflows.cli.lineage_text",
        # only `PI_WORKFLOWS_DEBUG=1` prints a traceback
        "traceback",
    }
)


@pytest.mark.parametrize("command", ["run list --json", "run show --json"])
def test_a_json_command_imports_no_table_renderer(
    server: ServerProcess, tmp_path: Path, command: str
) -> None:
    """``run list --json`` and ``run show ID --json`` import neither rich nor the table and
    run renderers (nor anything of the first list), and still print their JSON."""
    run_id = server.start_run("one")
    server.wait_status(run_id, "completed", 60)
    args = command.split() + ([run_id] if "show" in command else [])
    imported = _imported(server, tmp_path, *args)
    assert "pi_workflows.cli.json_output" in imported
    found = {
        name
        for name in imported
        if any(
            name == root or name.startswith(f"{root}.")
            for root in NOT_IMPORTED | NOT_IMPORTED_FOR_JSON
        )
    }
    assert found == set()
