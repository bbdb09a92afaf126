"""Node constructors, effects, durations and the public re-exports of the authoring API."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib

import pytest

import pi_workflows
from pi_workflows.authoring import (
    AGENT_DEFAULT_TIMEOUT,
    ActionNode,
    AgentNode,
    AssistantMessage,
    CheckpointNode,
    Choice,
    ComputeNode,
    EffectKind,
    HumanDecisionNode,
    NodeContext,
    NodeKind,
    NotifyKind,
    NotifyNode,
    OnTimeout,
    Rejected,
    ShellNode,
    action,
    agent,
    assistant_message,
    checkpoint,
    choice,
    compute,
    decision,
    human_decision,
    idempotent_effect,
    invoke,
    manual_effect,
    minutes,
    notify,
    seconds,
    shell,
    switch,
)


def _ctx() -> NodeContext:
    from pi_workflows.authoring import CancellationSignal

    return NodeContext(
        workflow="w",
        run_id="r",
        node_id="n",
        attempt_id="a",
        visit=1,
        input=None,
        outputs={},
        results={},
        cancellation=CancellationSignal(),
    )


def test_every_constructor_builds_a_frozen_node_with_its_kind() -> None:
    """Each constructor returns a frozen dataclass whose ``kind`` names the primitive."""
    effect = idempotent_effect("read")
    built = [
        (compute(lambda ctx: 1), ComputeNode, NodeKind.COMPUTE),
        (action(lambda ctx: 1, effect=effect), ActionNode, NodeKind.ACTION),
        (shell(["true"], effect=effect), ShellNode, NodeKind.SHELL),
        (notify("hi"), NotifyNode, NodeKind.NOTIFY),
        (agent("p", "x"), AgentNode, NodeKind.AGENT),
        (checkpoint("q?"), CheckpointNode, NodeKind.CHECKPOINT),
        (human_decision("t", [choice("a")]), HumanDecisionNode, NodeKind.HUMAN_DECISION),
    ]
    for node, cls, kind in built:
        assert isinstance(node, cls)
        assert node.kind is kind
        with pytest.raises(dataclasses.FrozenInstanceError):
            node.kind = NodeKind.COMPUTE  # type: ignore[misc]


def test_durations_are_seconds_as_floats() -> None:
    """``minutes`` and ``seconds`` return float seconds for timeouts."""
    assert minutes(10) == 600.0
    assert seconds(1.5) == 1.5
    assert isinstance(seconds(3), float)


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan")])
def test_durations_refuse_non_positive_or_non_finite_values(bad: float) -> None:
    """A zero, negative or non-finite duration is a ValueError at the call."""
    with pytest.raises(ValueError, match="positive finite"):
        minutes(bad)


def test_duration_refuses_booleans() -> None:
    """``seconds(True)`` is a TypeError, not one second."""
    with pytest.raises(TypeError):
        seconds(True)


def test_agent_timeout_defaults_to_fifteen_minutes_and_none_disables_it() -> None:
    """An agent's deadline is 15 minutes unless given; ``None`` turns it off."""
    assert agent("p", "x").timeout == AGENT_DEFAULT_TIMEOUT == 900.0
    assert agent("p", "x", timeout=None).timeout is None


def test_assistant_message_marks_the_expected_output() -> None:
    """``assistant_message()`` is the marker for a reply-as-output agent step."""
    node = agent("p", assistant_message())
    assert isinstance(node.expected_output, AssistantMessage)


def test_effect_declarations_carry_their_kind_and_type() -> None:
    """``idempotent_effect`` and ``manual_effect`` differ only in kind."""
    assert idempotent_effect("git-read").kind is EffectKind.IDEMPOTENT
    assert manual_effect("send-mail").kind is EffectKind.MANUAL
    assert manual_effect("send-mail").type == "send-mail"


@pytest.mark.parametrize("bad", ["", "has space", "-leading", "x" * 129])
def test_effect_type_must_be_a_short_label(bad: str) -> None:
    """A malformed effect type is refused when declared."""
    with pytest.raises(ValueError, match="effect type"):
        idempotent_effect(bad)


def test_notify_kind_is_progress_or_final() -> None:
    """``notify`` accepts only the two documented kinds."""
    assert notify("m").notify_kind is NotifyKind.PROGRESS
    assert notify("m", kind="final").notify_kind is NotifyKind.FINAL
    with pytest.raises(ValueError, match="'progress' or 'final'"):
        notify("m", kind="loud")


def test_choice_label_defaults_to_its_id() -> None:
    """``choice("yes")`` is labelled "yes"."""
    assert choice("yes") == Choice("yes", "yes", None)
    assert choice("no", "Skip", "Do nothing").label == "Skip"


def test_human_decision_on_timeout_is_a_duration_and_choice_pair() -> None:
    """``on_timeout=(duration, choice)`` becomes an ``OnTimeout``; anything else is refused."""
    node = human_decision("t", [choice("a"), choice("b")], on_timeout=(minutes(1), "b"))
    assert node.on_timeout == OnTimeout(60.0, "b")
    assert node.timeout == 60.0
    with pytest.raises(TypeError, match="on_timeout"):
        human_decision("t", [choice("a")], on_timeout=60.0)  # type: ignore[arg-type]


def test_shell_keeps_an_immutable_copy_of_its_command() -> None:
    """A command list is copied into a tuple, so later changes to the list do not leak in."""
    argv = ["echo", "hi"]
    node = shell(argv, effect=idempotent_effect("e"))
    argv.append("mutated")
    assert node.command == ("echo", "hi")


def test_shell_allow_exit_codes_become_a_frozenset() -> None:
    """Allowed exit codes are stored as a set; zero is the default."""
    assert shell(["x"], effect=idempotent_effect("e")).allow_exit_codes == frozenset({0})
    node = shell(["x"], effect=idempotent_effect("e"), allow_exit_codes=[0, 1])
    assert node.allow_exit_codes == frozenset({0, 1})


def test_shell_env_keeps_an_immutable_sorted_copy_and_a_callback_as_it_is() -> None:
    """`env` is copied into sorted pairs (a later change to the dict does not leak in, and
    the node stays hashable); a callback is kept; no `env` is None, as before."""
    added: dict[str, str | None] = {"B": "2", "A": None}
    node = shell(["x"], effect=idempotent_effect("e"), env=added)
    added["C"] = "3"
    assert node.env == (("A", None), ("B", "2"))
    assert hash(node)

    def callback(ctx: object) -> dict[str, str]:
        return {}

    assert shell(["x"], effect=idempotent_effect("e"), env=callback).env is callback
    assert shell(["x"], effect=idempotent_effect("e")).env is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (["A=1"], "env must be a mapping of variable names to strings, got list"),
        ({"1A": "x"}, "env has '1A', which is not a variable name"),
        ({"A B": "x"}, "env has 'A B', which is not a variable name"),
        ({"A": 1}, "env['A'] must be a string without NUL (or None to remove it)"),
        ({"A": "x\0y"}, "env['A'] must be a string without NUL"),
    ],
)
def test_a_bad_shell_env_is_refused_when_the_node_is_made(env: object, message: str) -> None:
    """A mapping that is not names to strings (or None) is a TypeError saying what is wrong."""
    with pytest.raises(TypeError) as refused:
        shell(["x"], effect=idempotent_effect("e"), env=env)  # type: ignore[arg-type]
    assert message in str(refused.value)


def test_switch_cases_must_be_a_mapping() -> None:
    """A list of cases is a TypeError naming the source node."""
    with pytest.raises(TypeError, match="after 'a'"):
        switch("a", "$.x", [("x", "b")])  # type: ignore[arg-type]


def test_decision_accepts_a_declared_route_and_rejects_others() -> None:
    """The compiled validate accepts a declared route and rejects anything else."""
    node = decision("Pick", {"fix": "needs work", "ignore": "fine"})
    assert node.kind is NodeKind.AGENT
    assert node.route_field == "route"
    assert node.routes == ("fix", "ignore")
    assert isinstance(node.expected_output, str)
    assert '"fix"' in node.expected_output
    assert "needs work" in node.expected_output
    assert node.validate is not None
    asyncio.run(invoke(node.validate, {"route": "fix", "reason": "x"}, _ctx()))
    with pytest.raises(Rejected, match='"route" is one of "fix", "ignore"; got "maybe"'):
        asyncio.run(invoke(node.validate, {"route": "maybe"}, _ctx()))
    with pytest.raises(Rejected, match="not a JSON object"):
        asyncio.run(invoke(node.validate, "fix", _ctx()))


def test_decision_runs_the_authors_validate_after_the_route_check() -> None:
    """A user ``validate`` (even async) runs once the route is known to be declared."""
    seen: list[object] = []

    async def extra(output: object, ctx: NodeContext) -> None:
        seen.append(output)
        raise Rejected("give a longer reason")

    node = decision("Pick", ["a", "b"], field="pick", validate=extra)
    assert node.validate is not None
    with pytest.raises(Rejected, match="longer reason"):
        asyncio.run(invoke(node.validate, {"pick": "a"}, _ctx()))
    assert seen == [{"pick": "a"}]


def test_package_root_reexports_the_authoring_api() -> None:
    """Every name in ``pi_workflows.__all__`` exists, and the DESIGN names are there."""
    for name in pi_workflows.__all__:
        assert hasattr(pi_workflows, name), name
    design_names = {
        "Workflow", "agent", "checkpoint", "compute", "action", "shell", "notify",
        "human_decision", "choice", "edge", "switch", "idempotent_effect", "manual_effect",
        "Rejected", "minutes", "seconds", "decision", "assistant_message", "__version__",
    }  # fmt: skip
    assert design_names <= set(pi_workflows.__all__)
    authoring = importlib.import_module("pi_workflows.authoring")
    for name in authoring.__all__:
        assert hasattr(authoring, name), name
