"""Bounds on the values the runner proposes: outputs, requests and error lines.

Runs in the runner child; never opens the database. A value must fit in a runner-protocol
frame together with its copies (see ``limits.MAX_VALUE_BYTES``), so an over-large output
fails its node with a clear message instead of breaking the channel, and every error the
runner proposes is one bounded line.
"""

from __future__ import annotations

from pi_workflows.engine import NodeResult, canonical_json
from pi_workflows.runner.errors import one_line
from pi_workflows.runner.limits import MAX_VALUE_BYTES


def size_problem(what: str, value: object) -> str | None:
    """A message if ``value`` (plain JSON) is too large to propose, else ``None``."""
    size = len(canonical_json(value))
    if size > MAX_VALUE_BYTES:
        return f"{what} is too large: {size} bytes of JSON (the limit is {MAX_VALUE_BYTES})"
    return None


def bounded(node_id: str, result: NodeResult) -> NodeResult:
    """``result`` with its error made one line, or failed if its output is too large."""
    if result.error is not None:
        line = one_line(result.error)
        if line == result.error:
            return result
        return NodeResult(
            result.outcome, None, line, result.details, result.cause, result.cause_classes
        )
    problem = size_problem(f"the output of node {node_id!r}", result.output)
    return result if problem is None else NodeResult.failed(problem)
