"""Bad input is one `pi-workflows: error:` line and exit 2, found before any server is asked."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pi_workflows.cli.main import cli

Invoke = Callable[..., Result]


def _one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("pi-workflows: error: ")
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["run", "start", "demo", "--input", '{"items": [1, 2'], "--input"),
        (["checkpoint", "answer", "run_1", "--value", "{'single': 'quotes'}"], "--value"),
    ],
)
def test_invalid_json_names_the_option_and_the_position(
    invoke: Invoke, home: Path, args: list[str], option: str
) -> None:
    """Invalid JSON exits 2 with the option and line/column named, without contacting a server."""
    result = invoke(*args)
    assert result.exit_code == 2
    line = _one_error_line(result.stderr)
    assert f"'{option}'" in line
    assert "line 1 column" in line
    assert not home.exists(), "no server was started"


def test_nan_is_not_json(invoke: Invoke) -> None:
    """`NaN` is refused as input even though Python's json module would read it."""
    result = invoke("run", "start", "demo", "--input", '{"x": NaN}')
    assert result.exit_code == 2
    assert "NaN" in _one_error_line(result.stderr)


def test_an_unreadable_input_file_is_a_usage_error(invoke: Invoke, tmp_path: Path) -> None:
    """`--input @FILE` with a missing file exits 2 naming the file."""
    result = invoke("run", "start", "demo", "--input", f"@{tmp_path / 'missing.json'}")
    assert result.exit_code == 2
    assert "missing.json" in _one_error_line(result.stderr)


@pytest.mark.parametrize(
    "args",
    [
        ["frobnicate"],
        ["run", "explode", "r"],
        ["run", "list", "--colour", "red"],
        ["run", "list", "--status", "sleeping"],
        ["run", "list", "--limit", "0"],
        ["run", "list", "--after", "garbage"],
        ["run", "show"],
        ["decision", "answer", "run_1"],
    ],
)
def test_usage_errors_are_one_line_and_exit_2(invoke: Invoke, args: list[str]) -> None:
    """Unknown commands and options, bad choices and missing arguments exit 2 with one line."""
    result = invoke(*args)
    assert result.exit_code == 2
    line = _one_error_line(result.stderr)
    assert "--help" in line


def test_a_group_without_a_command_shows_its_help(invoke: Invoke) -> None:
    """`pi-workflows run` lists the run commands and exits 2."""
    result = invoke("run")
    assert result.exit_code == 2
    assert "start" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_exits_0() -> None:
    """`pi-workflows --help` prints usage and exits 0."""
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "Usage: pi-workflows" in result.stdout


def test_a_bad_page_cursor_is_a_usage_error_in_the_words_of_other_options(
    invoke: Invoke, home: Path
) -> None:
    """`run list --after garbage` exits 2 naming `--after` and what a cursor looks like, in
    the words of any other bad option (no protocol words), before any server is asked."""
    result = invoke("run", "list", "--after", "garbage")
    assert result.exit_code == 2
    line = _one_error_line(result.stderr)
    assert "Invalid value for '--after': 'garbage' is not a page cursor" in line
    assert "payload" not in line
    assert not home.exists(), "no server was started"
