"""Discovery and resolution: project, then user directory, then built-ins, then paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from pi_workflows.sources import (
    BUILTINS_DIR,
    DuplicateWorkflowError,
    WorkflowNotFoundError,
    WorkflowOrigin,
    builtin_names,
    default_user_dir,
    discover,
    resolve,
)

from .conftest import Project


def test_discovery_lists_project_then_user_then_builtins(project: Project) -> None:
    """Project workflows come first, then user ones, then built-ins, each sorted."""
    project.workflow("zeta")
    project.workflow("alpha")
    project.workflow("mine", base=project.user_dir)
    refs = discover(project.root, project.user_dir)
    assert [(r.name, r.origin) for r in refs] == [
        ("alpha", WorkflowOrigin.PROJECT),
        ("zeta", WorkflowOrigin.PROJECT),
        ("mine", WorkflowOrigin.USER),
        *[(name, WorkflowOrigin.BUILTIN) for name in builtin_names()],
    ]
    assert "demo" in builtin_names()
    assert all(r.path.is_absolute() for r in refs)


def test_project_workflow_wins_over_user_workflow_of_the_same_name(project: Project) -> None:
    """The first name wins; the hidden user file is listed as shadowed."""
    mine = project.workflow("deploy")
    theirs = project.workflow("deploy", base=project.user_dir)
    refs = [r for r in discover(project.root, project.user_dir) if r.name == "deploy"]
    assert len(refs) == 1
    assert refs[0].path == mine.resolve()
    assert refs[0].shadows == (theirs.resolve(),)
    resolved = resolve("deploy", project.root, project.user_dir)
    assert resolved.origin is WorkflowOrigin.PROJECT
    assert resolved.path == mine.resolve()


def test_user_workflow_is_found_when_the_project_has_none(project: Project) -> None:
    """A name only the user directory defines resolves there."""
    path = project.workflow("helper", base=project.user_dir)
    ref = resolve("helper", project.root, project.user_dir)
    assert (ref.origin, ref.path, ref.project_dir) == (
        WorkflowOrigin.USER,
        path.resolve(),
        project.root.resolve(),
    )


def test_user_dir_defaults_to_home_pi_agent_workflows(
    project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``user_dir`` the user's ``~/.pi/agent/workflows`` is searched."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_user_dir() == tmp_path / "home" / ".pi" / "agent" / "workflows"
    project.workflow("personal", base=project.user_dir)
    assert resolve("personal", project.root).origin is WorkflowOrigin.USER


def test_names_differing_only_by_case_are_a_duplicate(project: Project) -> None:
    """``Deploy`` and ``deploy`` in one directory are refused, naming both files."""
    project.workflow("deploy")
    project.workflow("Deploy")
    with pytest.raises(DuplicateWorkflowError) as caught:
        discover(project.root, project.user_dir)
    assert len(caught.value.paths) == 2
    assert "defined by more than one file" in str(caught.value)
    with pytest.raises(DuplicateWorkflowError):
        resolve("deploy", project.root, project.user_dir)


def test_files_that_are_not_named_workflows_are_ignored(project: Project) -> None:
    """Helpers, bad names and directories are not listed."""
    project.write("helpers.py", "X = 1\n")
    project.write("bad name.workflow.py", "workflow = None\n")
    (project.workflows / "dir.workflow.py").mkdir()
    project.workflow("good")
    names = [r.name for r in discover(project.root, project.user_dir)]
    assert names[0] == "good"
    assert "bad name" not in names
    assert "dir" not in names


def test_discovery_without_a_project_lists_user_and_builtins(project: Project) -> None:
    """``project_dir=None`` skips the project directory."""
    project.workflow("mine", base=project.user_dir)
    assert next(r.name for r in discover(None, project.user_dir)) == "mine"


def test_missing_directories_are_simply_empty(tmp_path: Path) -> None:
    """A project without ``.pi/workflows`` and an absent user dir list only built-ins."""
    refs = discover(tmp_path / "nothing", tmp_path / "none")
    assert [r.origin for r in refs] == [WorkflowOrigin.BUILTIN] * len(builtin_names())


def test_builtin_is_addressed_with_its_prefix(project: Project) -> None:
    """``builtin:demo`` resolves to the shipped file; its spec round-trips."""
    ref = resolve("builtin:demo", project.root, project.user_dir)
    assert ref.origin is WorkflowOrigin.BUILTIN
    assert ref.path == BUILTINS_DIR / "demo.workflow.py"
    assert ref.spec == "builtin:demo"
    assert ref.import_roots == (BUILTINS_DIR,)


def test_unknown_builtin_lists_the_available_ones(project: Project) -> None:
    """An unknown built-in name says which built-ins exist."""
    with pytest.raises(WorkflowNotFoundError, match="available built-ins: builtin:demo"):
        resolve("builtin:nope", project.root, project.user_dir)


def test_unknown_name_lists_where_it_looked(project: Project) -> None:
    """The error names the project and user directories in search order."""
    with pytest.raises(WorkflowNotFoundError) as caught:
        resolve("ghost", project.root, project.user_dir)
    assert caught.value.searched == (
        str(project.workflows.resolve()),
        str(project.user_dir.resolve()),
    )
    assert str(caught.value).startswith("no workflow 'ghost' (searched: ")


def test_builtin_name_without_prefix_gets_a_hint(project: Project) -> None:
    """Asking for ``demo`` points at ``builtin:demo``."""
    with pytest.raises(WorkflowNotFoundError, match="addressed as builtin:demo"):
        resolve("demo", project.root, project.user_dir)


def test_direct_paths_resolve_absolute_and_relative_to_the_project(project: Project) -> None:
    """A path spec loads that file; relative paths start at the project directory."""
    path = project.workflow("adhoc", base=project.root / "flows")
    absolute = resolve(str(path), project.root, project.user_dir)
    relative = resolve("flows/adhoc.workflow.py", project.root, project.user_dir)
    assert absolute == relative
    assert absolute.origin is WorkflowOrigin.PATH
    assert absolute.name == "adhoc"
    assert absolute.spec == str(path.resolve())
    assert absolute.import_roots == (path.parent.resolve(), project.root.resolve())


def test_direct_path_must_be_an_existing_named_workflow_file(project: Project) -> None:
    """A path without ``.workflow.py`` or to a missing file is refused clearly."""
    project.write("plain.py", "X = 1\n", base=project.root)
    with pytest.raises(WorkflowNotFoundError, match=r"named NAME\.workflow\.py"):
        resolve("plain.py", project.root, project.user_dir)
    with pytest.raises(WorkflowNotFoundError, match="does not exist"):
        resolve("missing.workflow.py", project.root, project.user_dir)


def test_malformed_name_is_not_searched(project: Project) -> None:
    """A spec that is neither a name, a built-in nor a path says what a name looks like."""
    with pytest.raises(WorkflowNotFoundError, match="a workflow name is 1-64"):
        resolve("no good", project.root, project.user_dir)
