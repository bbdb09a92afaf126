"""Result helpers: how outputs, commands, answers and deadlines become ``NodeResult``s."""

from __future__ import annotations

import pytest

from pi_workflows.authoring import (
    Outcome,
    checkpoint,
    choice,
    compute,
    human_decision,
    idempotent_effect,
    minutes,
    notify,
    seconds,
    shell,
)
from pi_workflows.engine import (
    NodeResult,
    NodeValueError,
    NotJsonError,
    checkpoint_request,
    decision_result,
    notify_result,
    require_text,
    result_from_output,
    shell_result,
    timeout_result,
)


def test_non_json_output_fails_the_node_with_a_clear_error() -> None:
    """A set inside an output fails the node naming the node and the location."""
    result = result_from_output("collect", {"items": [1, {2, 3}]})
    assert result.outcome is Outcome.FAILED
    assert result.error == (
        "the output of node 'collect' is not JSON: $.items[1] is a set, not a JSON value"
    )


def test_json_output_becomes_an_ok_result() -> None:
    """A plain JSON output is accepted unchanged."""
    assert result_from_output("a", {"x": [1, None]}) == NodeResult.ok({"x": [1, None]})


def test_node_result_refuses_non_json_and_inconsistent_fields() -> None:
    """``NodeResult`` keeps its invariants: JSON output, an error only when not ok."""
    with pytest.raises(NotJsonError, match=r"the node output is not JSON: \$ is a tuple"):
        NodeResult.ok((1, 2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs an error message"):
        NodeResult(Outcome.FAILED)
    with pytest.raises(ValueError, match="an ok result has no error"):
        NodeResult(Outcome.OK, 1, "oops")
    with pytest.raises(ValueError, match="has no output"):
        NodeResult(Outcome.FAILED, 1, "oops")


def test_shell_exit_code_zero_is_ok_with_the_documented_output() -> None:
    """A clean exit gives ``{"exitCode", "stdout", "stderr"}``."""
    node = shell(["true"], effect=idempotent_effect("read"))
    result = shell_result(node, 0, "out\n", "")
    assert result == NodeResult.ok({"exitCode": 0, "stdout": "out\n", "stderr": ""})


def test_shell_disallowed_exit_code_fails_with_details() -> None:
    """A non-zero exit fails unless allowed; the output goes into ``details``."""
    node = shell(["grep"], effect=idempotent_effect("read"), allow_exit_codes=[0, 1])
    assert shell_result(node, 1, "", "").outcome is Outcome.OK
    failed = shell_result(node, 2, "", "bad pattern")
    assert failed.outcome is Outcome.FAILED
    assert failed.error == "the command exited with code 2 (allowed: 0, 1)"
    assert failed.record()["details"] == {"exitCode": 2, "stdout": "", "stderr": "bad pattern"}


def test_shell_killed_by_signal_fails() -> None:
    """A negative exit code (killed by a signal) fails the node."""
    node = shell(["sleep"], effect=idempotent_effect("read"))
    assert shell_result(node, -9, "", "").error == "the command was killed by signal 9"


def test_decision_answer_must_be_a_declared_choice() -> None:
    """A person's answer becomes ``{"choice", "decidedBy"}``; an unknown choice is refused."""
    node = human_decision("Go?", [choice("yes"), choice("no")])
    assert decision_result("d", node, "yes") == NodeResult.ok(
        {"choice": "yes", "decidedBy": "person"}
    )
    with pytest.raises(NodeValueError, match="'maybe' is not one of the declared choices"):
        decision_result("d", node, "maybe")
    with pytest.raises(NodeValueError, match="not a human_decision"):
        decision_result("c", compute(lambda ctx: None), "yes")


def test_decision_timeout_takes_the_default_choice() -> None:
    """With ``on_timeout`` the deadline picks the default choice as an ok result."""
    node = human_decision("Go?", [choice("yes"), choice("no")], on_timeout=(minutes(5), "no"))
    assert timeout_result("d", node) == NodeResult.ok({"choice": "no", "decidedBy": "timeout"})


def test_other_timeouts_are_timed_out_results_naming_the_limit() -> None:
    """Any other node's deadline gives a ``timed_out`` result."""
    result = timeout_result("c", compute(lambda ctx: None, timeout=minutes(2)))
    assert result.outcome is Outcome.TIMED_OUT
    assert result.error == "node 'c' produced no result within 2 minutes"
    assert timeout_result("c", checkpoint("q", timeout=seconds(1.5))).error == (
        "node 'c' produced no result within 1.5 seconds"
    )


def test_notify_result_carries_message_and_kind() -> None:
    """A notify output is ``{"message", "kind"}``; a non-text message fails the node."""
    node = notify("x", kind="final")
    assert notify_result("n", node, "Done") == NodeResult.ok({"message": "Done", "kind": "final"})
    assert notify_result("n", node, 3).outcome is Outcome.FAILED


def test_checkpoint_request_is_normalised_to_a_question_object() -> None:
    """A string becomes ``{"question": ...}``; other shapes are refused."""
    assert checkpoint_request("c", "Why?") == {"question": "Why?"}
    assert checkpoint_request("c", {"question": "Why?", "hint": "x"}) == {
        "question": "Why?",
        "hint": "x",
    }
    with pytest.raises(NodeValueError, match='"question"'):
        checkpoint_request("c", {"ask": "Why?"})
    with pytest.raises(NodeValueError, match="not JSON"):
        checkpoint_request("c", {"question": "Why?", "when": {1, 2}})


def test_require_text_accepts_only_non_empty_strings() -> None:
    """Evaluated prompts and titles must be text."""
    assert require_text("a", "prompt", "Hi") == "Hi"
    with pytest.raises(NodeValueError, match="prompt must be non-empty text, got dict"):
        require_text("a", "prompt", {})
