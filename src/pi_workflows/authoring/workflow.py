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
from pi_workflows.authoring.lifetime import cleanup_node, deadline_seconds
from pi_workflows.authoring.locations import caller_location
from pi_workflows.authoring.nodes import ComputeNode, Node
from pi_workflows.authoring.routing import Route
from pi_workflows.authoring.settings import SettingsDecl, declare
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
    does not match it before any node runs. ``settings`` (a Pydantic model class or a JSON
    Schema dict whose every field has a default) declares the run's live settings
    (``ctx.settings``), which ``settings_changed_by`` (``"person"``, ``"model"`` or both)
    may change with JSON Patch while the run goes on (docs/authoring.md, "Settings").
    ``deadline`` (a ``timedelta`` or seconds) bounds the whole run, its waits and its
    children: when it passes the run ends ``timed_out`` and its tree is cancelled
    (docs/authoring.md, "Run deadline"). ``on_cancel`` names a node of ``nodes`` outside the
    graph (no edge to or from it) that a runner runs once after a cancel or a run deadline,
    with ``ctx.cancel_reason`` (docs/authoring.md, "Cleanup on cancel").
    """

    __slots__ = (
        "_deadline", "_defined_in", "_edges", "_input", "_max_steps", "_name", "_nodes",
        "_on_cancel", "_outgoing", "_settings", "_start",
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
        settings: object = None,
        settings_changed_by: object = ("person",),
        deadline: object = None,
        on_cancel: object = None,
    ) -> None:
        location = caller_location()
        graph = nodes
        if isinstance(on_cancel, str) and isinstance(nodes, Mapping) and on_cancel in nodes:
            # The cleanup node is outside the graph: checked alone, as a graph of one node.
            graph = {k: v for k, v in nodes.items() if k != on_cancel}
            for route in edges if isinstance(edges, Sequence) else ():
                ends = (getattr(route, "source", None), *getattr(route, "targets", tuple)())
                if on_cancel in ends:
                    raise WorkflowDefinitionError(
                        f"node {on_cancel!r} is the on_cancel cleanup node, outside the graph:"
                        " no edge may lead to it or leave it (remove that edge)",
                        workflow=name if isinstance(name, str) else None,
                    )
            check_definition(name, on_cancel, {on_cancel: nodes[on_cancel]}, (), 1,
                             location=location)  # fmt: skip
        wf, first, checked, routes, limit = check_definition(
            name, start, graph, edges, max_steps, location=location
        )
        try:
            cleanup = cleanup_node(on_cancel, {**checked, **dict(nodes)} if on_cancel else checked)
        except ValueError as exc:
            raise WorkflowDefinitionError(str(exc), workflow=wf) from None
        self._on_cancel: str | None = None
        if cleanup is not None:
            self._on_cancel = cleanup[0]
            checked = {**checked, cleanup[0]: cleanup[1]}
        typed = contract(input, "input")
        problem = check_contract(typed, "input")
        if problem is not None:
            raise WorkflowDefinitionError(problem, workflow=wf)
        self._input: Contract | None = typed
        try:
            self._deadline = deadline_seconds(deadline)
        except ValueError as exc:
            raise WorkflowDefinitionError(str(exc), workflow=wf) from None
        declared = declare(settings, settings_changed_by)
        if declared is not None and declared.problem is not None:
            raise WorkflowDefinitionError(declared.problem, workflow=wf)
        if declared is None:
            for node_id, node in checked.items():
                if isinstance(node, ComputeNode) and node.settings_route:
                    raise WorkflowDefinitionError(
                        "settings_route needs the workflow's settings: add Workflow(settings=...)",
                        workflow=wf,
                        node=node_id,
                    )
        self._settings: SettingsDecl | None = declared
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
    def settings(self) -> SettingsDecl | None:
        """The run's live settings (``settings=``): contract, defaults, who may change them."""
        return self._settings

    @property
    def on_cancel(self) -> str | None:
        """The id of the cleanup node run after a cancel or a run deadline, or ``None``."""
        return self._on_cancel

    @property
    def deadline(self) -> float | None:
        """The run deadline in seconds from a run's start (``deadline=``), or ``None``."""
        return self._deadline

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
