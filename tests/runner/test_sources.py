"""Loading in the runner: changed or broken sources park the run before any node runs."""

from __future__ import annotations

from pathlib import Path

from .peer import Project, ScriptedServer, envelope_for

_HELPER = """
from pathlib import Path

Path({marker!r}).write_text("executed")
VALUE = {value}
"""

_USES_HELPER = """
from helper import VALUE

from pi_workflows import Workflow, compute

workflow = Workflow("uses", "a", {"a": compute(lambda ctx: VALUE)})
"""


def _helper(project: Project, marker: Path, value: int) -> Path:
    return project.write("helper.py", _HELPER.format(marker=str(marker), value=value))


def test_changed_helper_parks_the_run_and_never_executes(project: Project) -> None:
    """A mounted helper whose bytes changed parks with workflowSourceChanged before it runs."""
    marker = project.root / "helper.ran"
    helper = _helper(project, marker, 1)
    project.write("uses.workflow.py", _USES_HELPER)
    envelope = envelope_for(project.load("uses"), project)
    marker.unlink()
    _helper(project, marker, 2)
    server = ScriptedServer(project, envelope)
    assert server.run() == 0
    assert server.kinds() == ["ready", "run.park"]
    assert server.parked == {
        "reason": "workflowSourceChanged",
        "detail": f"{helper.resolve()} changed",
    }
    assert not marker.exists()


def test_unchanged_sources_load_and_run(project: Project) -> None:
    """With every recorded hash matching, the helper loads and the run executes."""
    marker = project.root / "helper.ran"
    _helper(project, marker, 5)
    project.write("uses.workflow.py", _USES_HELPER)
    server = ScriptedServer(project, envelope_for(project.load("uses"), project))
    assert server.run() == 0
    assert server.finished == {"type": "finish", "status": "completed", "output": 5}


def test_changed_workflow_file_parks_the_run(project: Project) -> None:
    """An edited workflow file parks with workflowSourceChanged naming the file."""
    path = project.write("uses.workflow.py", _USES_HELPER)
    _helper(project, project.root / "helper.ran", 1)
    envelope = envelope_for(project.load("uses"), project)
    path.write_text(path.read_text() + "\n# edited\n")
    server = ScriptedServer(project, envelope)
    assert server.run() == 0
    assert server.parked == {"reason": "workflowSourceChanged", "detail": f"{path} changed"}


def test_different_definition_digest_parks_the_run(project: Project) -> None:
    """A loaded definition whose digest differs from the recorded one parks as source changed."""
    project.write("uses.workflow.py", _USES_HELPER)
    _helper(project, project.root / "helper.ran", 1)
    envelope = envelope_for(project.load("uses"), project)
    envelope["definitionDigest"] = "0" * 64
    server = ScriptedServer(project, envelope)
    assert server.run() == 0
    assert server.parked is not None
    assert server.parked["reason"] == "workflowSourceChanged"
    assert "definition of workflow 'uses'" in server.parked["detail"]


_FRAGILE = """
from pathlib import Path

from pi_workflows import Workflow, compute

if Path({flag!r}).exists():
    raise RuntimeError("the environment changed")

workflow = Workflow("fragile", "a", {{"a": compute(lambda ctx: 1)}})
"""


def test_unchanged_source_that_no_longer_loads_parks_with_load_failed(project: Project) -> None:
    """A byte-identical file that now raises parks with workflowLoadFailed naming file and line."""
    flag = project.root / "flag"
    path = project.write("fragile.workflow.py", _FRAGILE.format(flag=str(flag)))
    envelope = envelope_for(project.load("fragile"), project)
    flag.write_text("on")
    server = ScriptedServer(project, envelope)
    assert server.run() == 0
    assert server.parked == {
        "reason": "workflowLoadFailed",
        "detail": f"{path}:6: RuntimeError: the environment changed",
    }
