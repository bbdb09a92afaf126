"""`pi-workflows pi doctor` with the real Pi: each check passes on a complete set-up and each
fails, with its one-line fix, on the set-up a new user has.

Every run gets a private HOME and a PATH made only of the directories the case needs (the
checkout's pinned Pi and Node, or a directory with a stand-in `node` that reports an old
version), so a Pi or Node installed on the machine never changes the outcome.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pi.support.mock_provider import MockProvider
from pi.support.pi_rpc import PI_DIR, node_bin, pi_binary, require_pi, workflows_cli

pytestmark = pytest.mark.timeout(120)

NAMES = ["pi", "node", "extension", "model", "endpoint", "tools"]


def doctor(home: Path, path: list[Path], *args: str, **env: str) -> tuple[int, str]:
    """Run the real `pi-workflows pi doctor` with a private HOME and exactly this PATH."""
    require_pi()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PI_", "XDG_"))}
    base.update({"HOME": str(home), "PATH": os.pathsep.join(map(str, path)), **env})
    done = subprocess.run(
        [str(workflows_cli()), "pi", "doctor", *args],
        env=base,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.stderr == "", done.stderr
    return done.returncode, done.stdout


def doctor_json(home: Path, path: list[Path], **env: str) -> tuple[int, dict[str, Any]]:
    code, out = doctor(home, path, "--json", **env)
    return code, dict(json.loads(out))


def by_name(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    assert [check["name"] for check in document["checks"]] == NAMES
    return {check["name"]: check for check in document["checks"]}


def pinned_path() -> list[Path]:
    """This checkout's pinned Pi (`node_modules/.bin`) and Node 22."""
    return [pi_binary().parent, node_bin()]


def configure_model(home: Path, provider: MockProvider) -> None:
    """The user's Pi points at the scripted model, selected in settings.json."""
    agent = home / ".pi" / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    (agent / "models.json").write_text(json.dumps(provider.models_json()))
    (agent / "settings.json").write_text(
        json.dumps({"defaultProvider": "mock", "defaultModel": "mock-model"})
    )


def tools(home: Path) -> Path:
    """Stand-ins for `rg` and `fd` where Pi looks first (`<agent>/bin`); the doctor only
    looks for them."""
    bin_dir = home / ".pi" / "agent" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("rg", "fd"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def install(home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PI_")}
    subprocess.run(
        [str(workflows_cli()), "pi", "install"],
        env={**env, "HOME": str(home)},
        capture_output=True,
        timeout=60,
        check=True,
    )


def test_a_complete_set_up_passes_every_check(tmp_path: Path) -> None:
    """Pi and Node 22 on PATH, the package registered and a model selected: exit 0, and each
    check says what it found."""
    home = tmp_path / "home"
    bin_dir = tools(home)
    with MockProvider() as provider:
        configure_model(home, provider)
        install(home)

        code, document = doctor_json(home, pinned_path())
        human_code, human = doctor(home, pinned_path())
        url = provider.base_url

    checks = by_name(document)
    assert (code, document["ok"], human_code) == (0, True, 0), document
    assert document["agentDir"] == str(home / ".pi" / "agent")
    assert all(check["fix"] is None for check in document["checks"])
    assert checks["pi"]["detail"] == f"{pi_binary()} (from PATH), Pi 1.6.0"
    assert checks["node"]["detail"].startswith("Node 22.23.5 (")
    assert checks["node"]["detail"].endswith("Pi needs 22.19.0 or later")
    assert checks["extension"]["detail"] == (
        f"{PI_DIR} is registered (extension and skill); it runs {workflows_cli()}"
    )
    assert checks["model"]["detail"] == "mock/mock-model (the default in settings.json)"
    assert checks["endpoint"]["detail"] == (f"{url} (mock/mock-model) accepts a connection")
    assert checks["tools"]["detail"] == f"rg ({bin_dir / 'rg'}), fd ({bin_dir / 'fd'})"
    assert not any(check["warning"] for check in document["checks"])
    assert human.splitlines()[-1] == "all checks passed"
    assert [line.split()[:2] for line in human.splitlines()[1:7]] == [
        ["ok", name] for name in NAMES
    ]


def test_a_new_user_gets_a_one_line_fix_for_every_failing_check(tmp_path: Path) -> None:
    """No Pi, no Node, nothing registered: every check fails (the model is not checked), each
    with one fix line; the fixes name this checkout's pinned Pi and Node and `pi install`;
    exit 1."""
    home = tmp_path / "home"
    home.mkdir()
    empty = tmp_path / "empty-bin"
    empty.mkdir()

    code, document = doctor_json(home, [empty])
    human_code, human = doctor(home, [empty])

    checks = by_name(document)
    assert (code, human_code, document["ok"]) == (1, 1, False)
    assert [check["ok"] for check in document["checks"]] == [False] * 5 + [True]
    assert checks["tools"]["warning"] is True
    path_line = f'export PATH="{pi_binary().parent}:{node_bin()}:$PATH"'
    assert checks["pi"]["detail"] == "no `pi` on PATH (and PI_WORKFLOWS_PI is not set)"
    assert checks["pi"]["fix"] == f"use this checkout's pinned Pi and Node 22: {path_line}"
    assert checks["node"]["fix"] == f"use this checkout's pinned Node 22: {path_line}"
    assert checks["extension"]["fix"] == "run `pi-workflows pi install`"
    assert checks["model"]["detail"] == "not checked: Pi does not run here"
    assert checks["endpoint"]["detail"] == "not checked: Pi does not run here"
    lines = human.splitlines()
    assert lines[-1] == "some checks failed"
    fails = [index for index, line in enumerate(lines) if line.split()[:1] in (["FAIL"], ["warn"])]
    assert len(fails) == 6
    for index in fails:
        assert lines[index + 1].strip().startswith("fix: ")
        assert lines[index + 2].split()[:1] in (["FAIL"], ["warn"], ["some"])


def test_an_old_node_fails_the_node_check_and_pi_is_not_started(tmp_path: Path) -> None:
    """A `node` older than Pi's `engines.node` (22.19.0) first on PATH fails the node check
    with the version found; Pi is found but not started, so the model is not checked."""
    home = tmp_path / "home"
    old = tmp_path / "old-node"
    old.mkdir()
    (old / "node").write_text("#!/bin/sh\necho v20.11.1\n")
    (old / "node").chmod(0o755)

    code, document = doctor_json(home, [old, *pinned_path()])

    checks = by_name(document)
    assert code == 1
    assert checks["node"]["ok"] is False
    assert checks["node"]["detail"] == (f"Node 20.11.1 ({old / 'node'}); Pi needs 22.19.0 or later")
    assert checks["pi"]["ok"] is True
    assert checks["pi"]["detail"].endswith("not started: its Node is too old)")
    assert checks["model"]["detail"] == "not checked: Pi does not run here"


def test_no_model_is_configured_is_said_plainly(tmp_path: Path) -> None:
    """Pi runs but has no model (it would say "Unknown provider: unknown"): the model check
    says "no model is configured" and its fix names models.json and settings.json."""
    home = tmp_path / "home"
    home.mkdir()
    install(home)

    code, document = doctor_json(home, pinned_path())

    checks = by_name(document)
    agent = home / ".pi" / "agent"
    assert code == 1
    assert [check["ok"] for check in document["checks"]] == [True, True, True, False, False, True]
    assert checks["model"]["detail"].startswith("no model is configured: ")
    assert checks["model"]["fix"] == (
        f"add a provider to {agent}/models.json and select it with defaultProvider and"
        f" defaultModel in {agent}/settings.json (docs/pi.md), or run `pi` and /login"
    )
    assert not (agent / "sessions").exists()  # the probe kept no session


def test_pi_workflows_pi_names_the_pi_and_a_missing_one_fails(tmp_path: Path) -> None:
    """`PI_WORKFLOWS_PI` (the Pi the server's headless agents run) is the Pi checked; when
    it names nothing executable the pi check says so."""
    home = tmp_path / "home"
    with MockProvider() as provider:
        configure_model(home, provider)
        install(home)
        path = [node_bin()]

        code, document = doctor_json(home, path, PI_WORKFLOWS_PI=str(pi_binary()))
        missing_code, missing = doctor_json(home, path, PI_WORKFLOWS_PI="/nowhere/pi")

    assert code == 0, document
    assert by_name(document)["pi"]["detail"] == f"{pi_binary()} (from PI_WORKFLOWS_PI), Pi 1.6.0"
    assert missing_code == 1
    assert by_name(missing)["pi"]["detail"] == (
        "PI_WORKFLOWS_PI names /nowhere/pi, which is not an executable"
    )


def test_another_installations_package_or_the_old_loader_fail_the_extension_check(
    tmp_path: Path,
) -> None:
    """A pi-workflows package of another installation, or only the loader an earlier version
    wrote, fails the extension check with `pi install` as the fix."""
    home = tmp_path / "home"
    agent = home / ".pi" / "agent"
    other = tmp_path / "other" / "integrations" / "pi"
    (other / "extension").mkdir(parents=True)
    (other / "package.json").write_text((PI_DIR / "package.json").read_text())
    agent.mkdir(parents=True)
    (agent / "settings.json").write_text(json.dumps({"packages": [str(other)]}))

    _, first = doctor_json(home, [tmp_path])

    (agent / "settings.json").write_text("{}")
    loader = agent / "extensions" / "pi-workflows" / "index.ts"
    loader.parent.mkdir(parents=True)
    loader.write_text("// pi-workflows-loader v1\nexport default 1;\n")
    _, second = doctor_json(home, [tmp_path])

    assert by_name(first)["extension"] == {
        "name": "extension",
        "ok": False,
        "warning": False,
        "detail": f"Pi loads the pi-workflows package of another installation: {other}",
        "fix": f"run `pi-workflows pi install` to register this one ({PI_DIR})",
    }
    assert by_name(second)["extension"]["detail"] == (
        f"an older pi-workflows loader is installed ({loader}), not the Pi package"
    )
    assert by_name(second)["extension"]["fix"] == "run `pi-workflows pi install` to replace it"


def test_a_model_whose_endpoint_is_closed_fails_the_endpoint_check(tmp_path: Path) -> None:
    """A selected model whose baseUrl is a loopback port nothing listens on: the endpoint
    check fails naming the URL, with a fix naming models.json; exit 1."""
    home = tmp_path / "home"
    tools(home)
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with MockProvider() as provider:
        configure_model(home, provider)
    models = home / ".pi" / "agent" / "models.json"
    document = json.loads(models.read_text())
    document["providers"]["mock"]["baseUrl"] = url
    models.write_text(json.dumps(document))
    install(home)

    code, found = doctor_json(home, pinned_path())
    human_code, human = doctor(home, pinned_path())

    endpoint = by_name(found)["endpoint"]
    assert (code, human_code) == (1, 1)
    assert by_name(found)["model"]["ok"] is True
    assert endpoint["ok"] is False
    assert endpoint["detail"].startswith(f"{url} (mock/mock-model) does not accept a connection: ")
    assert "models.json" in endpoint["fix"]
    assert human.splitlines()[-1] == "some checks failed"


def test_missing_rg_and_fd_is_a_warning_with_the_fix(tmp_path: Path) -> None:
    """No `rg` or `fd` on PATH or in `<agent>/bin`: the tools check warns, naming Pi's grep
    and find tools and how to install them; every other check passes, so the exit is 0."""
    home = tmp_path / "home"
    with MockProvider() as provider:
        configure_model(home, provider)
        install(home)

        code, found = doctor_json(home, pinned_path())
        human_code, human = doctor(home, pinned_path())

    check = by_name(found)["tools"]
    assert (code, human_code, found["ok"]) == (0, 0, True)
    assert (check["ok"], check["warning"]) == (True, True)
    assert check["detail"].startswith("no rg and fd on PATH or in ")
    assert "`grep` and `find` tools fail offline" in check["detail"]
    assert "apt-get install ripgrep fd-find" in check["fix"]
    assert any(line.split()[:2] == ["warn", "tools"] for line in human.splitlines())
    assert human.splitlines()[-1] == "all checks passed, 1 with a warning"
