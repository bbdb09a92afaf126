"""Verifying sources before a resume: changed code is refused and never executed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pi_workflows.sources import (
    LoadedWorkflow,
    SourceIdentity,
    SourceKind,
    WorkflowSourceChanged,
    load,
    ref_for_identity,
    resolve,
    verify_and_load,
)

from .conftest import Project


def _marker_module(project: Project, name: str, body: str = "VALUE = 1") -> Path:
    """A helper module that leaves ``NAME.ran`` in the project root when it executes."""
    marker = project.root / f"{name}.ran"
    return project.write(
        f"{name}.py",
        f"""
        from pathlib import Path

        Path({str(marker)!r}).write_text("executed")
        {body}
        """,
    )


def _markers(project: Project) -> list[str]:
    return sorted(p.name for p in project.root.glob("*.ran"))


def _clear_markers(project: Project) -> None:
    for marker in project.root.glob("*.ran"):
        marker.unlink()


def _start(project: Project, name: str) -> LoadedWorkflow:
    """Load as a run start does, then forget which modules ran."""
    loaded = load(resolve(name, project.root, project.user_dir))
    _clear_markers(project)
    return loaded


def _resume(project: Project, started: LoadedWorkflow) -> LoadedWorkflow:
    ref = ref_for_identity(started.identity, project.root)
    return verify_and_load(ref, started.identity, started.mounted)


_ROOT = """
from pathlib import Path

import helper
from pi_workflows import Workflow, compute

Path(__file__).resolve().parents[2].joinpath("root.ran").write_text("executed")
workflow = Workflow("flow", "a", {"a": compute(lambda ctx: helper.VALUE)})
"""


def _flow(project: Project) -> tuple[Path, Path]:
    helper = _marker_module(project, "helper")
    root = project.write("flow.workflow.py", _ROOT)
    return root, helper


def test_unchanged_sources_verify_and_load(project: Project) -> None:
    """Identical root and helpers load again with the same identity, map and digest."""
    _flow(project)
    started = _start(project, "flow")
    resumed = _resume(project, started)
    assert _markers(project) == ["helper.ran", "root.ran"]
    assert resumed.identity == started.identity
    assert resumed.mounted == started.mounted
    assert resumed.digest == started.digest
    assert len(started.mounted) == 1


def test_changed_helper_is_refused_before_any_code_runs(project: Project) -> None:
    """A helper changed since the start is named, and neither it nor the root executes."""
    _root, helper = _flow(project)
    started = _start(project, "flow")
    _marker_module(project, "helper", body="VALUE = 2")
    with pytest.raises(WorkflowSourceChanged) as caught:
        _resume(project, started)
    assert caught.value.file == str(helper.resolve())
    assert caught.value.reason == "changed"
    assert caught.value.expected == started.mounted[str(helper.resolve())]
    assert str(caught.value).startswith(f"workflow source changed: {helper.resolve()}")
    assert _markers(project) == []


def test_changed_workflow_file_is_refused_before_it_runs(project: Project) -> None:
    """A changed root file is refused by hash; the changed code never executes."""
    root, _helper = _flow(project)
    started = _start(project, "flow")
    root.write_text(_ROOT.replace('"executed"', '"changed"'), encoding="utf-8")
    with pytest.raises(WorkflowSourceChanged) as caught:
        _resume(project, started)
    assert (caught.value.file, caught.value.reason) == (str(root.resolve()), "changed")
    assert _markers(project) == []


def test_helper_changed_during_the_load_is_refused_before_it_executes(project: Project) -> None:
    """The import hook re-checks the bytes it compiles, closing the check-then-import gap."""
    helper = _marker_module(project, "helper")
    flag = project.root / "rewrite.flag"
    project.write(
        "flow.workflow.py",
        f"""
        from pathlib import Path

        flag, helper_file = Path({str(flag)!r}), Path({str(helper)!r})
        if flag.exists():
            helper_file.write_text(helper_file.read_text() + "VALUE = 99\\n")

        import helper
        from pi_workflows import Workflow, compute

        workflow = Workflow("flow", "a", {{"a": compute(lambda ctx: helper.VALUE)}})
        """,
    )
    started = _start(project, "flow")
    flag.write_text("go")
    with pytest.raises(WorkflowSourceChanged) as caught:
        _resume(project, started)
    assert (caught.value.file, caught.value.reason) == (str(helper.resolve()), "changed")
    assert _markers(project) == []


def test_newly_imported_project_module_is_refused_before_it_executes(project: Project) -> None:
    """A project-local module the run never imported before is refused as ``added``."""
    extra = _marker_module(project, "extra")
    flag = project.root / "extra.flag"
    project.write(
        "flow.workflow.py",
        f"""
        from pathlib import Path

        if Path({str(flag)!r}).exists():
            import extra
        from pi_workflows import Workflow, compute

        workflow = Workflow("flow", "a", {{"a": compute(lambda ctx: 1)}})
        """,
    )
    started = _start(project, "flow")
    assert started.mounted == {}
    flag.write_text("go")
    with pytest.raises(WorkflowSourceChanged) as caught:
        _resume(project, started)
    assert (caught.value.file, caught.value.reason) == (str(extra.resolve()), "added")
    assert _markers(project) == []


def test_recorded_module_no_longer_imported_is_a_change(project: Project) -> None:
    """The full mounted map is compared after the load: a dropped module is reported."""
    gone = project.write("gone.py", "VALUE = 1\n")
    flag = project.root / "skip.flag"
    project.write(
        "flow.workflow.py",
        f"""
        from pathlib import Path

        if not Path({str(flag)!r}).exists():
            import gone
        from pi_workflows import Workflow, compute

        workflow = Workflow("flow", "a", {{"a": compute(lambda ctx: 1)}})
        """,
    )
    started = _start(project, "flow")
    flag.write_text("skip")
    with pytest.raises(WorkflowSourceChanged) as caught:
        _resume(project, started)
    assert (caught.value.file, caught.value.reason) == (str(gone.resolve()), "dropped")


def test_deleted_helper_or_root_is_reported_missing(project: Project) -> None:
    """A recorded file that no longer exists is a change with reason ``missing``."""
    root, helper = _flow(project)
    started = _start(project, "flow")
    helper.unlink()
    with pytest.raises(WorkflowSourceChanged, match="no longer exists") as caught:
        _resume(project, started)
    assert caught.value.reason == "missing"
    root.unlink()
    with pytest.raises(WorkflowSourceChanged) as caught:
        _resume(project, started)
    assert (caught.value.file, caught.value.reason) == (str(root.resolve()), "missing")


def test_swallowed_refusal_still_fails_the_load(project: Project) -> None:
    """Workflow code that catches the refusal cannot turn it into a successful load."""
    helper = _marker_module(project, "helper")
    flag = project.root / "rewrite.flag"
    project.write(
        "flow.workflow.py",
        f"""
        from pathlib import Path

        flag, helper_file = Path({str(flag)!r}), Path({str(helper)!r})
        if flag.exists():
            helper_file.write_text(helper_file.read_text() + "VALUE = 99\\n")
        try:
            import helper
        except Exception:
            helper = None
        from pi_workflows import Workflow, compute

        workflow = Workflow("flow", "a", {{"a": compute(lambda ctx: 1)}})
        """,
    )
    started = _start(project, "flow")
    flag.write_text("go")
    with pytest.raises(WorkflowSourceChanged) as caught:
        _resume(project, started)
    assert (caught.value.file, caught.value.reason) == (str(helper.resolve()), "changed")
    assert _markers(project) == []


def test_identity_for_another_file_is_refused(project: Project) -> None:
    """Verifying a ref against an identity that names another file is a ``moved`` change."""
    _flow(project)
    started = _start(project, "flow")
    other = dataclasses.replace(started.identity, locator="/elsewhere/flow.workflow.py")
    with pytest.raises(WorkflowSourceChanged, match="different file"):
        verify_and_load(started.ref, other, started.mounted)


def test_builtin_identity_is_its_id_and_revision(project: Project) -> None:
    """A built-in is identified as ``builtin:NAME`` plus the sha256 of its file."""
    started = load(resolve("builtin:demo", project.root, project.user_dir))
    assert started.identity.kind is SourceKind.BUILTIN
    assert started.identity.locator == "builtin:demo"
    assert started.identity.revision == started.identity.sha256
    resumed = verify_and_load(
        ref_for_identity(started.identity, project.root), started.identity, started.mounted
    )
    assert resumed.digest == started.digest
    stale = dataclasses.replace(started.identity, sha256="0" * 64)
    with pytest.raises(WorkflowSourceChanged, match="contents changed"):
        verify_and_load(started.ref, stale, started.mounted)


def test_identity_round_trips_through_json() -> None:
    """``to_json`` and ``from_json`` are inverses; malformed objects are refused."""
    identity = SourceIdentity(SourceKind.FILE, "/p/x.workflow.py", "ab" * 32)
    assert identity.to_json() == {
        "kind": "file",
        "locator": "/p/x.workflow.py",
        "sha256": "ab" * 32,
    }
    assert SourceIdentity.from_json(identity.to_json()) == identity
    with pytest.raises(ValueError, match="needs string kind"):
        SourceIdentity.from_json({"kind": "file"})


def test_symlinked_workflow_keeps_its_name_through_a_resume(project: Project) -> None:
    """A workflow file linked under another name loads and verifies under the link's name."""
    real = project.workflow("deploy", base=project.root / "shared")
    real = real.rename(real.with_name("deploy-v2.workflow.py"))
    (project.workflows / "deploy.workflow.py").symlink_to(real)
    started = _start(project, "deploy")
    assert started.identity.locator == str(project.workflows.resolve() / "deploy.workflow.py")
    assert _resume(project, started).workflow.name == "deploy"
