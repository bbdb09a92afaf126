"""A run's environment is the starting client's, recorded with the run, never the server's.

Through real processes: a server started without the client's variables (and with one of
its own), CLI commands started with them, runners, shell commands and a server restart.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.client import RejectedError

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(120)

LOOK = """
import os
from pi_workflows import Workflow, compute, edge, idempotent_effect, shell

NAMES = ("PWF_X", "PWF_Y", "PWF_Z", "PWF_SERVER_ONLY", "PWF_ADDED", "PWF_GONE")


def look(ctx):
    seen = {name: os.environ.get(name) for name in NAMES}
    return {**seen, "cwd": os.getcwd(), "path": bool(os.environ.get("PATH"))}


def added(ctx):
    return {"PWF_ADDED": "from " + ctx.node_id, "PWF_GONE": None}


workflow = Workflow(
    "look",
    start="look",
    nodes={
        "look": compute(look),
        "sh": shell(
            ["sh", "-c", 'printf "%s|%s|%s|%s" "$PWF_X" "$PWF_Y" "$PWF_SERVER_ONLY" "$PWF_ADDED"'],
            effect=idempotent_effect("env-read"),
            env={"PWF_ADDED": "added"},
        ),
        "sh2": shell(
            ["sh", "-c", 'printf "%s|%s" "$PWF_ADDED" "${PWF_GONE-unset}"'],
            effect=idempotent_effect("env-read"),
            env=added,
        ),
        "done": compute(lambda ctx: {
            "look": ctx.outputs["look"],
            "sh": ctx.outputs["sh"]["stdout"],
            "sh2": ctx.outputs["sh2"]["stdout"],
        }),
    },
    edges=[edge("look", "sh"), edge("sh", "sh2"), edge("sh2", "done")],
)
"""

PAUSE = """
import os
from pi_workflows import Workflow, compute, edge, wait_event

def look(ctx):
    return {"x": os.environ.get("PWF_X"), "cwd": os.getcwd()}

workflow = Workflow(
    "pause",
    start="before",
    nodes={
        "before": compute(look),
        "go": wait_event("go"),
        "after": compute(look),
        "done": compute(lambda ctx: {"before": ctx.outputs["before"],
                                     "after": ctx.outputs["after"]}),
    },
    edges=[edge("before", "go"), edge("go", "after"), edge("after", "done")],
)
"""

BAD_ENV = """
from pi_workflows import Workflow, idempotent_effect, shell

workflow = Workflow(
    "badenv",
    start="sh",
    nodes={"sh": shell(["true"], effect=idempotent_effect("e"), env=lambda ctx: {"1x": "y"})},
    edges=[],
)
"""

PARENT = """
from pi_workflows import Workflow, compute, edge, subworkflow

workflow = Workflow(
    "parent",
    start="child",
    nodes={
        "child": subworkflow("look", input=lambda ctx: {}),
        "done": compute(lambda ctx: ctx.outputs["child"]),
    },
    edges=[edge("child", "done")],
)
"""


@pytest.fixture
def server(tmp_path: Path) -> ServerProcess:
    """A server started without the client's variables, with one of its own."""
    process = ServerProcess(tmp_path)
    for name in ("PWF_X", "PWF_Y", "PWF_Z"):
        process.env.pop(name, None)
    process.write_workflow("look", LOOK)
    process.write_workflow("pause", PAUSE)
    process.write_workflow("parent", PARENT)
    process.write_workflow("badenv", BAD_ENV)
    process.start(PWF_SERVER_ONLY="the server's")
    yield process
    process.cleanup()


def client_env(server: ServerProcess, **extra: str) -> dict[str, str]:
    """The environment of a client command: the test's, without the server's own variable."""
    env = {k: v for k, v in server.env.items() if k != "PWF_SERVER_ONLY"}
    return {**env, **extra}


def pw(server: ServerProcess, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`pi-workflows --home HOME ARGS` in a child process in the project, with `env` set."""
    return server.cli(*args, env=client_env(server, **env))


def started(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_nodes_see_the_starting_clients_variables_not_the_servers(server: ServerProcess) -> None:
    """A variable set only in the starting client (and named with --env) is seen by compute
    and shell nodes; one not on the list is not, nor is the server's own; shell(env=) adds
    (a mapping, or a callback whose None removes); the run works in its project directory."""
    result = pw(
        server, "run", "start", "look", "--env", "PWF_X", "--env", "PWF_Z=given", "--env",
        "PWF_GONE", "--wait", "--json", PWF_X="from the client", PWF_Y="not on the list",
        PWF_GONE="here",
    )  # fmt: skip
    run = started(result)["run"]
    assert run["status"] == "completed", run
    output = run["output"]
    assert output["look"] == {
        "PWF_X": "from the client",
        "PWF_Y": None,
        "PWF_Z": "given",
        "PWF_SERVER_ONLY": None,
        "PWF_ADDED": None,
        "PWF_GONE": "here",
        "cwd": str(server.project),
        "path": True,
    }
    assert output["sh"] == "from the client|||added"
    assert output["sh2"] == "from sh2|unset"


def test_a_variable_named_by_env_is_passed_and_others_are_not(
    server: ServerProcess, tmp_path: Path
) -> None:
    """--env GONE passes a variable set in the client's environment that the default list
    lacks; the default ones (PATH, HOME) always come from the client, whatever the server's."""
    elsewhere = tmp_path / "elsewhere-home"
    result = pw(
        server, "run", "start", "look", "--env", "PWF_GONE", "--wait", "--json",
        PWF_GONE="passed", HOME=str(elsewhere),
    )  # fmt: skip
    run = started(result)["run"]
    assert run["output"]["look"]["PWF_GONE"] == "passed"
    recorded = server.query(
        "SELECT environment_json FROM run_sources WHERE run_id = ?", run["runId"]
    )
    variables = json.loads(recorded[0][0])
    assert variables["HOME"] == str(elsewhere)
    assert "PWF_Y" not in variables
    assert not [name for name in variables if name.startswith("PI_WORKFLOWS_")]


def test_run_show_names_the_directory_and_variables_but_never_a_value(
    server: ServerProcess,
) -> None:
    """`run show` (human and --json) shows the recorded working directory and the names of
    the recorded variables; no value, a secret given with --env included, is ever shown
    (the workflow does not read it, so only the environment could show it)."""
    secret = "s3cr3t-token-value"
    run_id = started(
        pw(server, "run", "start", "look", "--env", f"PWF_SECRET={secret}", "--wait", "--json")
    )["runId"]
    as_json = pw(server, "run", "show", run_id, "--json")
    assert as_json.returncode == 0, as_json.stderr
    recorded = json.loads(as_json.stdout)["environment"]
    assert recorded["workingDirectory"] == str(server.project)
    assert "PWF_SECRET" in recorded["variables"]
    assert "PATH" in recorded["variables"]
    assert recorded["variables"] == sorted(recorded["variables"])
    human = pw(server, "run", "show", run_id, COLUMNS="400")  # a temp path is long
    assert human.returncode == 0, human.stderr
    rows = {line.split(None, 1)[0]: line for line in human.stdout.splitlines() if line.strip()}
    assert str(server.project) in rows["directory"]
    assert "PWF_SECRET" in rows["variables"]
    assert "PATH" in rows["variables"]
    for shown in (as_json.stdout, human.stdout, pw(server, "run", "show", run_id, "-v").stdout):
        assert secret not in shown


def test_a_run_resumed_by_a_new_server_has_the_same_environment(server: ServerProcess) -> None:
    """A run waiting for an event when the server is SIGKILLed is resumed by a new server
    started with other variables; its next node sees the environment recorded at start."""
    run_id = started(
        pw(server, "run", "start", "pause", "--env", "PWF_X", "--json", PWF_X="recorded")
    )["runId"]
    server.wait_status(run_id, "waiting")
    server.kill()
    server.start(PWF_X="the new server's", PWF_SERVER_ONLY="again")
    assert pw(server, "run", "signal", run_id, "go").returncode == 0
    view = server.wait_status(run_id, "completed")
    assert view["output"]["before"] == view["output"]["after"]
    assert view["output"]["after"] == {"x": "recorded", "cwd": str(server.project)}


def test_a_shell_env_callback_that_returns_a_bad_mapping_fails_its_node(
    server: ServerProcess,
) -> None:
    """What `env(ctx)` returns is checked like a literal `env=`: the node fails, saying what
    is wrong, and the command never runs."""
    result = pw(server, "run", "start", "badenv", "--wait", "--json")
    assert result.returncode == 1  # --wait exits 1 for a failed run
    run = json.loads(result.stdout)["run"]
    assert run["status"] == "failed"
    assert "the node 'sh' env callback returned a bad value: env has '1x'" in run["error"]
    assert server.query("SELECT COUNT(*) FROM effects") == [(0,)]


def test_a_child_run_gets_its_parents_environment(server: ServerProcess) -> None:
    """A subworkflow's child run records its parent's environment."""
    result = pw(
        server, "run", "start", "parent", "--env", "PWF_X", "--wait", "--json",
        PWF_X="parent's",
    )  # fmt: skip
    run = started(result)["run"]
    assert run["status"] == "completed", run
    assert run["output"]["look"]["PWF_X"] == "parent's"
    rows = server.query("SELECT COUNT(DISTINCT environment_json) FROM run_sources")
    assert rows == [(1,)]


def test_a_scheduled_run_gets_the_environment_recorded_by_schedule_add(
    server: ServerProcess,
) -> None:
    """Runs a schedule starts get the environment of the client that added it."""
    added = pw(
        server, "schedule", "add", "looks", "look", "--every", "1s", "--env", "PWF_X",
        "--json", PWF_X="scheduled",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr

    def first_run() -> str | None:
        rows = server.query("SELECT run_id FROM runs WHERE schedule_id IS NOT NULL LIMIT 1")
        return str(rows[0][0]) if rows else None

    run_id = wait_for(first_run, 30, "the schedule's first run")
    assert pw(server, "schedule", "delete", "looks").returncode == 0
    view = server.wait_status(run_id, "completed")
    assert view["output"]["look"]["PWF_X"] == "scheduled"
    assert view["output"]["look"]["cwd"] == str(server.project)


@pytest.mark.parametrize(
    ("option", "named"),
    [
        ("1BAD=x", "not an environment variable name"),
        ("PI_WORKFLOWS_HOME=/tmp/x", "PI_WORKFLOWS_"),
        ("PWF_UNSET", "PWF_UNSET is not set here"),
    ],
)
def test_a_bad_env_option_is_one_line_and_starts_nothing(
    server: ServerProcess, option: str, named: str
) -> None:
    """A bad --env is refused before anything is sent, in one line naming it."""
    line = one_error_line(pw(server, "run", "start", "look", "--env", option))
    assert named in line
    assert server.query("SELECT COUNT(*) FROM runs") == [(0,)]


def test_the_environment_bounds_are_one_line_errors(server: ServerProcess) -> None:
    """More than 128 variables, or more than 64 KiB of them, is refused with the bound."""
    many = [arg for n in range(130) for arg in ("--env", f"PWF_V{n}=v")]
    line = one_error_line(pw(server, "run", "start", "look", *many))
    assert "variables; the limit is 128" in line
    line = one_error_line(pw(server, "run", "start", "look", "--env", "PWF_BIG=" + "b" * 70_000))
    assert "the limit is 64 KiB (65536 bytes)" in line
    assert server.query("SELECT COUNT(*) FROM runs") == [(0,)]


def test_the_server_checks_the_environment_a_raw_client_sends(server: ServerProcess) -> None:
    """The server refuses a bad `environment` itself (a client that skips the check), with
    the same one line, and stores nothing."""
    bad = [
        ({"PWF A": "x"}, "not an environment variable name"),
        ({"PI_WORKFLOWS_FAULTS": "x"}, "PI_WORKFLOWS_"),
        ({"PWF_X": 1}, "must be a string"),
        ({f"PWF_{n}": "v" for n in range(129)}, "the limit is 128"),
    ]
    with server.client() as client:
        for environment, named in bad:
            payload = {"workflow": "look", "input": {}, "projectDir": str(server.project)}
            with pytest.raises(RejectedError) as refused:
                client.call("run.start", {**payload, "environment": environment})
            assert refused.value.code == "badRequest"
            assert named in refused.value.message
    assert server.query("SELECT COUNT(*) FROM runs") == [(0,)]


def test_a_raw_client_that_sends_no_environment_gets_the_servers_default_variables(
    server: ServerProcess,
) -> None:
    """Without `environment`, the run records the server's own default variables (never
    its other ones), documented for clients that speak the protocol themselves."""
    with server.client() as client:
        receipt = client.call(
            "run.start", {"workflow": "look", "input": {}, "projectDir": str(server.project)}
        )
    view = server.wait_status(str(receipt["runId"]), "completed")
    assert view["output"]["look"]["path"] is True
    assert view["output"]["look"]["PWF_SERVER_ONLY"] is None


def test_a_run_outside_a_project_works_in_the_clients_directory_and_parks_when_it_is_gone(
    server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a project, a run works in the directory its client was started in; when that
    directory is gone at a later launch, the run parks naming it (it never runs elsewhere),
    and a resume after it is back goes on there."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.chdir(scratch)
    path = server.project / ".pi" / "workflows" / "pause.workflow.py"
    with server.client() as client:
        run_id = str(client.start_run(str(path), {})["runId"])
    server.wait_status(run_id, "waiting")
    monkeypatch.chdir(tmp_path)
    scratch.rmdir()
    with server.client() as client:
        client.signal(run_id, "go")
    view = server.wait_status(run_id, "paused")
    assert view["parkReason"] == "workflowLoadFailed"
    assert f"the run's working directory {scratch} cannot be entered" in view["parkDetail"]
    scratch.mkdir()
    with server.client() as client:
        client.resume(run_id)
    view = server.wait_status(run_id, "completed")
    assert view["output"]["before"]["cwd"] == view["output"]["after"]["cwd"] == str(scratch)
