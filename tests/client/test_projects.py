"""A workflow argument and the project resolve from the caller's directory, one rule for the
CLI and both clients."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from pi_workflows.client import find_project, resolve_project, workflow_spec
from pi_workflows.client.payloads import start_payload
from pi_workflows.protocol.environment import snapshot

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project directory (it has `.pi/workflows`) with a nested source directory."""
    (tmp_path / "app" / ".pi" / "workflows").mkdir(parents=True)
    (tmp_path / "app" / "src" / "deep").mkdir(parents=True)
    return tmp_path / "app"


def test_the_project_is_the_nearest_directory_upwards_with_pi_workflows(
    project: Path, tmp_path: Path
) -> None:
    """From inside a project its root is found; from outside any project, none is."""
    assert find_project(project / "src" / "deep") == project
    assert find_project(project) == project
    assert find_project(tmp_path) is None
    assert resolve_project(None, cwd=project / "src") == project
    assert resolve_project("../other", cwd=project / "src") == project / "other"


def test_a_workflow_path_is_made_absolute_and_a_name_is_kept(project: Path) -> None:
    """Paths (a `/` or a `.py` ending) resolve against the directory; names do not."""
    here = project / "src"
    assert workflow_spec("./local.workflow.py", cwd=here) == str(here / "local.workflow.py")
    assert workflow_spec("local.workflow.py", cwd=here) == str(here / "local.workflow.py")
    assert workflow_spec("../x/y.workflow.py", cwd=here) == str(project / "x" / "y.workflow.py")
    assert workflow_spec("triage", cwd=here) == "triage"
    assert workflow_spec("builtin:demo", cwd=here) == "builtin:demo"


def test_the_start_payload_carries_what_the_cli_would_send(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run.start` from a project subdirectory names the file and the project absolutely,
    and records this process's default variables and its current directory."""
    monkeypatch.chdir(project / "src" / "deep")
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("PWF_NOT_LISTED", "x")
    payload = start_payload("./local.workflow.py", None, None, None, False, {"PWF_ADD": "y"})
    assert payload == {
        "workflow": str(project / "src" / "deep" / "local.workflow.py"),
        "input": {},
        "projectDir": str(project),
        "environment": {**snapshot(os.environ), "PWF_ADD": "y"},
        "workingDirectory": str(project / "src" / "deep"),
    }
    assert payload["environment"]["LC_TIME"] == "C"
    assert "PWF_NOT_LISTED" not in payload["environment"]


@pytest.mark.parametrize(
    ("deadline", "millis"), [(7200, 7_200_000), (1.5, 1_500), (timedelta(hours=2), 7_200_000)]
)
def test_a_start_deadline_is_sent_as_whole_milliseconds(
    project: Path, deadline: float | timedelta, millis: int
) -> None:
    """Seconds or a `timedelta` become `deadlineMs`; the server checks its bounds."""
    payload = start_payload("builtin:demo", None, project, None, False, None, deadline)
    assert payload["deadlineMs"] == millis


@pytest.mark.parametrize("deadline", [float("inf"), float("nan"), "2h", True])
def test_a_start_deadline_that_is_no_duration_is_refused_before_sending(
    project: Path, deadline: object
) -> None:
    """Not a finite number of seconds nor a `timedelta`: `ValueError` naming it."""
    with pytest.raises(ValueError, match="deadline must be"):
        start_payload("builtin:demo", None, project, None, False, None, deadline)  # type: ignore[arg-type]
