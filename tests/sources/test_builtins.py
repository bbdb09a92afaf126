"""The built-in workflows ``implement``, ``review``, ``review-file`` and ``watch``: each loads
from the package, uses only the public authoring API, declares honest effects, and runs its
graph end to end on a real temp project (real ``make``, ``git`` and commands) with the
model's and the person's answers scripted per visit.

The graphs are driven by ``drive`` (``test_examples_and_builtins.py``) without a server. A
scripted answer may be a function of the text its step showed (an agent's prompt, a
checkpoint's request, a decision's title and details), as a model's is; every agent output
and checkpoint answer is first checked against its node's typed contract, as the runner
does. ``tests/pi/test_builtins.py`` runs them for real in Pi.
"""

from __future__ import annotations

import ast
import asyncio
import sys
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.authoring import (
    AgentNode,
    CancellationSignal,
    CheckpointNode,
    ComputeNode,
    EffectKind,
    FanOutNode,
    HumanDecisionNode,
    NodeContext,
    NodeKind,
    Rejected,
    ShellNode,
    Workflow,
    evaluate,
    invoke,
)
from pi_workflows.engine import Complete, Fail, NodeResult, RunState
from pi_workflows.protocol.json_schema import value_problem
from pi_workflows.runner.contracts import Accepted, check
from pi_workflows.sources import BUILTINS_DIR, SourceKind, builtin_names, load, resolve
from sources.test_examples_and_builtins import drive

from support.projects import (
    FIRST_FIX,
    REVIEWED,
    apply_edit,
    calc_project,
    fix_from_failure,
    git,
    review_project,
    todo_line,
)

NEW = ("implement", "review", "review-file", "watch")


def _workflow(name: str) -> Workflow:
    return load(resolve(f"builtin:{name}", None)).workflow


def shown(node: object, ctx: NodeContext) -> str:
    """What a node shows whoever answers it: an agent's prompt, a checkpoint's request, a
    decision's title and details."""
    if isinstance(node, AgentNode):
        return str(asyncio.run(evaluate(node.prompt, ctx)))
    if isinstance(node, HumanDecisionNode):
        title = asyncio.run(evaluate(node.title, ctx))
        details = asyncio.run(evaluate(node.details, ctx)) if node.details else ""
        return f"{title}\n{details}"
    if isinstance(node, CheckpointNode):
        return str(asyncio.run(evaluate(node.request, ctx)))
    return ""


class Script(Mapping[str, object]):
    """Answers per node and visit, for ``drive``: each visit takes the node's next answer. A
    callable answer is called with the text the node showed. Agent outputs and checkpoint
    answers must match the node's typed contract. ``shown`` keeps ``(node, text)`` of every
    answered visit, in order."""

    def __init__(self, workflow: Workflow, **answers: Any) -> None:
        self.workflow = workflow
        self.answers: dict[str, Any] = {
            node: list(value) if isinstance(value, list) else value
            for node, value in answers.items()
        }
        self.shown: list[tuple[str, str]] = []

    def get(self, key: str, default: object = None) -> object:
        if key not in self.answers:
            return default
        if isinstance(self.workflow.node(key), FanOutNode):
            return self.answers[key]  # a function of each child's input
        assert self.answers[key], f"no answer left for a visit of {key}"
        value = self.answers[key].pop(0)
        return lambda ctx: self._answer(key, value, ctx)

    def _answer(self, key: str, value: Any, ctx: NodeContext) -> object:
        node = self.workflow.node(key)
        text = shown(node, ctx)
        self.shown.append((key, text))
        answer = value(text) if callable(value) else value
        contract = getattr(node, "output", None) or getattr(node, "answer", None)
        if contract is not None:
            checked = check(contract, answer, "output")
            assert isinstance(checked, Accepted), checked
        return answer

    def texts(self, node: str) -> list[str]:
        """What ``node`` showed at each answered visit."""
        return [text for key, text in self.shown if key == node]

    def __getitem__(self, key: str) -> object:
        return self.answers[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.answers)

    def __len__(self) -> int:
        return len(self.answers)


def context(
    workflow: Workflow, node_id: str, run_input: Any, state: RunState | None = None, **outputs: Any
) -> NodeContext:
    """A callback's ``ctx`` for ``node_id``: the outputs and results of ``state`` (or
    ``outputs``)."""
    state = state or RunState.initial()
    return NodeContext(
        workflow=workflow.name, run_id="run-1", node_id=node_id, attempt_id="a",
        visit=state.visit_of(node_id), input=run_input, outputs={**state.outputs, **outputs},
        results=state.results, cancellation=CancellationSignal(),
    )  # fmt: skip


def run_compute(workflow: Workflow, node_id: str, ctx: NodeContext) -> Any:
    """Run one compute node's callback."""
    node = workflow.node(node_id)
    assert isinstance(node, ComputeNode)
    return asyncio.run(evaluate(node.run, ctx))


# --- all of them -----------------------------------------------------------------------------


def test_the_builtins_ship_and_load_with_a_revision_as_their_identity() -> None:
    """Each new built-in is listed, loads from the package's builtins directory, and is
    identified as ``builtin:NAME`` with the sha256 of its one file as its revision."""
    assert set(NEW) <= set(builtin_names())
    for name in NEW:
        loaded = load(resolve(f"builtin:{name}", None))
        assert loaded.ref.path.parent == BUILTINS_DIR
        assert loaded.identity.kind is SourceKind.BUILTIN
        assert loaded.identity.locator == f"builtin:{name}"
        assert len(loaded.identity.revision) == 64
        assert loaded.mounted == {}  # one file: its revision covers all of its code
        assert loaded.workflow.input_contract is not None
    review = load(resolve("builtin:review", None))
    assert review.child_specs == {"reviews": "builtin:review-file"}


@pytest.mark.parametrize("name", NEW)
def test_a_builtin_imports_only_the_public_api_and_the_standard_library(name: str) -> None:
    """A built-in is an ordinary workflow: it imports ``pi_workflows`` (the public authoring
    API) and the standard library, nothing internal."""
    tree = ast.parse((BUILTINS_DIR / f"{name}.workflow.py").read_text())
    modules = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    modules |= {
        a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
    }
    modules.discard("__future__")
    assert "pi_workflows" in modules
    outside = {
        m for m in modules if m != "pi_workflows" and m.split(".")[0] not in sys.stdlib_module_names
    }
    assert not outside


def test_every_command_of_the_builtins_is_an_idempotent_read_or_check() -> None:
    """Each shell node of the built-ins only reads or checks (a git diff, the tests, the
    watched command) and is declared idempotent; none edits, commits or has an action."""
    effects = {
        (name, node_id): node.effect.kind
        for name in NEW
        for node_id, node in _workflow(name).nodes.items()
        if isinstance(node, ShellNode) and node.effect is not None
    }
    assert effects == {
        ("implement", "verify"): EffectKind.IDEMPOTENT,
        ("review", "changed"): EffectKind.IDEMPOTENT,
        ("review-file", "diff"): EffectKind.IDEMPOTENT,
        ("watch", "check"): EffectKind.IDEMPOTENT,
    }
    kinds = {node.kind for name in NEW for node in _workflow(name).nodes.values()}
    assert NodeKind.ACTION not in kinds


# --- implement -------------------------------------------------------------------------------

PLAN = {
    "summary": "Make add return the sum",
    "steps": ["Change add to add its arguments"],
    "files": ["calc.py"],
    "risks": [],
}
TASK = "Make add(2, 3) return 5"


def _implement_input(project: Path, **extra: Any) -> dict[str, Any]:
    return {"task": TASK, "dir": str(project), **extra}


def _edit(project: Path, old: str, new: str) -> dict[str, Any]:
    apply_edit(project / "calc.py", old, new)
    return {"summary": f"replaced {old} by {new}", "changedFiles": ["calc.py"]}


def _fix(project: Path) -> Callable[[str], dict[str, Any]]:
    """A fix round's model: it makes the edit the failure in its prompt names."""
    return lambda prompt: _edit(project, *fix_from_failure(prompt))


def test_implement_limits_its_agents_tools_and_asks_a_person() -> None:
    """Planning may only read; implementing and fixing may read and edit but not run a
    shell; the summary may call no tool; approval and the decision after the fix rounds are
    human decisions; the plan is typed (summary, steps, files, risks)."""
    workflow = _workflow("implement")
    tools = {
        node_id: node.allowed_tools
        for node_id, node in workflow.nodes.items()
        if isinstance(node, AgentNode)
    }
    assert tools == {
        "plan": ("read", "grep", "find", "ls"),
        "implement": ("read", "grep", "find", "ls", "edit", "write"),
        "fix": ("read", "grep", "find", "ls", "edit", "write"),
        "summary": (),
    }
    decisions = [
        node_id for node_id, node in workflow.nodes.items() if isinstance(node, HumanDecisionNode)
    ]
    assert decisions == ["approve", "exhausted"]
    plan = workflow.node("plan")
    assert isinstance(plan, AgentNode)
    assert plan.output is not None
    assert plan.output.schema["required"] == ["summary", "steps", "files", "risks"]


def test_implement_detects_the_projects_test_command(tmp_path: Path) -> None:
    """``make test`` (a Makefile test target) comes first, then an ``npm test`` script, then
    a pytest set-up (its ``.venv`` pytest when there is one); the input's command wins and
    is split like a shell would; no command at all fails the run with one line saying so."""
    workflow = _workflow("implement")

    def setup(directory: Path, **extra: Any) -> dict[str, Any]:
        ctx = context(workflow, "setup", _implement_input(directory, **extra))
        return dict(run_compute(workflow, "setup", ctx))

    make = tmp_path / "make"
    make.mkdir()
    (make / "Makefile").write_text("all:\n\ttrue\ntest: all\n\ttrue\n")
    (make / "package.json").write_text('{"scripts": {"test": "jest"}}')
    assert setup(make)["testCommand"] == ["make", "test"]
    npm = tmp_path / "npm"
    npm.mkdir()
    (npm / "Makefile").write_text("TEST := 1\ntest := 2\nbuild:\n\ttrue\n")
    (npm / "package.json").write_text('{"scripts": {"test": "jest"}}')
    assert setup(npm)["testCommand"] == ["npm", "test"]
    py = tmp_path / "py"
    (py / "tests").mkdir(parents=True)
    (py / "package.json").write_text(
        '{"scripts": {"test": "echo \\"Error: no test specified\\" && exit 1"}}'
    )
    (py / "tests" / "test_x.py").write_text("def test_x(): pass\n")
    assert setup(py)["testCommand"] == ["pytest"]
    (py / ".venv" / "bin").mkdir(parents=True)
    (py / ".venv" / "bin" / "pytest").write_text("#!/bin/sh\n")
    assert setup(py) == {
        "dir": str(py),
        "task": TASK,
        "testCommand": [str(py / ".venv" / "bin" / "pytest")],
        "testCommandSource": "pytest",
        "maxFixRounds": 3,
    }
    given = setup(make, testCommand="python3 -m unittest -k 'a b'", maxFixRounds=1)
    assert (given["testCommand"], given["testCommandSource"], given["maxFixRounds"]) == (
        ["python3", "-m", "unittest", "-k", "a b"],
        "input",
        1,
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"no test command found in .*: give one as the input"):
        setup(empty)
    with pytest.raises(ValueError, match="'no-such-tool' is not found on PATH"):
        setup(empty, testCommand=["no-such-tool"])
    with pytest.raises(ValueError, match="does not exist"):
        setup(tmp_path / "missing")


def test_implements_input_is_typed() -> None:
    """A run without a task, or with an unknown field or too many fix rounds, is refused."""
    contract = _workflow("implement").input_contract
    assert contract is not None
    assert (
        value_problem(contract.schema, {"task": "x", "testCommand": "make test"}, "input") is None
    )
    assert value_problem(contract.schema, {"task": "x", "testCommand": ["make"]}, "input") is None
    assert "'task' is a required property" in str(value_problem(contract.schema, {}, "input"))
    assert value_problem(contract.schema, {"task": "x", "maxFixRounds": 11}, "input")
    assert value_problem(contract.schema, {"task": "x", "tests": "y"}, "input")


def test_implement_plans_gets_approved_fixes_once_from_the_failure_and_passes(
    tmp_path: Path,
) -> None:
    """Approved, the implementing edit fixes ``add`` only; the real ``make test`` fails on
    ``describe``; the fix round is sent that output and makes the edit it names; the tests
    pass, and the run completes with a report of one fix round and the model's summary. The
    change is left uncommitted for the person."""
    project = calc_project(tmp_path / "calc")
    workflow = _workflow("implement")
    run_input = _implement_input(project)
    script = Script(
        workflow,
        plan=[PLAN],
        approve=["approve"],
        implement=[lambda _prompt: _edit(project, *FIRST_FIX)],
        fix=[_fix(project)],
        summary=["Fixed add and describe; make test passes."],
    )

    transition, state, visited = drive(workflow, run_input, script)

    assert visited == [
        "setup", "plan", "approve", "implement", "verify", "judge", "fix", "verify",
        "summary", "report",
    ]  # fmt: skip
    [plan_prompt] = script.texts("plan")
    assert TASK in plan_prompt
    assert "`make test`" in plan_prompt
    [approval] = script.texts("approve")
    assert approval.startswith("Implement this plan? Make add return the sum\nPlan: ")
    assert "Files: calc.py" in approval
    [fix_prompt] = script.texts("fix")
    assert fix_prompt.startswith("Fix round 1 of 3: after your change the tests fail.")
    assert "FAIL: describe(2, 3) starts with 'difference'; expected the word 'sum'" in fix_prompt
    [summary] = script.texts("summary")
    assert "The tests passed (`make test`) after 1 fix round(s)." in summary
    assert "not committed" in summary
    assert isinstance(transition, Complete)
    assert transition.output == {
        "dir": str(project),
        "task": TASK,
        "plan": PLAN,
        "changedFiles": ["calc.py"],
        "testCommand": ["make", "test"],
        "tests": "passed",
        "fixRounds": 1,
        "summary": "Fixed add and describe; make test passes.",
    }
    verify = state.outputs["verify"]
    assert isinstance(verify, dict)
    assert "ok: 2 checks passed" in str(verify["stdout"])
    assert git(project, "status", "--porcelain").split() == ["M", "calc.py"]


def test_implement_change_loops_back_to_planning_with_the_persons_text(tmp_path: Path) -> None:
    """*change* asks the person (a typed checkpoint for the person, so the model is never
    shown it), then plans again with the previous plan and the person's text; *stop* then
    ends the run before anything was changed."""
    project = calc_project(tmp_path / "calc")
    workflow = _workflow("implement")
    revised = {**PLAN, "steps": [*PLAN["steps"], "Explain it in a comment"]}
    script = Script(
        workflow,
        plan=[PLAN, revised],
        approve=["change", "stop"],
        change=[{"change": "also explain it in a comment"}],
    )
    transition, _, visited = drive(workflow, _implement_input(project), script)
    assert visited == ["setup", "plan", "approve", "change", "plan", "approve", "stopped"]
    [question] = script.texts("change")
    assert "What should change in the plan?" in question
    assert "model" not in question.lower()
    first, second = script.texts("plan")
    assert "previous plan" not in first
    assert "Your previous plan:\nPlan: Make add return the sum" in second
    assert "The person asked for this change to it: also explain it in a comment" in second
    assert transition == Complete(
        {"message": "Stopped before anything was changed.", "kind": "final"}, "stopped"
    )
    assert git(project, "status", "--porcelain") == ""
    change = workflow.node("change")
    assert isinstance(change, CheckpointNode)
    assert change.for_person is True
    assert change.answer is not None
    assert value_problem(change.answer.schema, {"change": ""}, "answer")


def test_implement_asks_the_person_after_the_last_fix_round(tmp_path: Path) -> None:
    """With one fix round allowed and a fix that fixes nothing, the person is asked; *more*
    allows as many rounds again, whose fix passes; with *keep* the run ends reporting the
    tests failing, and with *stop* it says the changes are left to inspect."""
    workflow = _workflow("implement")
    project = calc_project(tmp_path / "more")
    nothing = {"summary": "looked", "changedFiles": []}
    script = Script(
        workflow,
        plan=[PLAN],
        approve=["approve"],
        implement=[lambda _prompt: _edit(project, *FIRST_FIX)],
        fix=[nothing, _fix(project)],
        exhausted=["more"],
        summary=["Done after two rounds."],
    )
    transition, _, visited = drive(workflow, _implement_input(project, maxFixRounds=1), script)
    assert visited[3:] == [
        "implement", "verify", "judge", "fix", "verify", "judge", "exhausted", "grant", "fix",
        "verify", "summary", "report",
    ]  # fmt: skip
    [asked] = script.texts("exhausted")
    assert asked.startswith("The tests still fail after 1 fix rounds. What now?")
    assert "expected the word 'sum'" in asked
    assert script.texts("fix")[1].startswith("Fix round 2 of 2:")
    assert isinstance(transition, Complete)
    assert isinstance(transition.output, dict)
    assert (transition.output["tests"], transition.output["fixRounds"]) == ("passed", 2)

    for choice, ending in (("keep", "report"), ("stop", "stopped")):
        project = calc_project(tmp_path / choice)
        script = Script(
            workflow,
            plan=[PLAN],
            approve=["approve"],
            implement=[lambda _prompt, p=project: _edit(p, *FIRST_FIX)],  # type: ignore[misc]
            fix=[nothing],
            exhausted=[choice],
            summary=["The tests still fail."],
        )
        transition, _, visited = drive(workflow, _implement_input(project, maxFixRounds=1), script)
        assert visited[-1] == ending
        assert isinstance(transition, Complete)
        if choice == "keep":
            assert (
                "The tests still fail (`make test`); the person kept the change."
                in (script.texts("summary")[0])
            )
            assert isinstance(transition.output, dict)
            assert transition.output["tests"] == "failing"
        else:
            assert transition.output == {
                "message": "Stopped with the tests failing; the changes are left in"
                f" {project} for you to inspect (git diff).",
                "kind": "final",
            }


def test_implement_refuses_a_plan_that_names_files_outside_the_project(tmp_path: Path) -> None:
    """A plan naming an absolute path elsewhere or a path climbing out is sent back."""
    project = calc_project(tmp_path / "calc")
    workflow = _workflow("implement")
    node = workflow.node("plan")
    assert isinstance(node, AgentNode)
    assert node.validate is not None
    ctx = context(workflow, "plan", _implement_input(project), setup={"dir": str(project)})
    asyncio.run(invoke(node.validate, PLAN, ctx))
    for outside in ("/etc/passwd", "../elsewhere.py"):
        with pytest.raises(Rejected, match="files must be inside the project directory"):
            asyncio.run(invoke(node.validate, {**PLAN, "files": [outside]}, ctx))


# --- review ----------------------------------------------------------------------------------


def _review_input(project: Path, **extra: Any) -> dict[str, Any]:
    return {"dir": str(project), **extra}


def findings_from_diff(prompt: str) -> dict[str, Any]:
    """A reviewer's model: one warning on the added TODO line of the diff it was sent."""
    file, line = todo_line(prompt[prompt.index("diff --git") :])
    return {"findings": [{"file": file, "line": line, "severity": "warning", "text": "a TODO"}]}


def review_child(child_input: Any) -> dict[str, Any]:
    """One ``review-file`` child, driven for real on its input (its real ``git diff``), its
    model answering from the diff; returns the child's output."""
    workflow = _workflow("review-file")
    script = Script(workflow, review=[findings_from_diff])
    transition, _, visited = drive(workflow, child_input, script)
    assert visited == ["target", "diff", "review"]
    assert isinstance(transition, Complete)
    assert isinstance(transition.output, dict)
    return transition.output


def test_review_fans_out_one_detached_child_per_changed_file_and_merges_them(
    tmp_path: Path,
) -> None:
    """Three changed files (two edited, one new) each go to a ``review-file`` child (detached,
    four at a time) that reads its own real diff; the deleted file is listed, not reviewed;
    the merged findings are sorted, counted, told in one message, presented by the model and
    reported."""
    project = review_project(tmp_path / "repo")
    workflow = _workflow("review")
    node = workflow.node("reviews")
    assert isinstance(node, FanOutNode)
    assert (node.workflow, node.detached, node.concurrency) == ("builtin:review-file", True, 4)
    script = Script(workflow, reviews=review_child, present=["Three TODOs to resolve."])

    transition, state, visited = drive(workflow, _review_input(project), script)

    assert visited == ["setup", "changed", "files", "reviews", "merge", "tell", "present", "report"]
    files = state.outputs["files"]
    assert isinstance(files, dict)
    assert [item["file"] for item in files["items"]] == sorted(REVIEWED)  # type: ignore[index,union-attr]
    assert files["deleted"] == ["old.py"]
    expected = [
        {"file": "alpha.py", "line": 2, "severity": "warning", "text": "a TODO"},
        {"file": "beta.py", "line": 3, "severity": "warning", "text": "a TODO"},
        {"file": "gamma.py", "line": 3, "severity": "warning", "text": "a TODO"},
    ]
    message = (
        "Review of 3 changed file(s) against HEAD: 0 error(s), 3 warning(s), 0 note(s)\n"
        "- [warning] alpha.py:2: a TODO\n- [warning] beta.py:3: a TODO\n"
        "- [warning] gamma.py:3: a TODO\nDeleted, not reviewed: old.py"
    )
    assert state.outputs["tell"] == {"message": message, "kind": "progress"}
    [present] = script.texts("present")
    assert present.endswith(message)
    assert isinstance(transition, Complete)
    assert transition.output == {
        "base": "HEAD",
        "dir": str(project),
        "reviewed": ["alpha.py", "beta.py", "gamma.py"],
        "findings": expected,
        "counts": {"error": 0, "warning": 3, "note": 0},
        "failed": [],
        "skipped": [],
        "deleted": ["old.py"],
        "presentation": "Three TODOs to resolve.",
    }


def test_review_merge_sorts_by_severity_and_names_failed_reviews() -> None:
    """Errors come before warnings and notes, then by file and line; a failed child (the
    fan_out failed, its list in the details) is named with its error and its findings are
    missing; files over ``maxFiles`` are listed as not reviewed."""
    workflow = _workflow("review")
    items = [{"file": name, "status": "M"} for name in ("a.py", "b.py", "c.py")]
    children = [
        {"runId": "r1", "outcome": "ok", "error": None, "output": {"findings": [
            {"file": "a.py", "line": 9, "severity": "note", "text": "n"},
            {"file": "a.py", "line": 3, "severity": "error", "text": "e"},
        ]}},
        {"runId": "r2", "outcome": "failed", "error": "the model gave up", "output": None},
        {"runId": "r3", "outcome": "ok", "error": None, "output": {"findings": [
            {"file": "c.py", "line": None, "severity": "error", "text": "whole"},
        ]}},
    ]  # fmt: skip
    state = RunState.initial().record(
        "reviews",
        NodeResult.failed("1 of 3 children failed", details={"children": children}),
    )
    ctx = context(
        workflow, "merge", {}, state,
        setup={"dir": "/p", "base": "main", "maxFiles": 3},
        files={"items": items, "skipped": ["d.py"], "deleted": [], "empty": False},
    )  # fmt: skip
    merged = run_compute(workflow, "merge", ctx)
    assert [(f["file"], f["line"], f["severity"]) for f in merged["findings"]] == [
        ("a.py", 3, "error"),
        ("c.py", None, "error"),
        ("a.py", 9, "note"),
    ]
    assert merged["failed"] == [{"file": "b.py", "runId": "r2", "error": "the model gave up"}]
    assert merged["counts"] == {"error": 2, "warning": 0, "note": 1}
    node = workflow.node("tell")
    text = asyncio.run(evaluate(node.message, context(workflow, "tell", {}, merge=merged)))  # type: ignore[union-attr]
    assert text.splitlines() == [
        "Review of 3 changed file(s) against main: 2 error(s), 0 warning(s), 1 note(s)",
        "- [error] a.py:3: e",
        "- [error] c.py: whole",
        "- [note] a.py:9: n",
        "- review of b.py failed: the model gave up",
        "Not reviewed (over maxFiles): d.py",
    ]


def test_review_with_nothing_changed_says_so_and_a_bad_base_fails_with_gits_words(
    tmp_path: Path,
) -> None:
    """A clean work tree ends with a final message; a directory outside any git work tree
    fails the run at once, saying so; an unknown base fails it with git's own words."""
    workflow = _workflow("review")
    clean = review_project(tmp_path / "repo")
    git(clean, "add", "-A")
    git(clean, "commit", "-q", "-m", "after")
    transition, _, visited = drive(workflow, _review_input(clean), {})
    assert visited == ["setup", "changed", "files", "nothing"]
    assert transition == Complete(
        {"message": "No changed files to review against HEAD.", "kind": "final"}, "nothing"
    )
    plain = tmp_path / "plain"
    plain.mkdir()
    outside, _, visited = drive(workflow, _review_input(plain), {})
    assert visited == ["setup"]
    assert isinstance(outside, Fail)
    assert f"{plain} is not in a git work tree" in outside.error
    unknown, _, visited = drive(workflow, _review_input(clean, base="no-such-branch"), {})
    assert visited == ["setup", "changed", "git_failed"]
    assert isinstance(unknown, Fail)
    assert f"git diff against no-such-branch failed in {clean}: fatal: " in unknown.error


def test_review_file_refuses_option_like_bases_and_other_files_findings(tmp_path: Path) -> None:
    """A base that git would read as an option, or a file outside the directory, fails the
    child before git runs; findings about another file are sent back to the model."""
    workflow = _workflow("review-file")
    project = review_project(tmp_path / "repo")
    for bad in ({"base": "--output=/tmp/x"}, {"base": "main; rm"}, {"file": "../x.py"}):
        child = {"file": "alpha.py", "dir": str(project), **bad}
        transition, _, visited = drive(workflow, child, {})
        assert visited == ["target"]
        assert isinstance(transition, Fail)
    node = workflow.node("review")
    assert isinstance(node, AgentNode)
    assert node.validate is not None
    assert node.allowed_tools == ("read", "grep", "find", "ls")
    ctx = context(workflow, "review", {}, target={"file": "alpha.py", "dir": "/p", "base": "HEAD"})
    other = {"findings": [{"file": "beta.py", "line": 1, "severity": "note", "text": "x"}]}
    with pytest.raises(Rejected, match=r'report findings of alpha\.py only, each with "file"'):
        asyncio.run(invoke(node.validate, other, ctx))
    assert node.output is not None
    bad_severity = {"findings": [{"file": "a", "line": 0, "severity": "bad", "text": "x"}]}
    assert not isinstance(check(node.output, bad_severity, "output"), Accepted)


# --- watch -----------------------------------------------------------------------------------


def _counter(tmp_path: Path, outputs: list[str], codes: list[int] | None = None) -> list[str]:
    """A command that prints the next of ``outputs`` (and exits with the next of ``codes``)
    each time it runs, the last one from then on."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "counter.py"
    state = tmp_path / "count"
    script.write_text(
        "import sys\nfrom pathlib import Path\n"
        f"state = Path({str(state)!r})\n"
        "n = int(state.read_text()) if state.exists() else 0\n"
        "state.write_text(str(n + 1))\n"
        f"outputs, codes = {outputs!r}, {codes or [0]!r}\n"
        "print(outputs[min(n, len(outputs) - 1)])\n"
        "sys.exit(codes[min(n, len(codes) - 1)])\n"
    )
    return [sys.executable, str(script)]


def test_watch_tells_the_first_result_and_each_change_and_stops_on_its_condition(
    tmp_path: Path,
) -> None:
    """The first check is told; an unchanged check only sleeps; a changed output is told;
    the check that meets ``until`` (here also a change, told first) ends the run with a
    final message and a report."""
    workflow = _workflow("watch")
    command = _counter(tmp_path, ["waiting", "waiting", "building", "done"])
    run_input = {"command": command, "everySeconds": 5, "until": {"outputContains": "done"}}
    transition, state, visited = drive(workflow, run_input)
    assert visited == [
        "setup", "check", "judge", "started", "go_on", "pause", "check", "judge", "pause",
        "check", "judge", "changed", "go_on", "pause", "check", "judge", "changed", "go_on",
        "finished", "report",
    ]  # fmt: skip
    assert isinstance(transition, Complete)
    assert transition.output == {
        "command": command,
        "checks": 4,
        "changes": 2,
        "stoppedBecause": "condition",
        "exitCode": 0,
        "output": "done",
    }
    name = " ".join(command)
    assert state.outputs["finished"] == {
        "message": f"Stopped watching `{name}` after 4 check(s): the stop condition holds."
        " Last result: exit code 0, output:\ndone",
        "kind": "final",
    }


def test_watch_tells_an_exit_code_change_and_stops_after_its_count(tmp_path: Path) -> None:
    """A change of the exit code alone is told (``0 -> 3``); after ``maxChecks`` checks
    the run stops, saying so."""
    workflow = _workflow("watch")
    command = _counter(tmp_path, ["same"], [0, 3])
    run_input = {"command": command, "maxChecks": 3}
    transition, state, visited = drive(workflow, run_input)
    assert visited == [
        "setup", "check", "judge", "started", "go_on", "pause", "check", "judge", "changed",
        "go_on", "pause", "check", "judge", "finished", "report",
    ]  # fmt: skip
    changed = state.outputs["changed"]
    assert isinstance(changed, dict)
    assert changed["message"] == f"`{' '.join(command)}` changed (check 2):\nexit code 0 -> 3"
    assert isinstance(transition, Complete)
    assert isinstance(transition.output, dict)
    assert (transition.output["stoppedBecause"], transition.output["checks"]) == ("count", 3)
    exit_stop, _, _ = drive(
        workflow, {"command": _counter(tmp_path / "x", ["a"], [1, 0]), "until": {"exitCode": 0}}
    )
    assert isinstance(exit_stop, Complete)
    assert isinstance(exit_stop.output, dict)
    assert (exit_stop.output["stoppedBecause"], exit_stop.output["checks"]) == ("condition", 2)


def test_watch_sleeps_no_later_than_its_deadline_and_stops_there(tmp_path: Path) -> None:
    """The sleep is the interval, or what is left to the deadline when that is shorter; a
    check at or after the deadline stops the run (``deadline``)."""
    workflow = _workflow("watch")
    sleeper = workflow.node("pause")
    assert sleeper.kind is NodeKind.SLEEP

    def setup(deadline: datetime) -> dict[str, Any]:
        return {
            "command": ["true"], "dir": str(tmp_path), "everySeconds": 60.0, "until": {},
            "maxChecks": 100, "deadline": deadline.isoformat(),
        }  # fmt: skip

    soon = datetime.now(UTC) + timedelta(seconds=10)
    later = datetime.now(UTC) + timedelta(hours=1)
    wait = sleeper.until  # type: ignore[union-attr]
    assert wait is not None
    assert 0 < wait(context(workflow, "pause", {}, setup=setup(soon))) <= 10
    assert wait(context(workflow, "pause", {}, setup=setup(later))) == 60.0
    past = datetime.now(UTC) - timedelta(seconds=1)
    check_output = {"exitCode": 0, "stdout": "x\n", "stderr": ""}
    before = {"digest": run_compute(workflow, "judge", context(
        workflow, "judge", {}, setup=setup(later), check=check_output))["digest"]}  # fmt: skip
    verdict = run_compute(
        workflow,
        "judge",
        context(workflow, "judge", {}, setup=setup(past), check=check_output, judge=before),
    )
    assert (verdict["stop"], verdict["route"], verdict["output"]) == ("deadline", "stop", "x")


def test_watch_input_is_typed_and_a_string_command_is_split(tmp_path: Path) -> None:
    """The input needs a command; intervals under a second, unknown stop rules and unknown
    fields are refused; a string command is split like a shell would."""
    workflow = _workflow("watch")
    contract = workflow.input_contract
    assert contract is not None
    assert value_problem(contract.schema, {"command": "make status"}, "input") is None
    for bad in (
        {},
        {"command": []},
        {"command": "x", "everySeconds": 0.5},
        {"command": "x", "until": {"outputIs": "y"}},
        {"command": "x", "until": {}},
        {"command": "x", "every": 5},
    ):
        assert value_problem(contract.schema, bad, "input"), bad
    found = run_compute(
        workflow,
        "setup",
        context(workflow, "setup", {"command": "git log -1 'a b'", "dir": str(tmp_path)}),
    )
    assert found["command"] == ["git", "log", "-1", "a b"]
    assert (found["everySeconds"], found["maxChecks"], found["until"]) == (60.0, 100, {})


def test_watch_a_command_that_cannot_run_fails_the_check(tmp_path: Path) -> None:
    """A command that is not found exits 127, outside the exit codes a check may have: the
    check fails (the runner tries it again, then ends the run with that error); a command
    exiting 1 is an ordinary result."""
    workflow = _workflow("watch")
    node = workflow.node("check")
    assert isinstance(node, ShellNode)
    assert node.retry is not None
    assert node.retry.attempts == 3
    assert 1 in node.allow_exit_codes
    assert 127 not in node.allow_exit_codes
    transition, state, visited = drive(workflow, {"command": ["no-such-command-here"]})
    assert visited == ["setup", "check"]
    assert isinstance(transition, Fail)
    details = state.results["check"].get("details")
    assert isinstance(details, dict)
    assert details["exitCode"] == 127
    assert "no-such-command-here: No such file or directory" in str(details["stderr"])
