"""The extension finds the state directory and the CLI by the same rules as the Python client."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pi.support.pi_rpc import PI_DIR, node_bin, require_pi
from pi_workflows.cli.pi_registration import agent_dir
from pi_workflows.client import state_home
from pi_workflows.pi_package import bundled_cli

PATHS_TS = PI_DIR / "extension" / "paths.ts"

# Each case is the environment on top of HOME; "" means set but empty (treated as unset).
CASES: list[dict[str, str]] = [
    {},
    {"XDG_STATE_HOME": "/var/xdg"},
    {"XDG_STATE_HOME": "~/xdg"},
    {"XDG_STATE_HOME": ""},
    {"PI_WORKFLOWS_HOME": "/srv/pw"},
    {"PI_WORKFLOWS_HOME": "~/pw"},
    {"PI_WORKFLOWS_HOME": "~"},
    {"PI_WORKFLOWS_HOME": "relative/pw"},
    {"PI_WORKFLOWS_HOME": "", "XDG_STATE_HOME": "/var/xdg"},
    {"PI_WORKFLOWS_HOME": "/srv/pw", "XDG_STATE_HOME": "/var/xdg"},
]

SCRIPT = """
import { agentDir, bundledCli, resolveCli, socketPath, stateHome } from %s;
const input = JSON.parse(await new Promise((done) => {
  let text = "";
  process.stdin.on("data", (chunk) => (text += chunk));
  process.stdin.on("end", () => done(text));
}));
console.log(JSON.stringify({
  homes: input.cases.map((env) => stateHome({ HOME: input.home, ...env })),
  socket: socketPath("/srv/pw"),
  cli: input.cli.map(([installed, env]) => resolveCli(installed ?? undefined, env)),
  bundled: (input.bundled ?? []).map((dir) => bundledCli(dir) ?? null),
  agents: (input.agents ?? []).map((env) => agentDir({ HOME: input.home, ...env })),
}));
"""


def run_paths_ts(
    home: Path,
    cwd: Path,
    cli_cases: list[list[object]],
    bundled: list[str] | None = None,
    agents: list[dict[str, str]] | None = None,
) -> dict[str, object]:
    """Evaluate `paths.ts` under the pinned Node (it strips the types) for every case."""
    require_pi()
    result = subprocess.run(
        [str(node_bin() / "node"), "--input-type=module", "-e", SCRIPT % json.dumps(str(PATHS_TS))],
        input=json.dumps(
            {
                "home": str(home),
                "cases": CASES,
                "cli": cli_cases,
                "bundled": bundled or [],
                "agents": agents or [],
            }
        ),
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(home)},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_the_state_directory_rule_matches_the_python_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For every combination of PI_WORKFLOWS_HOME, XDG_STATE_HOME and HOME, the extension and
    `pi_workflows.client.state_home` name the same state directory and socket."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)

    found = run_paths_ts(home, tmp_path, [])

    expected = [str(state_home({"HOME": str(home), **env})) for env in CASES]
    assert found["homes"] == expected
    assert found["socket"] == "/srv/pw/server.sock"


def test_the_cli_comes_from_the_environment_then_the_install_then_path(tmp_path: Path) -> None:
    """PI_WORKFLOWS_CLI wins over the path `pi install` recorded, which wins over `pi-workflows`
    on PATH; a relative PI_WORKFLOWS_CLI is made absolute and a bare name stays a PATH lookup."""
    home = tmp_path / "home"
    cases: list[list[object]] = [
        [None, {}],
        ["/venv/bin/pi-workflows", {}],
        ["/venv/bin/pi-workflows", {"PI_WORKFLOWS_CLI": "/other/pi-workflows"}],
        [None, {"PI_WORKFLOWS_CLI": "bin/pi-workflows"}],
        [None, {"PI_WORKFLOWS_CLI": "my-pi-workflows"}],
        ["/venv/bin/pi-workflows", {"PI_WORKFLOWS_CLI": ""}],
    ]

    found = run_paths_ts(home, tmp_path, cases)

    assert found["cli"] == [
        "pi-workflows",
        "/venv/bin/pi-workflows",
        "/other/pi-workflows",
        str(tmp_path / "bin" / "pi-workflows"),
        "my-pi-workflows",
        "/venv/bin/pi-workflows",
    ]


def executable(path: Path, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(mode)
    return path


def test_the_cli_installed_with_the_package_is_found_by_the_same_rule(tmp_path: Path) -> None:
    """The extension (`bundledCli` of its directory) and the CLI (`pi_package.bundled_cli`
    of the package) find the same `pi-workflows` beside a Pi package: `<prefix>/bin` for a
    wheel's copy in `<prefix>/lib/pythonX.Y/site-packages` (or `dist-packages`),
    `<checkout>/.venv/bin` for a checkout, and none when it is missing, not executable or the
    layout is another."""
    wheel = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    system = tmp_path / "usr" / "local" / "lib" / "python3.11" / "dist-packages"
    plain = tmp_path / "nx" / "lib" / "python3.12" / "site-packages"
    packages = {
        "wheel": wheel / "pi_workflows" / "integrations" / "pi",
        "dist": system / "pi_workflows" / "integrations" / "pi",
        "checkout": tmp_path / "repo" / "integrations" / "pi",
        "bare-checkout": tmp_path / "bare" / "integrations" / "pi",
        "not-executable": plain / "pi_workflows" / "integrations" / "pi",
        "other": tmp_path / "elsewhere" / "pi",
    }
    expected = {
        "wheel": executable(tmp_path / "venv" / "bin" / "pi-workflows"),
        "dist": executable(tmp_path / "usr" / "local" / "bin" / "pi-workflows"),
        "checkout": executable(tmp_path / "repo" / ".venv" / "bin" / "pi-workflows"),
        "bare-checkout": None,
        "not-executable": None,
        "other": None,
    }
    executable(tmp_path / "nx" / "bin" / "pi-workflows", mode=0o644)
    executable(tmp_path / "elsewhere" / ".venv" / "bin" / "pi-workflows")
    for package in packages.values():
        (package / "extension").mkdir(parents=True)

    found = run_paths_ts(
        tmp_path, tmp_path, [], [str(package / "extension") for package in packages.values()]
    )

    wanted = [None if path is None else str(path) for path in expected.values()]
    assert found["bundled"] == wanted
    assert [bundled_cli(package) for package in packages.values()] == list(expected.values())


def test_pis_agent_directory_is_found_by_the_same_rule(tmp_path: Path) -> None:
    """The extension (naming it in "no model is configured") and the CLI (`pi install`,
    `pi doctor`) agree on Pi's agent directory: PI_CODING_AGENT_DIR, else ~/.pi/agent."""
    home = tmp_path / "home"
    cases = [
        {},
        {"PI_CODING_AGENT_DIR": "/srv/agent"},
        {"PI_CODING_AGENT_DIR": "~/a"},
        {"PI_CODING_AGENT_DIR": ""},
    ]

    found = run_paths_ts(home, tmp_path, [], agents=cases)

    assert found["agents"] == [str(agent_dir({"HOME": str(home), **env})) for env in cases]
    assert found["agents"][0] == str(home / ".pi" / "agent")
