"""docs/cli.md documents every command and option that `--help` shows, and nothing else:
both directions are checked, so neither a new option nor a removed one can drift."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from pi_workflows.cli.main import cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
HEADING = re.compile(r"^### (pi-workflows .+)$", re.MULTILINE)
OPTION_ROW = re.compile(r"^\| *(`-[^|]*)\|", re.MULTILINE)
LONG_OPTION = re.compile(r"`(--[a-z][a-z0-9-]*)")


def _leaf_commands(
    group: click.Group, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    context = click.Context(group)
    for name in sorted(group.list_commands(context)):  # the root group loads its commands lazily
        command = group.get_command(context, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from _leaf_commands(command, (*path, name))
        else:
            yield (*path, name), command


COMMANDS = dict(_leaf_commands(cli))


def _sections() -> dict[str, str]:
    """Map `pi-workflows run start` to the text of its section in docs/cli.md."""
    text = DOC.read_text(encoding="utf-8")
    matches = list(HEADING.finditer(text))
    sections = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end]
        sections[match.group(1)] = body.split("\n## ", 1)[0]
    return sections


def _long_options(command: click.Command) -> list[str]:
    return [
        name
        for param in command.params
        if isinstance(param, click.Option)
        for name in param.opts
        if name.startswith("--")
    ]


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_every_command_and_its_options_are_documented(path: tuple[str, ...]) -> None:
    """`pi-workflows <group> <cmd> --help` works and each of its options is in its doc section."""
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example:" in result.stdout, "every command's help shows an example"
    title = "pi-workflows " + " ".join(path)
    sections = _sections()
    assert title in sections, f"docs/cli.md has no section '### {title}'"
    for option in _long_options(COMMANDS[path]):
        if option == "--help":
            continue
        assert option in result.stdout
        assert f"`{option}" in sections[title], f"{option} of '{title}' is not documented"


def _documented_options(section: str) -> set[str]:
    """The long options a section's option table lists (its rows' first cells)."""
    return {option for cell in OPTION_ROW.findall(section) for option in LONG_OPTION.findall(cell)}


def test_the_reference_documents_no_command_that_does_not_exist() -> None:
    """Every command section in docs/cli.md names a real command."""
    real = {"pi-workflows " + " ".join(path) for path in COMMANDS}
    assert set(_sections()) - real == set(), "sections for commands that do not exist"
    assert real - set(_sections()) == set(), "commands without a section"


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_the_reference_documents_no_option_a_command_does_not_have(path: tuple[str, ...]) -> None:
    """Every option in a command's table in docs/cli.md is an option of that command."""
    section = _sections()["pi-workflows " + " ".join(path)]
    extra = _documented_options(section) - set(_long_options(COMMANDS[path]))
    assert extra == set(), f"docs/cli.md lists options 'pi-workflows {' '.join(path)}' lacks"


def test_the_option_check_sees_an_option_that_no_longer_exists() -> None:
    """The table parser finds every option of a row, so a stale row would be reported."""
    section = (
        "| option | meaning |\n|---|---|\n| `--verbose`, `-v` | more |\n"
        '| `--gone SECONDS` | removed |\n| `--json` | print `{"--not": 1}` |\n'
    )
    assert _documented_options(section) == {"--verbose", "--gone", "--json"}


def test_global_options_and_exit_codes_are_documented() -> None:
    """The root's options and every exit code the CLI uses appear in docs/cli.md."""
    text = DOC.read_text(encoding="utf-8")
    for option in _long_options(cli):
        if option != "--help":
            assert f"`{option}" in text
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |"):
        assert code in text
