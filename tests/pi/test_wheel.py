"""pi-workflows installed like other tools: a wheel built from the repository, installed into a
fresh virtual environment outside the checkout, registered with the real Pi, runs a workflow
from Pi with the scripted model.

`python -m build` makes the sdist and, from it, the wheel (as `pipx install` or `uv tool
install` of the sdist would). The wheel goes into a new `python -m venv` with `pip install
--no-index --find-links` of wheels made from the dependencies already installed here
(`pi.support.wheels`), so nothing comes from the network or from the checkout's `src/`.
That installation's `pi-workflows pi install` registers the Pi package shipped in the wheel;
the real `pi` lists it and loads it without `-e`, and its extension starts the wheel's own
server (found beside the package, no `PI_WORKFLOWS_CLI`) to run a workflow whose agent step
the scripted model submits.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from pi.support.mock_provider import (
    ChatRequest,
    MockProvider,
    last_is_tool_result,
    request_id_in,
    text,
    tool_call,
    user_text_contains,
)
from pi.support.pi_rpc import PiProcess, node_bin, pi_binary, require_pi
from pi.support.records import result_text, tool_results
from pi.support.wheels import runtime_wheelhouse

from support.server import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
STEP_MARK = "--- Workflow step ---"
TERMINAL_MARK = "--- Workflow run finished ---"
RUN_ID = re.compile(r"\brun_[0-9a-z]+")
STEP = """
from pi_workflows import Workflow, agent, compute, edge

workflow = Workflow(
    "step",
    start="classify",
    nodes={
        "classify": agent(prompt="Classify the report", expected_output='{"route": "fix"}'),
        "done": compute(lambda ctx: {"route": ctx.outputs["classify"]["route"]}),
    },
    edges=[edge("classify", "done")],
)
"""


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without pi-workflows, Pi, pip or Python path settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PI_", "PIP_", "XDG_", "VIRTUAL_ENV", "PYTHON"))
    }
    env["PIP_CONFIG_FILE"] = os.devnull  # no index, find-links or constraints of the machine
    env.update(extra)
    return env


def run(argv: list[str | Path], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    """Run a command that must succeed; its stdout."""
    done = subprocess.run(
        [str(arg) for arg in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture
def root() -> Iterator[Path]:
    """A short private directory outside the checkout (the socket path must stay short)."""
    require_pi()
    path = Path(tempfile.mkdtemp(prefix="pwwh-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def venv(root: Path) -> Path:
    """A fresh virtual environment with the wheel built from this repository installed."""
    dist = root / "dist"
    run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, REPO], root, clean_env()
    )
    [wheel] = dist.glob("pi_workflows-*.whl")
    assert len(list(dist.glob("pi_workflows-*.tar.gz"))) == 1
    wheelhouse = root / "wheelhouse"
    runtime_wheelhouse(wheelhouse)
    target = root / "venv"
    run([sys.executable, "-m", "venv", target], root, clean_env())
    python = target / "bin" / "python"
    run(
        [python, "-m", "pip", "install", "--no-index", "--find-links", wheelhouse, wheel],
        root,
        clean_env(),
    )
    return target


def submit_route(route: str) -> Any:
    def arguments(request: ChatRequest) -> dict[str, Any]:
        return {
            "action": "submit",
            "requestId": request_id_in(request.last_user_text()),
            "output": {"route": route},
        }

    return tool_call("workflow", arguments)


def test_a_wheel_installed_outside_the_checkout_runs_a_workflow_from_pi(
    root: Path, venv: Path
) -> None:
    """The wheel's code, CLI, Pi package (extension and skill) and server are all the fresh
    environment's: `pi install` registers the shipped package, `pi list` shows it, `pi
    doctor` passes, and a workflow started by the model in the real Pi completes on the
    server the extension started from the wheel's `pi-workflows`."""
    python, cli = venv / "bin" / "python", venv / "bin" / "pi-workflows"
    site = Path(
        run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            root,
            clean_env(),
        ).strip()
    )
    imported = run(
        [python, "-c", "import pi_workflows; print(pi_workflows.__file__)"], root, clean_env()
    )
    assert Path(imported.strip()) == site / "pi_workflows" / "__init__.py"
    package = site / "pi_workflows" / "integrations" / "pi"
    located = run(
        [python, "-c", "from pi_workflows import pi_package; print(pi_package.extension_entry())"],
        root,
        clean_env(),
    )
    assert Path(located.strip()) == package / "extension" / "index.ts"  # headless agents' too
    assert sorted(p.name for p in package.iterdir()) == ["extension", "package.json", "skills"]
    assert (package / "skills" / "pi-workflows" / "SKILL.md").is_file()
    assert not (package / "node_modules").exists()

    state, project = root / "state", root / "project"
    (project / ".pi" / "workflows").mkdir(parents=True)
    (project / ".pi" / "workflows" / "step.workflow.py").write_text(STEP)
    path = os.pathsep.join([str(pi_binary().parent), str(node_bin()), os.environ.get("PATH", "")])
    with MockProvider() as provider:
        provider.on(
            user_text_contains("please start step"),
            tool_call("workflow", {"action": "start", "workflow": "step"}),
        )
        provider.on(user_text_contains(STEP_MARK), submit_route("fix"), name="step")
        provider.on(user_text_contains(TERMINAL_MARK), text("The run finished."))
        provider.on(last_is_tool_result, text("Done."))
        pi = PiProcess(
            root,
            provider,
            cwd=project,
            # The server the extension starts inherits Pi's environment: its headless agents
            # (detached runs) run this Pi.
            env={
                "PI_WORKFLOWS_HOME": str(state),
                "PI_WORKFLOWS_CLI": "",
                "PI_WORKFLOWS_PI": str(pi_binary()),
            },
            extensions=[],
            discover_extensions=True,
        )
        pi.prepare()  # the user's models.json and settings.json (the scripted model)
        user = clean_env(
            HOME=str(pi.home),
            PI_CODING_AGENT_DIR=str(pi.agent_dir),
            PI_WORKFLOWS_HOME=str(state),
            PATH=path,
        )
        installed = json.loads(run([cli, "pi", "install", "--json"], root, user))
        listed = run([pi_binary(), "list"], root, {**user, "PI_OFFLINE": "1"})
        checked = json.loads(run([cli, "pi", "doctor", "--json"], root, user))
        try:
            with pi:
                records = pi.run_prompt("please start step")
                [started] = tool_results(records)
                run_id = RUN_ID.search(result_text(started))
                assert run_id, result_text(started)

                def finished() -> dict[str, Any] | None:
                    shown = json.loads(
                        run([cli, "run", "show", run_id.group(0), "--json"], root, user)
                    )
                    return shown if shown["status"] in {"completed", "failed", "paused"} else None

                done = wait_for(finished, 90, "the run to finish")
                detached = json.loads(
                    run([cli, "run", "start", "step", "--detached", "--json"], project, user)
                )
                run_id = RUN_ID.search(detached["runId"])
                assert run_id
                headless = wait_for(finished, 90, "the detached run to finish")
                status = json.loads(run([cli, "server", "status", "--json"], root, user))
                server_argv = psutil.Process(int(status["pid"])).cmdline()
        finally:
            subprocess.run(
                [str(cli), "server", "stop"], env=user, capture_output=True, timeout=90, check=False
            )

    assert installed["package"] == str(package)
    assert installed["cli"] == str(cli)
    assert str(package) in listed
    assert checked["ok"] is True, checked
    assert (done["status"], done["output"]) == ("completed", {"route": "fix"})
    assert (headless["status"], headless["output"]) == ("completed", {"route": "fix"})
    assert headless["executionMode"] == "detached"
    assert status["stateDir"] == str(state)
    assert Path(server_argv[0]).parent == venv / "bin", server_argv
    assert server_argv[1:3] == ["-m", "pi_workflows.server"], server_argv
