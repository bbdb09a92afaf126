"""`pi-workflows pi install|uninstall` in a private HOME, and the real Pi loading the result."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from pi.support.mock_provider import MockProvider
from pi.support.pi_rpc import EXTENSION, PiProcess, workflows_cli

MARKER = "// pi-workflows-loader v1"


def run_cli(
    home: Path, *args: str, agent_dir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real `pi-workflows` executable with a private HOME (and agent directory)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PI_")}
    env["HOME"] = str(home)
    if agent_dir is not None:
        env["PI_CODING_AGENT_DIR"] = str(agent_dir)
    return subprocess.run(
        [str(workflows_cli()), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def run_json(home: Path, *args: str, agent_dir: Path | None = None) -> dict[str, Any]:
    """Run a `--json` command that must succeed and return its document."""
    result = run_cli(home, *args, "--json", agent_dir=agent_dir)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def tree(root: Path) -> dict[str, str]:
    """Every file under `root` with its content (directories as `<dir>`)."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        found[key] = "<dir>" if path.is_dir() else path.read_text()
    return found


def test_install_writes_one_loader_and_is_idempotent(tmp_path: Path) -> None:
    """`pi install` writes one loader under ~/.pi/agent/extensions that names our extension
    and this venv's CLI; a second install changes nothing."""
    home = tmp_path / "home"
    home.mkdir()

    first = run_json(home, "pi", "install")
    before = tree(home)
    second = run_json(home, "pi", "install")

    loader = home / ".pi" / "agent" / "extensions" / "pi-workflows" / "index.ts"
    assert first["changed"] is True
    assert second["changed"] is False
    assert first["loader"] == second["loader"] == str(loader)
    assert first["agentDir"] == str(home / ".pi" / "agent")
    assert first["extension"] == str(EXTENSION)
    assert first["cli"] == str(workflows_cli())
    assert Path(first["cli"]).is_absolute()
    text = loader.read_text()
    assert text.startswith(MARKER + "\n")
    assert json.dumps(str(EXTENSION)) in text
    assert json.dumps(str(workflows_cli())) in text
    assert tree(home) == before
    assert [key for key, value in before.items() if value != "<dir>"] == [
        ".pi/agent/extensions/pi-workflows/index.ts"
    ]


def test_install_honours_pi_coding_agent_dir(tmp_path: Path) -> None:
    """With PI_CODING_AGENT_DIR set, the loader goes there and nothing is written in HOME."""
    home, agent = tmp_path / "home", tmp_path / "agent"
    home.mkdir()

    document = run_json(home, "pi", "install", agent_dir=agent)

    assert document["agentDir"] == str(agent)
    assert (agent / "extensions" / "pi-workflows" / "index.ts").is_file()
    assert tree(home) == {}


def test_uninstall_removes_exactly_what_install_added(tmp_path: Path) -> None:
    """Install then uninstall leaves the agent directory as it was; a second uninstall is a
    no-op."""
    home = tmp_path / "home"
    agent = home / ".pi" / "agent"
    (agent / "extensions").mkdir(parents=True)
    (agent / "settings.json").write_text('{"theme": "dark"}\n')
    (agent / "extensions" / "mine.ts").write_text("export default function () {}\n")
    before = tree(home)

    run_json(home, "pi", "install")
    removed = run_json(home, "pi", "uninstall")
    again = run_json(home, "pi", "uninstall")

    assert removed["removed"] is True
    assert again["removed"] is False
    assert tree(home) == before


def test_install_and_uninstall_leave_a_foreign_file_alone(tmp_path: Path) -> None:
    """A file at the loader's place that `pi install` did not write is neither replaced nor
    removed, and the refusal is one error line."""
    home = tmp_path / "home"
    loader = home / ".pi" / "agent" / "extensions" / "pi-workflows" / "index.ts"
    loader.parent.mkdir(parents=True)
    loader.write_text("export default function () {}\n")

    install = run_cli(home, "pi", "install")
    uninstall = run_cli(home, "pi", "uninstall")

    for result in (install, uninstall):
        assert result.returncode == 1
        assert result.stderr.startswith("pi-workflows: error: ")
        assert result.stderr.count("\n") == 1
        assert "not written by pi-workflows" in result.stderr
    assert loader.read_text() == "export default function () {}\n"


def test_pi_discovers_and_loads_the_installed_extension(tmp_path: Path) -> None:
    """After `pi install`, the real Pi started without `-e` finds `/workflow` by itself."""
    with MockProvider() as provider:
        pi = PiProcess(tmp_path, provider, cwd=tmp_path, extensions=[], discover_extensions=True)
        run_json(pi.home, "pi", "install", agent_dir=pi.agent_dir)
        with pi:
            note = pi.slash("/workflow help")
    assert note["notifyType"] == "info"
    assert note["message"].startswith("Usage: /workflow <subcommand>")
