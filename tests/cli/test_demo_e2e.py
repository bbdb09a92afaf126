"""End to end: `python -m pi_workflows.cli.demo` against the real server completes cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest


@pytest.mark.slow
def test_the_demo_completes_its_run_and_finds_clean_state(tmp_path: Path) -> None:
    """The demo starts a server, completes `builtin:demo`, reports clean state, names the
    built-ins to try next, exits 0, and leaves no server running."""
    home = tmp_path / "home"
    env = {**os.environ, "PI_WORKFLOWS_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-m", "pi_workflows.cli.demo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"Using the state directory {home} (from PI_WORKFLOWS_HOME)" in output
    assert "completed" in output
    assert "yes, from the demo" in output, "the answer reached the run's output"
    assert "the state is clean" in output
    assert "Built-in workflows to try next (docs/builtins.md):" in output
    for name in ("implement", "review", "watch"):
        assert f"  builtin:{name}  " in output
    assert "builtin:review-file" not in output
    assert "Demo finished: OK." in output
    assert not (home / "server.sock").exists(), "the demo stopped the server it started"
    leftovers = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if str(home) in " ".join(p.info["cmdline"] or [])
    ]
    assert leftovers == []
