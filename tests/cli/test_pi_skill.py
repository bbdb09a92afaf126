"""The pi-workflows skill (`integrations/pi/skills/pi-workflows/SKILL.md`) tells the model only
commands and options the CLI has, and is a valid Agent Skill.

Every `pi-workflows ...` command the skill shows (in code blocks and inline) is resolved
against the real click command tree, so renaming a command or an option without updating
the skill fails here. That Pi loads the skill is tested with the real Pi in
tests/pi/test_install.py.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from pi_workflows.cli.main import cli

pytestmark = pytest.mark.timeout(60)

SKILL = Path(__file__).resolve().parents[2] / "integrations/pi/skills/pi-workflows/SKILL.md"
NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def frontmatter(text: str) -> dict[str, str]:
    """The `key: value` lines between the opening and closing `---`."""
    assert text.startswith("---\n")
    head = text[4 : text.index("\n---\n", 4)]
    fields: dict[str, str] = {}
    for line in head.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def block_commands(text: str) -> list[str]:
    """The command lines of the skill's ```bash blocks."""
    commands: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        commands += [line.strip() for line in block.splitlines() if line.strip()]
    return commands


def inline_commands(text: str) -> list[str]:
    """The `pi-workflows ...` commands quoted inline in the prose."""
    return re.findall(r"`(pi-workflows [^`]+)`", text)


def resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The command the words name, and the words after it."""
    assert words[0] == "pi-workflows"
    command: click.Command = cli
    rest = words[1:]
    ctx = click.Context(cli)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        found = command.get_command(ctx, rest[0])
        assert found is not None, f"no command {rest[0]!r} in {' '.join(words)}"
        command, rest = found, rest[1:]
    assert not isinstance(command, click.Group), f"{' '.join(words)} names a group"
    return command, rest


def options(command: click.Command) -> set[str]:
    return {name for param in command.params for name in (*param.opts, *param.secondary_opts)}


def test_the_skill_is_a_valid_agent_skill() -> None:
    """Frontmatter with a portable `name` equal to its directory and a `description` that
    says what it does and when to use it, within the Agent Skills limits."""
    fields = frontmatter(SKILL.read_text())

    assert fields["name"] == SKILL.parent.name == "pi-workflows"
    assert NAME.match(fields["name"])
    assert len(fields["name"]) <= 64
    assert 0 < len(fields["description"]) <= 1024
    assert "Use when" in fields["description"]


def test_every_command_the_skill_shows_exists_with_its_options() -> None:
    """Each command in the skill's code blocks and prose is a real command, each `--option`
    it uses is one of that command's, and every command in a code block asks for `--json`."""
    text = SKILL.read_text()
    shown = block_commands(text)
    quoted = inline_commands(text)

    assert len(shown) >= 10
    for line in [*shown, *quoted]:
        words = shlex.split(line)
        command, rest = resolve(words)
        used = {word.split("=")[0] for word in rest if word.startswith("--")}
        assert used <= options(command), f"{line}: unknown {sorted(used - options(command))}"
    assert all("--json" in shlex.split(line) for line in shown), shown
    named = {" ".join(shlex.split(line)[:3]) for line in [*shown, *quoted]}
    assert {
        "pi-workflows workflows list",
        "pi-workflows run start",
        "pi-workflows run show",
        "pi-workflows interaction list",
        "pi-workflows checkpoint answer",
        "pi-workflows interaction submit",
        "pi-workflows decision answer",
    } <= named
