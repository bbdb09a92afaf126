"""Fixtures for the CLI tests: a CliRunner bound to a private state directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pi_workflows.cli.main import cli

Invoke = Callable[..., Result]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A state directory for one test (created only by whoever needs it)."""
    return tmp_path / "home"


@pytest.fixture
def invoke(home: Path) -> Invoke:
    """Run `pi-workflows --home HOME ARGS...` in-process and return click's result."""
    runner = CliRunner()

    def run(*args: str, stdin: str | None = None) -> Result:
        return runner.invoke(cli, ["--home", str(home), *args], input=stdin)

    return run
