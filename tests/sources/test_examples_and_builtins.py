"""The example workflows and the built-in ``demo``: each loads, validates and runs.

Runs use a small in-test driver that executes callbacks the way the runner will (through
``evaluate``/``invoke`` and the engine's result helpers) and answers interactive steps from
a table (an answer may be a function of the node's ``ctx``), so the examples are proven end
to end without a server or a model.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from pi_workflows.authoring import (
    ActionContext,
    ActionNode,
    AgentNode,
    CancellationSignal,
    CheckpointNode,
    ComputeNode,
    EffectKind,
    FanOutNode,
    HumanDecisionNode,
    NodeKind,
    NotifyNode,
    ShellNode,
    SleepNode,
    SubworkflowNode,
    WaitEventNode,
    Workflow,
    evaluate,
    invoke,
)
from pi_workflows.engine import (
    Complete,
    Fail,
    FailReason,
    GoTo,
    NodeResult,
    RunState,
    Transition,
    advance,
    canonical_json,
    checkpoint_request,
    decision_result,
    first_node,
    notify_result,
    result_from_output,
    shell_result,
    timeout_result,
)
from pi_workflows.protocol import effect_key
from pi_workflows.sources import BUILTINS_DIR, LoadedWorkflow, load, resolve

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workflows"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.workflow.py"))
TIMEOUT = object()
"""An answer that lets the node's deadline pass instead."""


def _load_example(name: str) -> LoadedWorkflow:
    return load(resolve(str(EXAMPLES / f"{name}.workflow.py"), None))


def _execute(
    workflow: Workflow, node_id: str, ctx: ActionContext, answers: Mapping[str, object]
) -> NodeResult:
    node = workflow.node(node_id)
    answer = answers.get(node_id)
    if callable(answer) and not isinstance(node, FanOutNode):
        answer = answer(ctx)  # an answer made from what the node shows (its prompt, ...)
    if answer is TIMEOUT:
        return timeout_result(node_id, node)
    try:
        match node:
            case ComputeNode() | ActionNode():
                return result_from_output(node_id, asyncio.run(evaluate(node.run, ctx)))
            case NotifyNode():
                return notify_result(node_id, node, asyncio.run(evaluate(node.message, ctx)))
            case ShellNode():
                command = asyncio.run(evaluate(node.command, ctx))
                assert isinstance(command, list | tuple)
                done = subprocess.run(
                    list(command), capture_output=True, text=True, timeout=60, check=False
                )
                return shell_result(node, done.returncode, done.stdout, done.stderr)
            case CheckpointNode():
                checkpoint_request(node_id, asyncio.run(evaluate(node.request, ctx)))
                if node.validate is not None:
                    asyncio.run(invoke(node.validate, answer, ctx))
                return result_from_output(node_id, answer)
            case AgentNode():
                if node.validate is not None:
                    asyncio.run(invoke(node.validate, answer, ctx))
                return result_from_output(node_id, answer)
            case HumanDecisionNode():
                assert isinstance(answer, str)
                return decision_result(node_id, node, answer)
            case SubworkflowNode():  # the child's final output comes from the table
                child_input = None if node.input is None else node.input(ctx)
                canonical_json(child_input)
                return result_from_output(node_id, answer)
            case FanOutNode():  # each child's output: the table's function of its input
                items = asyncio.run(evaluate(node.items, ctx))
                assert isinstance(items, list)
                inputs = [item if node.input is None else node.input(ctx, item) for item in items]
                assert callable(answer)
                children = [
                    {"runId": f"child-{i}", "outcome": "ok", "output": answer(child), "error": None}
                    for i, child in enumerate(inputs)
                ]
                return result_from_output(node_id, children)
            case SleepNode():  # the runner waits durably; here time has simply passed
                return NodeResult.ok({"until": "2026-01-01T00:00:00.000Z", "lateMs": 0})
            case WaitEventNode():
                if node.validate is not None:
                    asyncio.run(invoke(node.validate, answer, ctx))
                return result_from_output(node_id, answer)
    except Exception as exc:  # a failing callback fails the node, as in the runner
        return NodeResult.failed(f"{type(exc).__name__}: {exc}")
    raise AssertionError(f"unhandled node {node_id}")


def drive(
    workflow: Workflow,
    input_value: object,
    answers: Mapping[str, object] | None = None,
    run_id: str = "run-1",
) -> tuple[Transition, RunState, list[str]]:
    """Run ``workflow`` to its end; returns the last transition, state and visited nodes."""
    state, transition = RunState.initial(), first_node(workflow)
    visited: list[str] = []
    while isinstance(transition, GoTo):
        node_id = transition.node_id
        visited.append(node_id)
        visit = state.visit_of(node_id)
        ctx = ActionContext(
            workflow=workflow.name, run_id=run_id, node_id=node_id, attempt_id=f"{node_id}-{visit}",
            visit=visit, input=input_value, outputs=state.outputs,  # type: ignore[arg-type]
            results=state.results, cancellation=CancellationSignal(),
            effect_key=effect_key(run_id, 0, node_id, visit, "example"),
        )  # fmt: skip
        result = _execute(workflow, node_id, ctx, answers or {})
        step = advance(workflow, state, node_id, result)
        state, transition = step.state, step.transition
    return transition, state, visited


def test_there_are_at_least_six_examples() -> None:
    """The examples directory ships at least six workflows."""
    assert len(EXAMPLE_FILES) >= 6


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_every_example_loads_and_validates(path: Path) -> None:
    """Each example loads into a validated workflow named after its file, twice alike."""
    first = load(resolve(str(path), None))
    second = load(resolve(str(path), None))
    assert f"{first.workflow.name}.workflow.py" == path.name
    assert first.digest == second.digest
    assert first.snapshot["name"] == first.workflow.name


def test_examples_use_every_node_kind_and_both_effect_kinds() -> None:
    """Together the examples exercise every node kind and both effect kinds."""
    kinds: set[NodeKind] = set()
    effects: set[EffectKind] = set()
    for path in EXAMPLE_FILES:
        for node in load(resolve(str(path), None)).workflow.nodes.values():
            kinds.add(node.kind)
            if isinstance(node, ActionNode | ShellNode) and node.effect is not None:
                effects.add(node.effect.kind)
    assert kinds == set(NodeKind)
    assert effects == set(EffectKind)


def test_echo_agent_is_sent_back_until_it_echoes_exactly() -> None:
    """A wrong echo is rejected by ``validate``; the exact text completes the run."""
    workflow = _load_example("echo").workflow
    bad, _, _ = drive(workflow, {"text": "hi"}, {"repeat": {"echo": "hello"}})
    assert isinstance(bad, Fail)
    assert "Rejected" in bad.error
    good, state, _ = drive(workflow, {"text": "hi"}, {"repeat": {"echo": "hi"}})
    assert isinstance(good, Complete)
    assert state.outputs["repeat"] == {"echo": "hi"}


def test_list_files_parses_a_real_listing(tmp_path: Path) -> None:
    """The shell output is parsed into files, directories and suffix counts."""
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "b.txt").write_text("x")
    (tmp_path / "c.py").write_text("x")
    (tmp_path / "sub").mkdir()
    workflow = _load_example("list-files").workflow
    transition, state, visited = drive(workflow, {"dir": str(tmp_path)})
    assert visited == ["list", "parse", "report"]
    assert state.outputs["parse"] == {
        "files": ["a.txt", "b.txt", "c.py"],
        "directories": ["sub"],
        "bySuffix": {"txt": 2, "py": 1},
    }
    assert transition == Complete(
        {"message": "3 files and 1 directories", "kind": "final"}, "report"
    )


def test_list_files_routes_a_failing_command_to_an_explanation(tmp_path: Path) -> None:
    """A missing directory fails the shell node; ``$result.outcome`` routes it onward."""
    workflow = _load_example("list-files").workflow
    transition, _, visited = drive(workflow, {"dir": str(tmp_path / "missing")})
    assert visited == ["list", "explain"]
    assert isinstance(transition, Complete)
    assert "Could not list the directory: the command exited with code" in str(transition.output)


def test_countdown_loops_until_its_switch_ends_it() -> None:
    """The loop visits ``tick`` once per count and stops through the switch."""
    workflow = _load_example("countdown").workflow
    transition, state, visited = drive(workflow, {"from": 5})
    assert visited == ["tick"] * 6 + ["finish"]
    assert transition == Complete({"ticks": 6}, "finish")
    assert state.steps == 7


def test_countdown_beyond_max_steps_fails_instead_of_spinning() -> None:
    """A count larger than ``max_steps`` allows ends the run with ``maxStepsExceeded``."""
    workflow = _load_example("countdown").workflow
    transition, state, _ = drive(workflow, {"from": 100})
    assert isinstance(transition, Fail)
    assert transition.reason is FailReason.MAX_STEPS_EXCEEDED
    assert state.steps == workflow.max_steps


def test_feedback_checkpoint_validates_the_answer() -> None:
    """An empty answer is rejected; a real one is recorded."""
    workflow = _load_example("feedback").workflow
    rejected, _, _ = drive(workflow, None, {"ask": {"text": "  "}})
    assert isinstance(rejected, Fail)
    done, _, _ = drive(workflow, None, {"ask": {"text": "Went well"}})
    assert done == Complete({"feedback": "Went well", "words": 2}, "record")


def test_release_approval_takes_its_default_when_nobody_answers() -> None:
    """The decision's timeout default is ``hold``, and the message says nobody answered."""
    workflow = _load_example("release-approval").workflow
    transition, state, visited = drive(workflow, {"version": "1.2"}, {"approve": TIMEOUT})
    assert visited == ["approve", "held"]
    assert state.outputs["approve"] == {"choice": "hold", "decidedBy": "timeout"}
    assert isinstance(transition, Complete)
    assert "nobody answered in time" in str(transition.output)
    shipped, _, _ = drive(workflow, {"version": "1.2"}, {"approve": "ship"})
    assert shipped == Complete({"message": "The release was approved.", "kind": "final"}, "shipped")


def test_open_ticket_passes_the_effect_key_so_a_retry_finds_the_same_ticket(
    tmp_path: Path,
) -> None:
    """Running the action again for the same visit reads back the ticket it created."""
    loaded = _load_example("open-ticket")
    assert list(loaded.mounted) == [str(EXAMPLES / "ticket_outbox.py")]
    payload = {"title": "Fix the build", "outbox": str(tmp_path / "outbox")}
    _, first, _ = drive(loaded.workflow, payload)
    _, retry, _ = drive(loaded.workflow, payload)
    _, other_run, _ = drive(loaded.workflow, payload, run_id="run-2")
    opened, again, other = first.outputs["open"], retry.outputs["open"], other_run.outputs["open"]
    assert isinstance(opened, dict)
    assert isinstance(again, dict)
    assert isinstance(other, dict)
    assert (opened["created"], again["created"], other["created"]) == (True, False, True)
    assert opened["id"] == again["id"] != other["id"]
    assert len(list((tmp_path / "outbox").iterdir())) == 2


def test_triage_ignore_route_ends_with_the_models_reply() -> None:
    """A ``decision`` routes by ``$.route``; the assistant-message reply is the output."""
    workflow = _load_example("triage").workflow
    answers = {"classify": {"route": "ignore", "reason": "fine"}, "summary": "Nothing to do."}
    transition, _, visited = drive(workflow, {"items": ["a"]}, answers)
    assert visited == ["collect", "classify", "summary"]
    assert transition == Complete("Nothing to do.", "summary")
    invalid = {"classify": {"route": "maybe"}}
    failed, _, _ = drive(workflow, {"items": []}, invalid)
    assert isinstance(failed, Fail)


def test_demo_builtin_needs_no_model_and_has_the_promised_shape() -> None:
    """``builtin:demo``: computes, a notify, a question checkpoint, a harmless idempotent
    shell command on this Python, ending in a compute with a JSON output."""
    loaded = load(resolve("builtin:demo", None))
    workflow = loaded.workflow
    assert loaded.ref.path.parent == BUILTINS_DIR
    kinds = [node.kind for node in workflow.nodes.values()]
    assert kinds.count(NodeKind.COMPUTE) >= 3
    assert NodeKind.NOTIFY in kinds
    assert NodeKind.AGENT not in kinds
    assert NodeKind.HUMAN_DECISION not in kinds
    (ask,) = [n for n in workflow.nodes.values() if isinstance(n, CheckpointNode)]
    assert isinstance(ask.request, dict)
    assert "question" in ask.request
    (command,) = [n for n in workflow.nodes.values() if isinstance(n, ShellNode)]
    assert command.effect is not None
    assert command.effect.kind is EffectKind.IDEMPOTENT
    assert isinstance(command.command, tuple)
    assert command.command[0] == sys.executable
    last = [node_id for node_id in workflow.nodes if workflow.outgoing(node_id) is None]
    assert len(last) == 1
    assert workflow.node(last[0]).kind is NodeKind.COMPUTE


def test_demo_builtin_runs_to_a_json_report() -> None:
    """Driven end to end with one checkpoint answer, the demo completes with its report."""
    workflow = load(resolve("builtin:demo", None)).workflow
    transition, state, _ = drive(workflow, {"items": [3, 1, 2]}, {"ask": "all good"})
    assert isinstance(transition, Complete)
    assert transition.output == {
        "greeting": "hello",
        "sorted": [1, 2, 3],
        "total": 6,
        "python": ".".join(str(part) for part in sys.version_info[:3]),
        "answer": "all good",
    }
    assert state.outputs["announce"] == {
        "message": "Demo: sorted 3 numbers, total 6.",
        "kind": "progress",
    }


def test_ci_watch_polls_while_pending_and_ends_on_a_verdict(tmp_path: Path) -> None:
    """``pending`` loops through the sleep back to the check; ``passed`` ends the run; a
    command that keeps failing ends it ``broken``; pending past the deadline, ``expired``."""
    flag = tmp_path / "status"
    flag.write_text("pending")
    workflow = _load_example("ci-watch").workflow
    transition, _, visited = drive(workflow, {"command": ["cat", str(flag)]})
    assert isinstance(transition, Fail)  # always pending: the loop runs into max_steps
    assert transition.reason is FailReason.MAX_STEPS_EXCEEDED
    assert visited[:5] == ["begin", "check", "judge", "pause", "check"]
    flag.write_text("passed")
    transition, _, visited = drive(workflow, {"command": ["cat", str(flag)]})
    assert visited == ["begin", "check", "judge", "passed"]
    assert transition == Complete({"message": "CI passed.", "kind": "final"}, "passed")
    transition, _, visited = drive(workflow, {"command": ["false"]})
    assert visited == ["begin", "check", "broken"]  # tries are the runner's; here one fails
    assert isinstance(transition, Complete)
    assert "kept failing" in str(transition.output)
    node = workflow.node("check")
    assert isinstance(node, ShellNode)
    assert node.retry is not None
    assert node.retry.attempts == 3
    flag.write_text("pending")
    transition, _, visited = drive(workflow, {"command": ["cat", str(flag)], "giveUpMinutes": 0})
    assert visited == ["begin", "check", "judge", "expired"]  # pending past the deadline
    assert transition == Complete(
        {"message": "CI gave no verdict within an hour.", "kind": "final"}, "expired"
    )


def test_deploy_gate_takes_the_event_of_its_version_only() -> None:
    """The event's data is the output; another version is refused by ``validate``."""
    workflow = _load_example("deploy-gate").workflow
    done, state, _ = drive(workflow, {"version": "1.4"}, {"deployed": {"version": "1.4"}})
    assert done == Complete({"message": "Deployed 1.4: ok.", "kind": "final"}, "done")
    assert state.outputs["deployed"] == {"version": "1.4"}
    wrong, _, _ = drive(workflow, {"version": "1.4"}, {"deployed": {"version": "2.0"}})
    assert isinstance(wrong, Fail)
    assert "waits for version '1.4'" in wrong.error
    late, _, visited = drive(workflow, {"version": "1.4"}, {"deployed": TIMEOUT})
    assert visited == ["announce", "deployed", "late"]
    assert isinstance(late, Complete)


def test_review_files_fans_out_one_review_per_file_and_summarizes_them(tmp_path: Path) -> None:
    """Each file becomes a child's input in order; the summary's prompt lists every review;
    the child workflow (a Workflow object of the helper module) reads the file it is given."""
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    loaded = _load_example("review-files")
    assert loaded.child_specs["review"].endswith("review_file.py::review_file")

    def review(child: object) -> object:
        assert isinstance(child, dict)
        return {"verdict": "ok", "issues": [], "path": child["path"]}

    answers = {"review": review, "summary": {"summary": "all good"}}
    transition, state, visited = drive(loaded.workflow, {"dir": str(tmp_path)}, answers)
    assert visited == ["review", "summary"]
    assert isinstance(transition, Complete)
    reviews = state.outputs["review"]
    assert isinstance(reviews, list)
    assert [child["output"]["path"] for child in reviews] == [
        str(tmp_path / "a.py"),
        str(tmp_path / "b.py"),
    ]
    child = load(resolve(loaded.child_specs["review"], None)).workflow
    _, child_state, child_visited = drive(
        child, {"path": str(tmp_path / "a.py")}, {"review": {"verdict": "fix", "issues": ["x"]}}
    )
    assert child_visited == ["read", "review"]
    assert child_state.outputs["read"] == {"path": str(tmp_path / "a.py"), "text": "x = 1\n"}


def test_release_runs_the_deploy_gate_beside_it_as_a_child() -> None:
    """The relative child path is the file beside the parent; its output is the node's."""
    loaded = _load_example("release")
    assert loaded.child_specs["deploy"] == str(EXAMPLES.resolve() / "deploy-gate.workflow.py")
    answers = {"approve": "ship", "deploy": {"message": "Deployed 1.4.2: ok.", "kind": "final"}}
    transition, _, visited = drive(loaded.workflow, {"version": "1.4.2"}, answers)
    assert visited == ["approve", "deploy", "done"]
    assert transition == Complete(
        {"message": "Released: Deployed 1.4.2: ok.", "kind": "final"}, "done"
    )
