"""The ``Workflow`` class: a named, validated, immutable graph of nodes and routes.

Construction validates the whole definition (see ``validation.py``) and raises
``WorkflowDefinitionError`` naming the workflow and node of the first problem, with every
problem (each at its file and line) in its ``problems``. A built
``Workflow`` never changes; the engine and the runner only read it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from pi_workflows.authoring.contracts import Contract, contract
from pi_workflows.authoring.errors import WorkflowDefinitionError
from pi_workflows.authoring.locations import caller_location
from pi_workflows.authoring.nodes import Node
from pi_workflows.authoring.routing import Route
from pi_workflows.authoring.validation import check_contract, check_definition

DEFAULT_MAX_STEPS = 100
"""How many node executions a run may make unless the workflow says otherwise."""


class Workflow:
    """A workflow definition.

    ``Workflow(name, start, nodes, edges, max_steps=100, input=None)``: ``nodes`` maps node
    ids to nodes, ``edges`` lists at most one ``edge``/``switch`` per source node, and
    ``max_steps`` bounds the node executions of one run (loops included). A node without an
    outgoing edge ends the run with its output. ``input`` (a Pydantic model class or a JSON
    Schema dict) is the run input's typed contract: the server refuses a run whose input
    does not match it before any node runs.
    """

    __slots__ = (
        "_defined_in", "_edges", "_input", "_max_steps", "_name", "_nodes", "_outgoing",
        "_start",
    )  # fmt: skip

    def __init__(
        self,
        name: str,
        start: str,
        nodes: Mapping[str, Node],
        edges: Sequence[Route] = (),
        max_steps: int = DEFAULT_MAX_STEPS,
        *,
        input: object = None,  # the public name (DESIGN.md section 4a), shadowing the builtin
    ) -> None:
        wf, first, checked, routes, limit = check_definition(
            name, start, nodes, edges, max_steps, location=caller_location()
        )
        typed = contract(input, "input")
        problem = check_contract(typed, "input")
        if problem is not None:
            raise WorkflowDefinitionError(problem, workflow=wf)
        self._input: Contract | None = typed
        self._name = wf
        self._start = first
        self._nodes: Mapping[str, Node] = MappingProxyType(checked)
        self._edges = routes
        self._outgoing: Mapping[str, Route] = MappingProxyType(
            {route.source: route for route in routes}
        )
        self._max_steps = limit
        # The file whose top level built this workflow: how a parent's `subworkflow(obj)`
        # finds the source a child run loads (None when built outside a module's code).
        caller = sys._getframe(1).f_globals.get("__file__")
        self._defined_in: str | None = caller if isinstance(caller, str) else None

    @property
    def defined_in(self) -> str | None:
        """The file whose code built this workflow, if known."""
        return self._defined_in

    @property
    def name(self) -> str:
        """The workflow's name (equal to its file's stem when loaded from a file)."""
        return self._name

    @property
    def start(self) -> str:
        """The id of the first node of every run."""
        return self._start

    @property
    def nodes(self) -> Mapping[str, Node]:
        """Node id -> node, in declaration order (read-only)."""
        return self._nodes

    @property
    def edges(self) -> tuple[Route, ...]:
        """Every edge and switch, in declaration order."""
        return self._edges

    @property
    def input_contract(self) -> Contract | None:
        """The typed contract of a run's input (``input=``), if any."""
        return self._input

    @property
    def max_steps(self) -> int:
        """The most node executions one run may make."""
        return self._max_steps

    def node(self, node_id: str) -> Node:
        """The node ``node_id``; raises ``KeyError`` if there is none."""
        return self._nodes[node_id]

    def outgoing(self, node_id: str) -> Route | None:
        """The one route out of ``node_id``, or ``None`` if the node ends the run."""
        return self._outgoing.get(node_id)

    def __repr__(self) -> str:
        return (
            f"Workflow({self._name!r}, start={self._start!r}, nodes={len(self._nodes)}, "
            f"edges={len(self._edges)}, max_steps={self._max_steps})"
        )
