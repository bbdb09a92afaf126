"""The server reuses a workflow's description only while its sources are unchanged.

A repeated ``run.start`` of an unchanged workflow needs no resolver child; any change the
resolver would see (the file's bytes, a mounted helper's bytes, a project file that now
shadows a user workflow) describes it again, so a run never starts from a stale definition.
"""

from __future__ import annotations

from typing import Any

from support.server import ServerProcess

TWICE = """
from steps import double

from pi_workflows import Workflow, compute

workflow = Workflow("twice", "a", {"a": compute(lambda ctx: {"n": double(ctx.input["n"])})})
"""

USER_ONLY = """
from pi_workflows import Workflow, compute

workflow = Workflow("shared", "user", {"user": compute(lambda ctx: {"from": "user"})})
"""

PROJECT_SHADOW = """
from pi_workflows import Workflow, compute

workflow = Workflow("shared", "project", {"project": compute(lambda ctx: {"from": "project"})})
"""


def _cache(server: ServerProcess) -> dict[str, int]:
    with server.client() as client:
        status: dict[str, Any] = client.status()
    return dict(status["descriptionCache"])


def _completed_output(server: ServerProcess, run_id: str) -> Any:
    view = server.wait_status(run_id, {"completed", "failed"})
    assert view["status"] == "completed", view
    return view["output"]


def test_an_unchanged_workflow_is_described_once_and_a_changed_one_again(
    server: ServerProcess,
) -> None:
    """The second start of an unchanged workflow hits the cache; editing the workflow file or
    its mounted helper makes the next start describe it again, and the run uses the new code."""
    server.write_module("steps", "def double(x):\n    return x * 2\n")
    path = server.write_workflow("twice", TWICE)
    first = server.start_run("twice", {"n": 3})
    second = server.start_run("twice", {"n": 4})
    assert _cache(server) == {"hits": 1, "misses": 1}
    assert _completed_output(server, first) == {"n": 6}
    assert _completed_output(server, second) == {"n": 8}

    server.write_module("steps", "def double(x):\n    return x * 20\n")
    helper_changed = server.start_run("twice", {"n": 4})
    assert _cache(server) == {"hits": 1, "misses": 2}
    assert _completed_output(server, helper_changed) == {"n": 80}

    path.write_text(TWICE.replace('"n": double', '"doubled": double'))
    file_changed = server.start_run("twice", {"n": 1})
    assert _cache(server) == {"hits": 1, "misses": 3}
    assert _completed_output(server, file_changed) == {"doubled": 20}
    assert server.diagnose() == []


def test_a_project_file_that_now_shadows_a_user_workflow_is_described_again(
    server: ServerProcess,
) -> None:
    """A cached user workflow is not reused once a project workflow of the same name exists:
    the project one wins, as a fresh resolve would choose."""
    user_dir = server.user_home / ".pi" / "agent" / "workflows"
    user_dir.mkdir(parents=True)
    (user_dir / "shared.workflow.py").write_text(USER_ONLY)
    assert _completed_output(server, server.start_run("shared")) == {"from": "user"}
    assert _completed_output(server, server.start_run("shared")) == {"from": "user"}
    assert _cache(server) == {"hits": 1, "misses": 1}

    server.write_workflow("shared", PROJECT_SHADOW)
    assert _completed_output(server, server.start_run("shared")) == {"from": "project"}
    assert _cache(server) == {"hits": 1, "misses": 2}
