"""Loading workflow files: isolation, mounted-source recording and clear load errors."""

from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path

import pytest

from pi_workflows.engine import definition_digest, snapshot
from pi_workflows.sources import (
    SourceKind,
    WorkflowLoadError,
    load,
    resolve,
)

from .conftest import Project


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_load_returns_the_workflow_its_identity_and_digest(project: Project) -> None:
    """A plain file loads into a validated workflow with a file identity and digest."""
    path = project.workflow("plain", "{'x': 1}")
    loaded = load(resolve("plain", project.root, project.user_dir))
    assert loaded.workflow.name == "plain"
    assert loaded.identity.kind is SourceKind.FILE
    assert loaded.identity.locator == str(path.resolve())
    assert loaded.identity.sha256 == _sha(path)
    assert loaded.mounted == {}
    assert loaded.snapshot == snapshot(loaded.workflow)
    assert loaded.digest == definition_digest(loaded.snapshot)


def test_file_without_workflow_is_a_clear_error(project: Project) -> None:
    """A file that defines no ``workflow`` says so, naming the file."""
    path = project.write("empty.workflow.py", "x = 1\n")
    with pytest.raises(WorkflowLoadError) as caught:
        load(resolve("empty", project.root, project.user_dir))
    assert caught.value.file == str(path.resolve())
    assert "defines no module-level `workflow`" in str(caught.value)


def test_workflow_of_the_wrong_type_is_refused(project: Project) -> None:
    """``workflow`` must be a ``Workflow`` instance."""
    project.write("odd.workflow.py", "workflow = {'nodes': []}\n")
    with pytest.raises(WorkflowLoadError, match="`workflow` is a dict, not a Workflow"):
        load(resolve("odd", project.root, project.user_dir))


def test_file_defining_two_workflows_is_refused(project: Project) -> None:
    """A workflow file defines exactly one ``Workflow``."""
    project.write(
        "two.workflow.py",
        """
        from pi_workflows import Workflow, compute

        workflow = Workflow("two", "a", {"a": compute(lambda ctx: 1)})
        spare = Workflow("spare", "a", {"a": compute(lambda ctx: 2)})
        """,
    )
    with pytest.raises(WorkflowLoadError, match=r"more than one Workflow \(`workflow` and spare\)"):
        load(resolve("two", project.root, project.user_dir))


def test_workflow_name_must_match_the_file_name(project: Project) -> None:
    """The command name is the file stem, so the workflow inside must carry it."""
    project.write(
        "named.workflow.py",
        """
        from pi_workflows import Workflow, compute

        workflow = Workflow("other", "a", {"a": compute(lambda ctx: 1)})
        """,
    )
    with pytest.raises(WorkflowLoadError, match="defines Workflow 'other' but the file is named"):
        load(resolve("named", project.root, project.user_dir))


def test_syntax_error_names_file_and_line(project: Project) -> None:
    """A file that does not compile reports its path and the line."""
    path = project.write("broken.workflow.py", "x = 1\ndef oops(:\n")
    with pytest.raises(WorkflowLoadError) as caught:
        load(resolve("broken", project.root, project.user_dir))
    assert caught.value.file == str(path.resolve())
    assert caught.value.line == 2
    assert str(caught.value).startswith(f"{path.resolve()}:2: syntax error: ")


def test_syntax_error_in_a_helper_names_the_helper(project: Project) -> None:
    """A helper module that does not compile is reported at its own file and line."""
    helper = project.write("helpers.py", "VALUE = (\n")
    project.write(
        "uses.workflow.py",
        """
        from helpers import VALUE
        from pi_workflows import Workflow, compute

        workflow = Workflow("uses", "a", {"a": compute(lambda ctx: VALUE)})
        """,
    )
    with pytest.raises(WorkflowLoadError) as caught:
        load(resolve("uses", project.root, project.user_dir))
    assert caught.value.file == str(helper.resolve())
    assert caught.value.line == 1


def test_exception_while_loading_names_the_line(project: Project) -> None:
    """A runtime error at import names the file, line and exception."""
    path = project.write("raises.workflow.py", "x = 1\ny = {}['missing']\n")
    with pytest.raises(WorkflowLoadError) as caught:
        load(resolve("raises", project.root, project.user_dir))
    assert (caught.value.file, caught.value.line) == (str(path.resolve()), 2)
    assert "KeyError: 'missing'" in str(caught.value)
    assert isinstance(caught.value.__cause__, KeyError)


def test_definition_error_names_workflow_node_and_line(project: Project) -> None:
    """A graph error surfaces with the workflow, the node and the line of ``Workflow(...)``."""
    project.write(
        "graph.workflow.py",
        """
        from pi_workflows import Workflow, compute, edge

        nodes = {"a": compute(lambda ctx: 1)}
        workflow = Workflow("graph", "a", nodes, [edge("a", "nowhere")])
        """,
    )
    with pytest.raises(WorkflowLoadError) as caught:
        load(resolve("graph", project.root, project.user_dir))
    assert caught.value.line == 4
    assert caught.value.problem == "workflow 'graph', node 'a': edge to unknown node 'nowhere'"
    assert str(caught.value).endswith(f"graph.workflow.py:4: {caught.value.problem}")


def test_sys_exit_while_loading_is_a_load_error(project: Project) -> None:
    """A workflow file that calls ``sys.exit`` does not end the loading process."""
    project.write("quits.workflow.py", "import sys\nsys.exit(3)\n")
    with pytest.raises(WorkflowLoadError, match="SystemExit: 3"):
        load(resolve("quits", project.root, project.user_dir))


def test_project_local_imports_are_recorded_with_their_hashes(project: Project) -> None:
    """Sibling helpers, project-root modules and packages are mounted with exact hashes."""
    sibling = project.write("sibling.py", "A = 1\n")
    root_module = project.write("shared.py", "B = 2\n", base=project.root)
    package_init = project.write("lib/__init__.py", "", base=project.root)
    submodule = project.write(
        "lib/util.py", "from . import inner\nC = inner.D\n", base=project.root
    )
    inner = project.write("lib/inner.py", "D = 3\n", base=project.root)
    project.write(
        "mounts.workflow.py",
        """
        import json

        import sibling
        from lib.util import C
        from shared import B

        from pi_workflows import Workflow, compute

        workflow = Workflow("mounts", "a", {"a": compute(lambda ctx: sibling.A + B + C)})
        """,
    )
    loaded = load(resolve("mounts", project.root, project.user_dir))
    files = (sibling, root_module, package_init, submodule, inner)
    assert loaded.mounted == {str(p.resolve()): _sha(p) for p in sorted(files)}
    assert str(Path(__file__)) not in loaded.mounted


def test_sibling_directory_wins_over_project_root(project: Project) -> None:
    """A module in the workflow's own directory shadows one of the same name at the root."""
    near = project.write("pick.py", "WHERE = 'near'\n")
    project.write("pick.py", "WHERE = 'root'\n", base=project.root)
    project.write(
        "which.workflow.py",
        """
        from pick import WHERE
        from pi_workflows import Workflow, compute

        workflow = Workflow("which", "a", {"a": compute(lambda ctx: WHERE)})
        """,
    )
    loaded = load(resolve("which", project.root, project.user_dir))
    assert list(loaded.mounted) == [str(near.resolve())]


def _value_of(loaded_module_source: Path) -> object:
    """Run the single compute node of a loaded workflow and return its output."""
    from pi_workflows.authoring import CancellationSignal, ComputeNode, NodeContext

    loaded = load(resolve(str(loaded_module_source), None))
    node = loaded.workflow.node("a")
    assert isinstance(node, ComputeNode)
    ctx = NodeContext(
        workflow=loaded.workflow.name, run_id="r", node_id="a", attempt_id="t", visit=1,
        input=None, outputs={}, results={}, cancellation=CancellationSignal(),
    )  # fmt: skip
    return node.run(ctx)


_USES_HELPERS = """
from helpers import VALUE
from pi_workflows import Workflow, compute

workflow = Workflow("uses", "a", {"a": compute(lambda ctx: VALUE)})
"""


def test_loads_do_not_leak_helper_modules_between_files(tmp_path: Path) -> None:
    """Two workflows with different ``helpers.py`` each get their own helper."""
    for which in ("one", "two"):
        base = tmp_path / which
        base.mkdir()
        (base / "helpers.py").write_text(f"VALUE = {which!r}\n", encoding="utf-8")
        (base / "uses.workflow.py").write_text(_USES_HELPERS, encoding="utf-8")
    assert _value_of(tmp_path / "one" / "uses.workflow.py") == "one"
    assert _value_of(tmp_path / "two" / "uses.workflow.py") == "two"
    assert "helpers" not in sys.modules


def test_a_changed_helper_is_loaded_afresh(tmp_path: Path) -> None:
    """After a helper changes on disk the next load sees the new code, not a cached module."""
    (tmp_path / "uses.workflow.py").write_text(_USES_HELPERS, encoding="utf-8")
    helper = tmp_path / "helpers.py"
    helper.write_text("VALUE = 'old'\n", encoding="utf-8")
    assert _value_of(tmp_path / "uses.workflow.py") == "old"
    helper.write_text("VALUE = 'new value'\n", encoding="utf-8")
    assert _value_of(tmp_path / "uses.workflow.py") == "new value"


def test_loading_leaves_sys_modules_meta_path_and_disk_as_they_were(project: Project) -> None:
    """No workflow or helper module stays imported, the hook is removed, no .pyc is written."""
    project.write("helpers.py", "VALUE = 1\n")
    project.write("uses.workflow.py", _USES_HELPERS)
    modules_before = set(sys.modules)
    meta_path_before = list(sys.meta_path)
    load(resolve("uses", project.root, project.user_dir))
    assert set(sys.modules) - modules_before == set()
    assert sys.meta_path == meta_path_before
    assert not list(project.root.rglob("__pycache__"))


def test_a_stale_import_of_a_project_module_is_hidden_during_the_load(project: Project) -> None:
    """A module already imported from the project is re-read and hashed, then restored."""
    helper = project.write("helpers.py", "VALUE = 'on disk'\n")
    project.write("uses.workflow.py", _USES_HELPERS)
    stale = types.ModuleType("helpers")
    stale.__file__ = str(helper)
    stale.VALUE = "stale"  # type: ignore[attr-defined]
    sys.modules["helpers"] = stale
    try:
        loaded = load(resolve("uses", project.root, project.user_dir))
        assert loaded.mounted == {str(helper.resolve()): _sha(helper)}
        assert sys.modules["helpers"] is stale
    finally:
        del sys.modules["helpers"]


def test_unrelated_module_of_the_same_name_is_left_alone(project: Project) -> None:
    """An already-imported module from outside the project is not hidden or replaced."""
    project.write("json.py", "raise RuntimeError('project json must not shadow stdlib json')\n")
    project.write(
        "std.workflow.py",
        """
        import json
        from pi_workflows import Workflow, compute

        workflow = Workflow("std", "a", {"a": compute(lambda ctx: json.dumps(1))})
        """,
    )
    assert load(resolve("std", project.root, project.user_dir)).mounted == {}
