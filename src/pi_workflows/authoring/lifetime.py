"""A run's whole lifetime as a workflow declares it: its run deadline (``Workflow(deadline=)``)
and its cleanup node (``Workflow(on_cancel=NODE)``).

Owns checking the declared values; the server stores the deadline as an absolute time when
a run starts and enforces it, and runs the cleanup node after a cancel or a run deadline
(docs/authoring.md, "Run deadline" and "Cleanup on cancel"). Never imports anything
internal but the node kinds.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import timedelta
from typing import Final

from pi_workflows.authoring.nodes import ActionNode, ComputeNode, Node, ShellNode

MAX_DEADLINE_SECONDS: Final = 366 * 86_400.0
"""The longest run deadline a workflow (or ``run start --deadline``) may set: 366 days."""


def deadline_seconds(value: object) -> float | None:
    """``Workflow(deadline=...)`` as seconds: a ``timedelta`` or a number of seconds,
    positive and at most ``MAX_DEADLINE_SECONDS``; ``None`` (no deadline) stays ``None``.
    Raises ``ValueError`` naming what is wrong otherwise."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= MAX_DEADLINE_SECONDS
    ):
        raise ValueError(
            "deadline must be a timedelta or a number of seconds above 0 and at most 366 days"
            f" (use seconds(...), minutes(...) or timedelta(hours=...)), got {value!r}"
        )
    return float(value)


CLEANUP_DEFAULT_TIMEOUT: Final = 60.0
"""How long a cleanup node may run when it declares no ``timeout=`` of its own (seconds)."""


def cleanup_node(on_cancel: object, nodes: dict[str, Node]) -> tuple[str, Node] | None:
    """``Workflow(on_cancel=NODE)`` checked against ``nodes``: the node id and the node as a
    cleanup runs it (with ``CLEANUP_DEFAULT_TIMEOUT`` when it has no timeout), or None.

    A cleanup node is a ``compute``, ``action`` or ``shell`` node of ``nodes`` that is not in
    the graph: no edge leads to it or leaves it, it is not the start, and it has no retry
    policy (a cleanup runs once per cancel). Raises ``ValueError`` naming what is wrong."""
    if on_cancel is None:
        return None
    if not isinstance(on_cancel, str) or on_cancel not in nodes:
        raise ValueError(
            f"on_cancel must name a node of the workflow (its cleanup node), got {on_cancel!r}"
        )
    node = nodes[on_cancel]
    if not isinstance(node, ComputeNode | ActionNode | ShellNode):
        raise ValueError(
            f"on_cancel node {on_cancel!r} must be a compute, action or shell node: a cleanup"
            " runs in a runner in bounded time, it cannot wait"
        )
    if node.retry is not None:
        raise ValueError(
            f"on_cancel node {on_cancel!r} cannot declare retry: a cleanup runs once per cancel"
        )
    if node.timeout is None:
        node = dataclasses.replace(node, timeout=CLEANUP_DEFAULT_TIMEOUT)
    return on_cancel, node
