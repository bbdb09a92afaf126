"""The agent step contract: one wording for Pi sessions and headless runs."""

from __future__ import annotations

from pi_workflows.authoring import agent, assistant_message
from pi_workflows.engine import SUBMIT_ACTION, WORKFLOW_TOOL, agent_prompt, step_contract


def test_contract_names_workflow_step_request_submission_and_expected_output() -> None:
    """A JSON step's contract says where it is, how to submit and what to submit."""
    text = step_contract(
        workflow="triage",
        node_id="classify",
        request_id="req-7",
        expected_output='{"route": "fix" or "ignore"}',
    )
    assert "Workflow: triage" in text
    assert "Step: classify" in text
    assert "Request: req-7" in text
    assert f"`{WORKFLOW_TOOL}` tool" in text
    assert f'"action": "{SUBMIT_ACTION}"' in text
    assert '"requestId": "req-7"' in text
    assert text.endswith('Expected output:\n{"route": "fix" or "ignore"}')
    assert "rejected" in text


def test_assistant_message_contract_says_the_reply_is_the_output() -> None:
    """An assistant-message step is finished by replying, not by the tool."""
    text = step_contract(
        workflow="triage",
        node_id="summary",
        request_id="req-8",
        expected_output=assistant_message(),
    )
    assert "Request: req-8" in text
    assert "Your visible reply is this step's output" in text
    assert "do not call the `workflow` tool" in text
    assert "Expected output" not in text


def test_agent_prompt_puts_the_prompt_first_then_the_contract() -> None:
    """The full text is the author's prompt, a blank line, then the contract."""
    node = agent("Classify the items.", "a JSON object")
    text = agent_prompt(
        workflow="triage", node_id="classify", node=node, prompt="Classify the items.\n",
        request_id="r1",
    )  # fmt: skip
    assert text.startswith("Classify the items.\n\n--- Workflow step ---\n")
    assert text.endswith("Expected output:\na JSON object")


def test_contract_is_deterministic() -> None:
    """The same request always gets the same text."""
    make = lambda: step_contract(  # noqa: E731
        workflow="w", node_id="n", request_id="r", expected_output="x"
    )
    assert make() == make()


def test_a_step_without_allowed_tools_names_no_tool_limit() -> None:
    """Without ``allowed_tools`` the contract has no tools line."""
    text = step_contract(workflow="w", node_id="n", request_id="r", expected_output="x")
    assert "Tools:" not in text


def test_allowed_tools_are_named_with_the_workflow_tool_after_the_request_line() -> None:
    """A limited step lists its tools (``workflow`` always, named once, last) right after
    the request line, and says every other call is blocked."""
    text = step_contract(
        workflow="w", node_id="n", request_id="r", expected_output="x",
        allowed_tools=["read", "grep", "read", "workflow"],
    )  # fmt: skip
    lines = text.splitlines()
    assert lines[lines.index("Request: r") + 1] == (
        "Tools: during this step you may call only `read`, `grep` and the `workflow` tool; "
        "every other tool call is blocked."
    )


def test_an_empty_allowed_tools_list_allows_only_the_workflow_tool() -> None:
    """``allowed_tools=[]`` names only the ``workflow`` tool, also for a reply step."""
    text = step_contract(
        workflow="w", node_id="n", request_id="r", expected_output=assistant_message(),
        allowed_tools=[],
    )  # fmt: skip
    assert (
        "Tools: during this step you may call only the `workflow` tool; every other tool call"
        " is blocked." in text
    )


def test_agent_prompt_carries_the_nodes_tool_limit() -> None:
    """``agent_prompt`` renders the node's own ``allowed_tools``."""
    node = agent("Read it.", "a JSON object", allowed_tools=["read"])
    text = agent_prompt(workflow="w", node_id="n", node=node, prompt="Read it.", request_id="r")
    assert "you may call only `read` and the `workflow` tool" in text


def test_the_contract_says_not_to_submit_a_closed_step_again() -> None:
    """A JSON step's contract tells the model not to retry a step the tool says is closed."""
    text = step_contract(workflow="w", node_id="n", request_id="r", expected_output="x")
    assert "if the tool says the step is closed, do not submit it again" in text
