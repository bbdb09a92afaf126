"""docs/cli.md documents every command and option that `--help` shows, and nothing else."""

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


def _leaf_commands(
    group: click.Group, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in sorted(group.commands.items()):
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


def test_the_reference_documents_no_command_that_does_not_exist() -> None:
    """Every command section in docs/cli.md names a real command."""
    real = {"pi-workflows " + " ".join(path) for path in COMMANDS}
    assert set(_sections()) == real


def test_global_options_and_exit_codes_are_documented() -> None:
    """The root's options and every exit code the CLI uses appear in docs/cli.md."""
    text = DOC.read_text(encoding="utf-8")
    for option in _long_options(cli):
        if option != "--help":
            assert f"`{option}" in text
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |"):
        assert code in text
