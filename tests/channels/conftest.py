"""Fixtures for the channel tests: a CliRunner bound to a private state directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pi_workflows.cli.main import cli

Invoke = Callable[..., Result]

TOKEN = "123456789:AAH-secret_token_value_for_tests_only"
"""A bot token of the Bot API's shape; never printed by any command."""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A state directory for one test."""
    return tmp_path / "home"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    """A file holding the test bot token."""
    path = tmp_path / "bot-token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture
def invoke(home: Path) -> Invoke:
    """Run `pi-workflows --home HOME ARGS...` in-process and return click's result."""
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(cli, ["--home", str(home), *args])

    return run
