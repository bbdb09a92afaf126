"""The extension finds the state directory and the CLI by the same rules as the Python client."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pi.support.pi_rpc import PI_DIR, node_bin, require_pi
from pi_workflows.client import state_home

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
import { resolveCli, socketPath, stateHome } from %s;
const input = JSON.parse(await new Promise((done) => {
  let text = "";
  process.stdin.on("data", (chunk) => (text += chunk));
  process.stdin.on("end", () => done(text));
}));
console.log(JSON.stringify({
  homes: input.cases.map((env) => stateHome({ HOME: input.home, ...env })),
  socket: socketPath("/srv/pw"),
  cli: input.cli.map(([installed, env]) => resolveCli(installed ?? undefined, env)),
}));
"""


def run_paths_ts(home: Path, cwd: Path, cli_cases: list[list[object]]) -> dict[str, object]:
    """Evaluate `paths.ts` under the pinned Node (it strips the types) for every case."""
    require_pi()
    result = subprocess.run(
        [str(node_bin() / "node"), "--input-type=module", "-e", SCRIPT % json.dumps(str(PATHS_TS))],
        input=json.dumps({"home": str(home), "cases": CASES, "cli": cli_cases}),
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
