"""The resolver child: describe a workflow for run.start, list workflows, refuse with codes."""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Any

import msgspec
import pytest

from pi_workflows.protocol import FrameReader, encode_frame, fingerprint
from pi_workflows.sources import BUILTINS_DIR, sha256_hex

from .peer import Project, child_env


def _resolve(project: Project, request: Any, *, raw: bytes | None = None) -> dict[str, Any]:
    """Send one frame to a fresh resolver child and return its one answer."""
    parent, child = socket.socketpair()
    env = child_env(project, {"PI_WORKFLOWS_RUNNER_FD": str(child.fileno())})
    with parent:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pi_workflows.runner.resolve"],
            pass_fds=(child.fileno(),),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        child.close()
        parent.sendall(raw if raw is not None else encode_frame(request))
        frame = FrameReader(parent).read_frame(timeout=30)
        assert proc.wait(timeout=30) == 0
    assert frame is not None
    answer: dict[str, Any] = msgspec.json.decode(frame)
    return answer


_HELPER_WORKFLOW = """
from steps import double

from pi_workflows import Workflow, compute

workflow = Workflow("twice", "a", {"a": compute(lambda ctx: double(ctx.input))})
"""


def test_describe_returns_source_identity_definition_and_hashes(project: Project) -> None:
    """describe answers name, file identity with mounted helpers, snapshot, digest, input hash."""
    helper = project.write("steps.py", "def double(x):\n    return x * 2\n")
    path = project.write("twice.workflow.py", _HELPER_WORKFLOW)
    answer = _resolve(
        project,
        {"op": "describe", "workflow": "twice", "projectDir": str(project.root), "input": {"n": 1}},
    )
    loaded = project.load("twice")
    assert answer == {
        "ok": True,
        "workflow": "twice",
        "source": {
            "kind": "file",
            "ref": str(path),
            "revision": sha256_hex(path.read_bytes()),
            "projectDir": str(project.root.resolve()),
            "mounted": {str(helper.resolve()): sha256_hex(helper.read_bytes())},
        },
        "definition": loaded.snapshot,
        "definitionDigest": loaded.digest,
        "inputHash": fingerprint({"n": 1}),
        "cacheHints": {
            "root": str(path),
            "candidates": [
                str(path),
                str((project.home / ".pi" / "agent" / "workflows" / "twice.workflow.py").resolve()),
            ],
        },
    }


def test_describe_builtin_names_it_by_builtin_ref(project: Project) -> None:
    """A built-in is described as kind builtin with ref builtin:NAME and its file's revision."""
    answer = _resolve(
        project, {"op": "describe", "workflow": "builtin:demo", "projectDir": None, "input": None}
    )
    assert answer["ok"] is True
    assert answer["source"]["kind"] == "builtin"
    assert answer["source"]["ref"] == "builtin:demo"
    demo = BUILTINS_DIR / "demo.workflow.py"
    assert answer["source"]["revision"] == sha256_hex(demo.read_bytes())
    assert answer["source"]["projectDir"] is None


def test_list_names_project_user_and_builtin_workflows(project: Project) -> None:
    """list answers every workflow with its origin and path, the user dir taken from HOME."""
    project.write("alpha.workflow.py", "workflow = None\n")
    user_file = project.user_dir / "beta.workflow.py"
    user_file.write_text("workflow = None\n")
    answer = _resolve(project, {"op": "list", "projectDir": str(project.root)})
    assert answer["ok"] is True
    entries = {(w["name"], w["origin"]): w["path"] for w in answer["workflows"]}
    assert entries[("alpha", "project")] == str(project.workflows / "alpha.workflow.py")
    assert entries[("beta", "user")] == str(user_file)
    assert ("demo", "builtin") in entries


def test_list_gives_each_workflow_the_first_line_of_its_docstring(project: Project) -> None:
    """Each listed workflow carries its summary (None without a docstring): every built-in
    has one."""
    project.write("alpha.workflow.py", '"""alpha: says hello."""\nworkflow = None\n')
    project.write("gamma.workflow.py", "workflow = None\n")
    answer = _resolve(project, {"op": "list", "projectDir": str(project.root)})
    summaries = {w["name"]: w["summary"] for w in answer["workflows"]}
    assert (summaries["alpha"], summaries["gamma"]) == ("says hello.", None)
    builtins = [w for w in answer["workflows"] if w["origin"] == "builtin"]
    assert {w["name"] for w in builtins} >= {"demo", "implement", "review", "review-file", "watch"}
    assert all(w["summary"] for w in builtins)


_BROKEN_GRAPH = """
from pi_workflows import Workflow, compute, edge

workflow = Workflow("graph", "a", {"a": compute(lambda ctx: 1)}, [edge("a", "nowhere")])
"""


@pytest.mark.parametrize(
    ("name", "source", "code", "needle"),
    [
        ("missing", None, "workflowNotFound", "no workflow 'missing'"),
        ("syntax", "workflow = (\n", "workflowLoadFailed", "syntax.workflow.py:1: syntax error"),
        ("graph", _BROKEN_GRAPH, "workflowInvalid", "workflow 'graph', node 'a': edge to unknown"),
    ],
)
def test_describe_refuses_with_a_stable_code_and_one_line(
    project: Project, name: str, source: str | None, code: str, needle: str
) -> None:
    """A workflow that is missing, does not compile or has a bad graph is refused by code."""
    if source is not None:
        project.write(f"{name}.workflow.py", source)
    answer = _resolve(
        project,
        {"op": "describe", "workflow": name, "projectDir": str(project.root), "input": None},
    )
    assert answer["ok"] is False
    assert answer["code"] == code
    assert needle in answer["message"]
    assert "\n" not in answer["message"]


def test_describe_refuses_input_that_is_not_plain_json(project: Project) -> None:
    """An input nested deeper than canonical JSON allows is refused as inputInvalid."""
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    answer = _resolve(
        project, {"op": "describe", "workflow": "builtin:demo", "projectDir": None, "input": deep}
    )
    assert (answer["ok"], answer["code"]) == (False, "inputInvalid")


@pytest.mark.parametrize(
    ("request_", "raw"),
    [({"op": "explode"}, None), ([1, 2], None), (None, b"{not json\n")],
)
def test_malformed_requests_are_answered_bad_request(
    project: Project, request_: Any, raw: bytes | None
) -> None:
    """An unknown op, a non-object or a frame that is not JSON gets badRequest, not a crash."""
    answer = _resolve(project, request_, raw=raw)
    assert (answer["ok"], answer["code"]) == (False, "badRequest")
