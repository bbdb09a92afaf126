"""The server reuses a workflow's description only while its sources are unchanged.

A repeated ``run.start`` of an unchanged workflow needs no resolver child; any change the
resolver would see (the file's bytes, a mounted helper's bytes, a project file that now
shadows a user workflow) describes it again, so a run never starts from a stale definition.
"""

from __future__ import annotations

from pathlib import Path
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


def test_run_restart_always_describes_the_workflow_afresh(server: ServerProcess) -> None:
    """``run restart`` re-resolves the workflow as it is now, never from the cache, and its
    description replaces the cached one for the next start."""
    server.write_module("steps", "def double(x):\n    return x * 2\n")
    server.write_workflow("twice", TWICE)
    failing = server.start_run("twice", {})  # no "n": the node fails, so it can restart
    assert server.wait_status(failing, {"completed", "failed"})["status"] == "failed"
    assert _cache(server) == {"hits": 0, "misses": 1}
    with server.client() as client:
        client.restart(failing)
    assert server.wait_status(failing, {"completed", "failed"})["status"] == "failed"
    assert _cache(server) == {"hits": 0, "misses": 1}  # the restart did not look
    assert _completed_output(server, server.start_run("twice", {"n": 5})) == {"n": 10}
    assert _cache(server) == {"hits": 1, "misses": 1}


def test_a_project_symlink_pointed_elsewhere_is_another_project(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The cache keys a project by its real path: the same link naming another directory
    describes that project's workflow, never the first one's."""
    other = tmp_path / "other"
    (other / ".pi" / "workflows").mkdir(parents=True)
    (other / ".pi" / "workflows" / "shared.workflow.py").write_text(USER_ONLY)
    server.write_workflow("shared", PROJECT_SHADOW)
    link = tmp_path / "link"
    link.symlink_to(server.project)
    with server.client() as client:
        run_a = str(client.start_run("shared", {}, project_dir=link)["runId"])
        assert _completed_output(server, run_a) == {"from": "project"}
        link.unlink()
        link.symlink_to(other)
        run_b = str(client.start_run("shared", {}, project_dir=link)["runId"])
    assert _completed_output(server, run_b) == {"from": "user"}
    assert _cache(server) == {"hits": 0, "misses": 2}
