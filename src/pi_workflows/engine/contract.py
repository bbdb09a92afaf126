"""The step contract: the text appended to an agent step's prompt.

One wording for every place an agent step is presented (the origin Pi session and a
headless ``pi --mode rpc`` run), so the model always learns the same things: which workflow
and step it is in, the request id, which tools it may use, how to submit, and what output
is expected. The Pi extension implements the tool named here and enforces the tool limit;
keep the names in sync with it. Pure text: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from pi_workflows.authoring import AgentNode, AssistantMessage

WORKFLOW_TOOL: Final = "workflow"
"""The model-facing tool an agent step is completed with."""
SUBMIT_ACTION: Final = "submit"
"""The tool's ``action`` value that submits a step's output."""


def tools_line(allowed_tools: Sequence[str] | None) -> str | None:
    """The contract line that names a step's tool limit (None: the step has no limit).

    The ``workflow`` tool is always allowed, so ``[]`` allows only it."""
    if allowed_tools is None:
        return None
    names = [name for name in dict.fromkeys(allowed_tools) if name != WORKFLOW_TOOL]
    listed = ", ".join(f"`{name}`" for name in names) + " and " if names else ""
    return (
        f"Tools: during this step you may call only {listed}the `{WORKFLOW_TOOL}` tool; "
        "every other tool call is blocked."
    )


def step_contract(
    *,
    workflow: str,
    node_id: str,
    request_id: str,
    expected_output: str | AssistantMessage,
    allowed_tools: Sequence[str] | None = None,
) -> str:
    """The contract text for one agent step request.

    For a JSON step it tells the model to call the ``workflow`` tool with
    ``{"action": "submit", "requestId": ..., "output": ...}``; for an
    ``assistant_message()`` step it says the visible reply is the output. A step with
    ``allowed_tools`` names the tools it may call (``tools_line``).
    """
    lines = [
        "--- Workflow step ---",
        f"Workflow: {workflow}",
        f"Step: {node_id}",
        f"Request: {request_id}",
    ]
    tools = tools_line(allowed_tools)
    if tools is not None:
        lines.append(tools)
    if isinstance(expected_output, AssistantMessage):
        lines += [
            "How to finish: reply with your answer as a normal message. Your visible reply is "
            f"this step's output; do not call the `{WORKFLOW_TOOL}` tool to submit it.",
        ]
    else:
        call = {"action": SUBMIT_ACTION, "requestId": request_id, "output": "<your output>"}
        lines += [
            f"How to finish: call the `{WORKFLOW_TOOL}` tool once with "
            f"{json.dumps(call, ensure_ascii=False)}, where output is a JSON value (not a "
            "string containing JSON).",
            "If the submission is rejected, read the reason, correct the output and submit "
            "again with the same requestId; if the tool says the step is closed, do not submit "
            "it again unless the workflow presents it to you again.",
            "Expected output:",
            expected_output.strip(),
        ]
    return "\n".join(lines)


def agent_prompt(
    *, workflow: str, node_id: str, node: AgentNode, prompt: str, request_id: str
) -> str:
    """The full text sent to the model for an agent step: the prompt, then the contract."""
    contract = step_contract(
        workflow=workflow,
        node_id=node_id,
        request_id=request_id,
        expected_output=node.expected_output,
        allowed_tools=node.allowed_tools,
    )
    return f"{prompt.rstrip()}\n\n{contract}"
