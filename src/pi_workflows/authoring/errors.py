"""Errors raised while defining workflows and by workflow code itself.

This module owns the exceptions of the authoring API. It imports nothing else from the
package, so every layer (engine, sources, runner) can catch these by type.
"""

from __future__ import annotations


class WorkflowDefinitionError(ValueError):
    """A workflow graph or one of its nodes is invalid.

    Raised by ``Workflow(...)`` while it validates the definition, before any node runs,
    so a broken workflow fails at load. ``workflow`` is the workflow name (``None`` only
    when the name itself is unusable) and ``node`` the offending node id (``None`` for a
    graph-level problem such as an unusable ``max_steps``). ``problem`` is the bare
    description; ``str(error)`` is one line naming both the workflow and the node.

    ``file`` and ``line`` say where the node, edge or ``Workflow(...)`` call the problem
    concerns was written (``None`` when unknown). The check reports every problem at once:
    the raised error is the first one found, and ``problems`` holds all of them in the
    order they were found (the raised one first), each an error of this type.
    """

    def __init__(
        self,
        problem: str,
        *,
        workflow: str | None,
        node: str | None = None,
        file: str | None = None,
        line: int | None = None,
    ) -> None:
        self.problem = problem
        self.workflow = workflow
        self.node = node
        self.file = file
        self.line = line
        self.problems: tuple[WorkflowDefinitionError, ...] = (self,)
        super().__init__(self._render())

    def _render(self) -> str:
        where = f"workflow {self.workflow!r}" if self.workflow is not None else "workflow"
        if self.node is not None:
            where += f", node {self.node!r}"
        return f"{where}: {self.problem}"


class Rejected(Exception):  # noqa: N818 - public authoring name fixed by DESIGN.md section 4
    """Raised by a node's ``validate`` callback to refuse a submitted output.

    The message goes back verbatim to whoever submitted (the model for an agent step, the
    answering client for a checkpoint); the request stays pending so a corrected output
    can be submitted for the same request. Any other exception raised by ``validate`` is a
    bug in the workflow and fails the node instead.
    """

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class NodeCancelledError(Exception):
    """Raised by ``ctx.cancellation.raise_if_set()`` once the runner has cancelled the node.

    Workflow code may let it propagate (the runner records a cancellation, which never
    routes) or catch it to clean up and re-raise. It is not a node failure.
    """
