"""`pi-workflows pi install|uninstall` in a private HOME, and the real Pi using the result.

The extension directory (`integrations/pi`) is a Pi package; `pi install` registers it in
Pi's user settings the way Pi's own `pi install PATH` does, so the real `pi list` shows it,
the real `pi remove` removes it, and the real Pi loads its extension and its skill.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from pi.support.mock_provider import MockProvider, text
from pi.support.pi_rpc import PI_DIR, PiProcess, node_bin, pi_binary, workflows_cli

pytestmark = pytest.mark.timeout(120)

MARKER = "// pi-workflows-loader v1"
SKILL = PI_DIR / "skills" / "pi-workflows" / "SKILL.md"


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


def run_pi(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real `pi` (a package command such as `list` or `remove`) in a private HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PI_", "XDG_"))}
    env.update(
        {
            "HOME": str(home),
            "PATH": f"{node_bin()}{os.pathsep}{env.get('PATH', '')}",
            "PI_OFFLINE": "1",
            "PI_TELEMETRY": "0",
            "PI_SKIP_VERSION_CHECK": "1",
            "NO_COLOR": "1",
        }
    )
    return subprocess.run(
        [str(pi_binary()), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def settings(home: Path) -> dict[str, Any]:
    return dict(json.loads((home / ".pi" / "agent" / "settings.json").read_text()))


def tree(root: Path) -> dict[str, str]:
    """Every file under `root` with its content (directories as `<dir>`)."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        found[key] = "<dir>" if path.is_dir() else path.read_text()
    return found


def other_installation(root: Path) -> Path:
    """A copy of the Pi package's manifest elsewhere: another pi-workflows installation."""
    package = root / "elsewhere" / "integrations" / "pi"
    (package / "extension").mkdir(parents=True)
    (package / "package.json").write_text((PI_DIR / "package.json").read_text())
    (package / "extension" / "index.ts").write_text("export default function () {}\n")
    return package


def test_install_registers_the_package_in_pi_settings_and_is_idempotent(tmp_path: Path) -> None:
    """`pi install` adds this checkout's Pi package (as an absolute path) to `packages` in
    ~/.pi/agent/settings.json, keeping every other setting and package; a second install
    changes nothing."""
    home = tmp_path / "home"
    agent = home / ".pi" / "agent"
    agent.mkdir(parents=True)
    (agent / "settings.json").write_text(
        json.dumps({"theme": "dark", "packages": ["npm:@example/tools@1.0.0"]})
    )

    first = run_json(home, "pi", "install")
    before = tree(home)
    second = run_json(home, "pi", "install")

    assert (first["changed"], second["changed"]) == (True, False)
    assert first["package"] == str(PI_DIR)
    assert first["extension"] == str(PI_DIR / "extension" / "index.ts")
    assert first["skill"] == str(SKILL)
    assert first["settings"] == str(agent / "settings.json")
    assert first["agentDir"] == str(agent)
    assert first["cli"] == str(workflows_cli())
    assert (first["replaced"], first["removedLoader"]) == ([], None)
    assert settings(home) == {
        "theme": "dark",
        "packages": ["npm:@example/tools@1.0.0", str(PI_DIR)],
    }
    assert tree(home) == before
    manifest = json.loads((PI_DIR / "package.json").read_text())
    assert manifest["pi"]["extensions"] == ["./extension/index.ts"]
    assert manifest["pi"]["skills"] == ["./skills"]
    assert set(manifest["peerDependencies"]) >= {"@earendil-works/pi-coding-agent", "typebox"}
    assert "dependencies" not in manifest


def test_install_honours_pi_coding_agent_dir(tmp_path: Path) -> None:
    """With PI_CODING_AGENT_DIR set, the package is registered there and HOME stays empty."""
    home, agent = tmp_path / "home", tmp_path / "agent"
    home.mkdir()

    document = run_json(home, "pi", "install", agent_dir=agent)

    assert document["agentDir"] == str(agent)
    assert json.loads((agent / "settings.json").read_text()) == {"packages": [str(PI_DIR)]}
    assert tree(home) == {}


def test_uninstall_removes_exactly_what_install_added(tmp_path: Path) -> None:
    """Install then uninstall leaves the settings as they were (other packages and keys kept);
    a second uninstall is a no-op."""
    home = tmp_path / "home"
    agent = home / ".pi" / "agent"
    (agent / "extensions").mkdir(parents=True)
    (agent / "settings.json").write_text(
        json.dumps({"theme": "dark", "packages": ["../mine"]}, indent=2) + "\n"
    )
    (agent / "extensions" / "mine.ts").write_text("export default function () {}\n")
    before = tree(home)

    run_json(home, "pi", "install")
    removed = run_json(home, "pi", "uninstall")
    again = run_json(home, "pi", "uninstall")

    assert (removed["removed"], removed["sources"]) == (True, [str(PI_DIR)])
    assert (again["removed"], again["sources"]) == (False, [])
    assert tree(home) == before


def test_install_replaces_another_installation_and_the_old_loader(tmp_path: Path) -> None:
    """Another installation's pi-workflows package (and one of a wheel installation that is
    gone) and the loader an earlier version wrote are replaced by this installation's
    package (one extension, never two); a file at the loader's place that pi-workflows did
    not write is left alone."""
    home = tmp_path / "home"
    agent = home / ".pi" / "agent"
    other = other_installation(tmp_path)
    agent.mkdir(parents=True)
    gone = tmp_path / "gone" / "lib" / "python3.11" / "site-packages" / "pi_workflows"
    stale = str(gone / "integrations" / "pi")  # a wheel installation removed since
    (agent / "settings.json").write_text(json.dumps({"packages": [str(other), "../kept", stale]}))
    loader = agent / "extensions" / "pi-workflows" / "index.ts"
    loader.parent.mkdir(parents=True)
    loader.write_text(f"{MARKER}\nimport x from '/old/index.ts';\n")

    document = run_json(home, "pi", "install")

    assert document["replaced"] == [str(other), stale]
    assert document["removedLoader"] == str(loader)
    assert settings(home)["packages"] == ["../kept", str(PI_DIR)]
    assert not loader.parent.exists()

    loader.parent.mkdir(parents=True)
    loader.write_text("export default function () {}\n")
    removed = run_json(home, "pi", "uninstall")
    assert (removed["removed"], removed["removedLoader"]) == (True, None)
    assert settings(home)["packages"] == ["../kept"]
    assert loader.read_text() == "export default function () {}\n"


def test_bad_settings_are_refused_in_one_line_and_left_unchanged(tmp_path: Path) -> None:
    """Settings that are not JSON (or whose `packages` is not a list) are reported in one
    line naming the file, and the file is not touched."""
    home = tmp_path / "home"
    path = home / ".pi" / "agent" / "settings.json"
    path.parent.mkdir(parents=True)
    for content in ('{"packages": [', '{"packages": "x"}', "[1, 2]"):
        path.write_text(content)

        result = run_cli(home, "pi", "install")

        assert result.returncode == 1
        assert result.stderr.startswith(f"pi-workflows: error: Pi's settings {path}")
        assert result.stderr.count("\n") == 1
        assert path.read_text() == content


def test_install_waits_for_pi_settings_lock_and_takes_over_a_stale_one(tmp_path: Path) -> None:
    """While Pi holds its settings lock (`settings.json.lock`) install does not write and
    fails in one line naming the lock; a lock left by a dead process (older than 10 s) is
    taken over."""
    home = tmp_path / "home"
    agent = home / ".pi" / "agent"
    agent.mkdir(parents=True)
    (agent / "settings.json").write_text("{}")
    lock = agent / "settings.json.lock"
    lock.mkdir()

    held = run_cli(home, "pi", "install")

    assert held.returncode == 1
    assert str(lock) in held.stderr
    assert held.stderr.count("\n") == 1
    assert (agent / "settings.json").read_text() == "{}"

    old = time.time() - 60
    os.utime(lock, (old, old))
    run_json(home, "pi", "install")
    assert settings(home) == {"packages": [str(PI_DIR)]}
    assert not lock.exists()


def test_pi_lists_and_removes_the_registered_package(tmp_path: Path) -> None:
    """The real `pi list` shows the package `pi install` registered, and the real
    `pi remove PATH` removes it, after which `pi uninstall` has nothing left to do."""
    home = tmp_path / "home"
    home.mkdir()
    run_json(home, "pi", "install")

    listed = run_pi(home, "list")
    removed = run_pi(home, "remove", str(PI_DIR))

    assert listed.returncode == 0, listed.stderr
    assert str(PI_DIR) in listed.stdout
    assert removed.returncode == 0, removed.stderr
    assert settings(home)["packages"] == []
    assert run_json(home, "pi", "uninstall")["removed"] is False


def test_pi_loads_the_registered_extension_and_skill(tmp_path: Path) -> None:
    """After `pi install`, the real Pi started without `-e` has `/workflow`, and the model's
    system prompt lists the pi-workflows skill with its description and SKILL.md's path."""
    with MockProvider() as provider:
        provider.on(lambda _request: True, text("Hello."), name="anything")
        pi = PiProcess(
            tmp_path,
            provider,
            cwd=tmp_path,
            extensions=[],
            discover_extensions=True,
            skills=True,
            builtin_tools=True,
        )
        run_json(pi.home, "pi", "install", agent_dir=pi.agent_dir)
        with pi:
            note = pi.slash("/workflow help")
            pi.run_prompt("Say hello.")
        [request] = provider.requests()

    assert note["notifyType"] == "info"
    assert note["message"].startswith("Usage: /workflow <subcommand>")
    system = request.messages[0]
    assert system["role"] == "system"
    prompt = system["content"] if isinstance(system["content"], str) else json.dumps(system)
    assert "<name>pi-workflows</name>" in prompt
    assert f"<location>{SKILL}</location>" in prompt
    assert "List, start, inspect and answer pi-workflows runs" in prompt
    assert "workflow" in request.tool_names
