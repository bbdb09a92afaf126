"""Load-time checks of a workflow definition; every error names the workflow and the node.

Called by ``Workflow.__init__`` only. Checks run in a fixed order (name and limits, node ids,
each node, start, edges, switches, reachability) and every problem is collected (``_Report``)
before one ``WorkflowDefinitionError`` is raised: the first problem found, with all of them
in ``problems``, each at the line of the node or edge it concerns (``locations``; the
``Workflow(...)`` call for the graph's own problems). So the same broken file always reports
the same problems in the same order, and an author sees all of them at once. A check that
cannot go on without what failed before it is skipped (no edges are checked when ``nodes``
is not a mapping, no reachability without a known start), so one mistake is not reported
again as many. Never calls a node callback.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from pi_workflows.authoring.contracts import Contract, schema_problem
from pi_workflows.authoring.effects import Effect, EffectKind
from pi_workflows.authoring.errors import WorkflowDefinitionError
from pi_workflows.authoring.locations import Location, deferred, defined_at
from pi_workflows.authoring.nodes import (
    EVENT_NAME_PATTERN,
    NODE_TYPES,
    RETRYING_TYPES,
    ActionNode,
    AgentNode,
    AssistantMessage,
    CheckpointNode,
    Choice,
    ComputeNode,
    HumanDecisionNode,
    Node,
    NotifyKind,
    NotifyNode,
    ShellNode,
    SleepNode,
    WaitEventNode,
)
from pi_workflows.authoring.retries import MAX_DELAY_SECONDS, RetryPolicy
from pi_workflows.authoring.routing import Edge, PathScope, Route, Switch, case_key, parse_path
from pi_workflows.authoring.values import CANCELLED, Outcome, json_problem

NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
"""Workflow names and node ids: 1-64 letters, digits, ``_`` or ``-``, starting with a letter."""

AUDIENCE_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
"""An audience's name (the same rule as ``protocol.fields.AUDIENCE_PATTERN``, which the CLI
and the channel process check; authoring imports no protocol)."""
CHOICE_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""Choice and route ids: 1-64 letters, digits, ``_``, ``.`` or ``-``."""

RESERVED_NODE_IDS = frozenset(
    {"input", "output", "outputs", "result", "results", "run", "workflow"}
)
"""Node ids the runtime uses for its own records and paths (``$result``, run input, ...)."""

_ROUTABLE_OUTCOMES = frozenset(o.value for o in Outcome)


class _Report:
    """The problems found so far, in the order found, each at the line of what it concerns:
    the node or route a helper built (``locations.defined_at``), else ``fallback`` (where
    ``Workflow(...)`` was called)."""

    def __init__(self, fallback: Location | None) -> None:
        self.fallback = fallback
        self.found: list[WorkflowDefinitionError] = []

    def add(self, error: WorkflowDefinitionError, concerns: object = None) -> None:
        """Keep ``error``, placed at ``concerns``'s line."""
        at = (defined_at(concerns) if concerns is not None else None) or self.fallback
        error.file, error.line = at if at is not None else (None, None)
        self.found.append(error)

    @contextmanager
    def check(self, concerns: object = None) -> Iterator[None]:
        """Run one check; the problem it raises is kept and the checking goes on."""
        try:
            yield
        except WorkflowDefinitionError as exc:
            self.add(exc, concerns)


def check_definition(
    name: object,
    start: object,
    nodes: object,
    edges: object,
    max_steps: object,
    *,
    location: Location | None = None,
) -> tuple[str, str, dict[str, Node], tuple[Route, ...], int]:
    """Check a whole definition and return it in canonical types, or raise the first problem
    with every problem found in its ``problems``. ``location`` is where ``Workflow(...)``
    was called: the line of the graph's own problems (name, limits, start)."""
    report = _Report(location)
    wf: str | None = None
    with report.check():
        wf = _check_name(name)
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        report.add(
            WorkflowDefinitionError(
                f"max_steps must be a positive integer, got {max_steps!r}", workflow=wf
            )
        )
    found = _check_nodes(wf, nodes, report)
    checked: dict[str, Node] | None = None
    routes: tuple[Route, ...] | None = None
    if found is not None:
        checked, known = found
        start_known = isinstance(start, str) and start in known
        if not start_known:
            report.add(
                WorkflowDefinitionError(
                    f"unknown start node {start!r}",
                    workflow=wf,
                    node=start if isinstance(start, str) else None,
                )
            )
        routes = _check_edges(wf, known, checked, edges, report)
        if routes is not None and isinstance(start, str) and start_known:
            _check_reachable(wf, start, known, routes, report)
    if report.found:
        first = report.found[0]
        first.problems = tuple(report.found)
        raise first
    # No problem found: every part is known good (the checks above said so).
    assert wf is not None
    assert checked is not None
    assert routes is not None
    assert isinstance(start, str)
    assert isinstance(max_steps, int)
    return wf, start, checked, routes, max_steps


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise WorkflowDefinitionError(
            f"workflow name {name!r} is malformed: use 1-64 letters, digits, '_' or '-', "
            "starting with a letter",
            workflow=None,
        )
    return name


def _check_nodes(
    wf: str | None, nodes: object, report: _Report
) -> tuple[dict[str, Node], dict[str, object]] | None:
    """The nodes whose id and type are usable (each checked), and every node given by its
    id (an edge to a node whose id is malformed is not also "unknown"); None when ``nodes`` is no
    mapping of nodes at all (nothing that follows can be checked)."""
    if not isinstance(nodes, Mapping) or not nodes:
        report.add(
            WorkflowDefinitionError(
                "nodes must be a non-empty mapping of node id -> node", workflow=wf
            )
        )
        return None
    checked: dict[str, Node] = {}
    known = {node_id: node for node_id, node in nodes.items() if isinstance(node_id, str)}
    for node_id, node in nodes.items():
        usable = False
        with report.check(node):
            _check_node_id(wf, node_id, node)
            usable = True
        if not usable:
            continue
        for problem in deferred(node):
            report.add(_fail(wf, node_id, problem), node)
        with report.check(node):
            _check_retry(wf, node_id, node)
        with report.check(node):
            _check_node(wf, node_id, node)
        checked[node_id] = node
    return checked, known


def _check_node_id(wf: str | None, node_id: object, node: object) -> None:
    if not isinstance(node_id, str) or not NAME_PATTERN.match(node_id):
        raise WorkflowDefinitionError(
            f"node id {node_id!r} is malformed: use 1-64 letters, digits, '_' or '-', "
            "starting with a letter",
            workflow=wf,
            node=str(node_id),
        )
    if node_id in RESERVED_NODE_IDS:
        reserved = ", ".join(sorted(RESERVED_NODE_IDS))
        raise WorkflowDefinitionError(
            f"node id {node_id!r} is reserved (reserved ids: {reserved})",
            workflow=wf,
            node=node_id,
        )
    if not isinstance(node, NODE_TYPES):
        raise WorkflowDefinitionError(
            "expected a node built with compute(), action(), shell(), notify(), agent(), "
            "checkpoint(), human_decision(), sleep() or wait_event(), got "
            f"{type(node).__name__}",
            workflow=wf,
            node=node_id,
        )


def _fail(wf: str | None, node_id: str, problem: str) -> WorkflowDefinitionError:
    return WorkflowDefinitionError(problem, workflow=wf, node=node_id)


def _check_timeout(wf: str | None, node_id: str, timeout: object, what: str = "timeout") -> None:
    if timeout is None:
        return
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or not 0 < timeout <= MAX_DELAY_SECONDS
    ):
        raise _fail(
            wf,
            node_id,
            f"{what} must be a positive number of seconds up to {MAX_DELAY_SECONDS:.0f} (366"
            f" days) or None, got {timeout!r}",
        )


def _check_text(wf: str | None, node_id: str, value: object, what: str) -> None:
    if callable(value):
        return
    if not isinstance(value, str) or not value.strip():
        raise _fail(wf, node_id, f"{what} must be a non-empty string or a callback")


def _check_effect(wf: str | None, node_id: str, effect: object, kind: str) -> None:
    if not isinstance(effect, Effect):
        raise _fail(
            wf,
            node_id,
            f"{kind} needs an effect declaration: pass effect=idempotent_effect(TYPE) if a "
            "retry is safe, or effect=manual_effect(TYPE) if it is not",
        )


def _check_validate(wf: str | None, node_id: str, validate: object) -> None:
    if validate is not None and not callable(validate):
        raise _fail(wf, node_id, "validate must be a callback validate(output, ctx) or None")


def _check_retry(wf: str | None, node_id: str, node: Node) -> None:
    if not isinstance(node, RETRYING_TYPES) or node.retry is None:
        return
    if not isinstance(node.retry, RetryPolicy):
        raise _fail(wf, node_id, f"retry must be built with retry(...), got {node.retry!r}")
    effect = getattr(node, "effect", None)
    if isinstance(effect, Effect) and effect.kind is EffectKind.MANUAL:
        raise _fail(
            wf,
            node_id,
            "declares retry with a manual_effect: a manual effect is never repeated"
            " automatically; use idempotent_effect if a repeat is safe, or remove retry",
        )


def _check_node(wf: str | None, node_id: str, node: Node) -> None:
    match node:
        case ComputeNode() | ActionNode():
            if not callable(node.run):
                raise _fail(wf, node_id, "run must be a callback run(ctx)")
            if isinstance(node, ActionNode):
                _check_effect(wf, node_id, node.effect, "an action")
            _check_timeout(wf, node_id, node.timeout)
        case ShellNode():
            _check_shell(wf, node_id, node)
        case NotifyNode():
            _check_text(wf, node_id, node.message, "message")
            if not isinstance(node.notify_kind, NotifyKind):
                raise _fail(wf, node_id, "notify kind must be 'progress' or 'final'")
            _check_audience(wf, node_id, node.audience)
        case AgentNode():
            _check_agent(wf, node_id, node)
        case CheckpointNode():
            _check_validate(wf, node_id, node.validate)
            _check_timeout(wf, node_id, node.timeout)
            _check_request(wf, node_id, node.request)
            contract_problem = check_contract(node.answer, "answer")
            if contract_problem is not None:
                raise _fail(wf, node_id, contract_problem)
            for_person: object = node.for_person
            if not isinstance(for_person, bool):
                problem = f"for_person must be True or False, got {for_person!r}"
                raise _fail(wf, node_id, problem)
        case HumanDecisionNode():
            _check_human_decision(wf, node_id, node)
        case SleepNode():
            _check_sleep(wf, node_id, node)
        case WaitEventNode():
            if not isinstance(node.name, str) or not EVENT_NAME_PATTERN.match(node.name):
                raise _fail(
                    wf,
                    node_id,
                    "event name must be 1-128 letters, digits and _.:- starting with a letter,"
                    f" got {node.name!r}",
                )
            _check_validate(wf, node_id, node.validate)
            _check_timeout(wf, node_id, node.timeout)


def _check_sleep(wf: str | None, node_id: str, node: SleepNode) -> None:
    if (node.duration is None) == (node.until is None):
        raise _fail(wf, node_id, "sleep needs exactly one of a duration and until=callback")
    if node.until is not None and not callable(node.until):
        raise _fail(wf, node_id, f"sleep until must be a callback until(ctx), got {node.until!r}")
    duration: object = node.duration
    if duration is not None and (
        isinstance(duration, bool)
        or not isinstance(duration, int | float)
        or not math.isfinite(duration)
        or not 0 <= duration <= MAX_DELAY_SECONDS
    ):
        raise _fail(
            wf,
            node_id,
            f"sleep duration must be a number of seconds from 0 to {MAX_DELAY_SECONDS:.0f},"
            f" got {duration!r}",
        )


def _check_shell(wf: str | None, node_id: str, node: ShellNode) -> None:
    _check_effect(wf, node_id, node.effect, "a shell node")
    _check_timeout(wf, node_id, node.timeout)
    command = node.command
    if isinstance(command, str):
        raise _fail(
            wf,
            node_id,
            "command must be a list of arguments (or a callback returning one), not a shell string",
        )
    if not callable(command) and (
        not isinstance(command, Sequence)
        or not command
        or not all(isinstance(arg, str) for arg in command)
    ):
        raise _fail(wf, node_id, "command must be a non-empty list of strings or a callback")
    if not node.allow_exit_codes or not all(
        isinstance(code, int) and not isinstance(code, bool) for code in node.allow_exit_codes
    ):
        raise _fail(wf, node_id, "allow_exit_codes must be a non-empty list of integers")


def check_contract(contract: object, what: str) -> str | None:
    """Why a node's (or the workflow's) typed contract cannot be used, or ``None``: what
    the author passed is no schema, or its schema is not a valid JSON Schema."""
    if contract is None:
        return None
    if not isinstance(contract, Contract):
        return f"{what} must be a Pydantic model class or a JSON Schema dict"
    if contract.problem is not None:
        return contract.problem
    problem = schema_problem(contract.schema)
    return None if problem is None else f"the {what} schema {problem}"


def _check_agent(wf: str | None, node_id: str, node: AgentNode) -> None:
    _check_text(wf, node_id, node.prompt, "prompt")
    _check_timeout(wf, node_id, node.timeout)
    _check_validate(wf, node_id, node.validate)
    contract_problem = check_contract(node.output, "output")
    if contract_problem is not None:
        raise _fail(wf, node_id, contract_problem)
    expected = node.expected_output
    if isinstance(expected, AssistantMessage):
        if node.validate is not None:
            raise _fail(
                wf,
                node_id,
                "validate is not allowed with expected_output=assistant_message(): a visible "
                "reply cannot be rejected and resubmitted; ask for a JSON output instead",
            )
        if node.output is not None:
            raise _fail(
                wf,
                node_id,
                "output= is not allowed with expected_output=assistant_message(): the output"
                " is the reply text; ask for a JSON output instead",
            )
    elif not isinstance(expected, str) or not expected.strip():
        raise _fail(
            wf,
            node_id,
            "expected_output must be a non-empty description or assistant_message(), or give"
            " output=SCHEMA to generate it",
        )
    if node.allowed_tools is not None and not all(
        isinstance(tool, str) and tool for tool in node.allowed_tools
    ):
        raise _fail(wf, node_id, "allowed_tools must be a list of tool names or None")
    if node.route_field is not None:
        _check_ids(wf, node_id, node.routes, "route")


def _check_request(wf: str | None, node_id: str, request: object) -> None:
    if callable(request):
        return
    if isinstance(request, str) and request.strip():
        return
    if isinstance(request, dict) and isinstance(request.get("question"), str):
        problem = json_problem(request)
        if problem is None:
            return
        raise _fail(wf, node_id, f"request is not JSON: {problem}")
    raise _fail(
        wf,
        node_id,
        'request must be a question string, a JSON object with a "question" string, '
        "or a callback returning one",
    )


def _check_ids(wf: str | None, node_id: str, ids: Sequence[object], what: str) -> None:
    if not ids:
        raise _fail(wf, node_id, f"declare at least one {what}")
    seen: set[str] = set()
    for item in ids:
        if not isinstance(item, str) or not CHOICE_PATTERN.match(item):
            raise _fail(
                wf,
                node_id,
                f"{what} id {item!r} is malformed: use 1-64 letters, digits, '_', '.' or '-'",
            )
        if item in seen:
            raise _fail(wf, node_id, f"{what} {item!r} is declared twice")
        seen.add(item)


def _check_audience(wf: str | None, node_id: str, audience: object) -> None:
    if audience is not None and (
        not isinstance(audience, str) or not AUDIENCE_PATTERN.fullmatch(audience)
    ):
        raise _fail(
            wf,
            node_id,
            f"audience must be an audience name (lower-case letters, digits, _ and -, at most"
            f" 40, starting with a letter), got {audience!r}",
        )


def _check_human_decision(wf: str | None, node_id: str, node: HumanDecisionNode) -> None:
    _check_text(wf, node_id, node.title, "title")
    _check_audience(wf, node_id, node.audience)
    if node.details is not None:
        _check_text(wf, node_id, node.details, "details")
    for item in node.choices:
        if not isinstance(item, Choice):
            raise _fail(wf, node_id, f"choices must be built with choice(...), got {item!r}")
        if not isinstance(item.label, str) or not item.label.strip():
            raise _fail(wf, node_id, f"choice {item.id!r} needs a non-empty label")
    _check_ids(wf, node_id, node.choice_ids, "choice")
    if node.on_timeout is not None:
        _check_timeout(wf, node_id, node.on_timeout.after, "on_timeout duration")
        if node.on_timeout.choice not in node.choice_ids:
            raise _fail(
                wf,
                node_id,
                f"on_timeout picks {node.on_timeout.choice!r}, which is not a declared choice "
                f"({', '.join(node.choice_ids)})",
            )


def _check_edges(
    wf: str | None,
    known: Mapping[str, object],
    nodes: Mapping[str, Node],
    edges: object,
    report: _Report,
) -> tuple[Route, ...] | None:
    """Check every route; return the routes that lead somewhere (a node's first route), or
    None when ``edges`` is not a list at all."""
    if isinstance(edges, str | bytes) or not isinstance(edges, Sequence):
        report.add(
            WorkflowDefinitionError(
                "edges must be a list of edge(...) and switch(...)", workflow=wf
            )
        )
        return None
    outgoing: dict[str, Route] = {}
    for route in edges:
        if not isinstance(route, Edge | Switch):
            report.add(
                WorkflowDefinitionError(
                    f"edges must be built with edge(...) or switch(...), got {route!r}",
                    workflow=wf,
                ),
                route,
            )
            continue
        source = route.source
        if not isinstance(source, str) or source not in known:
            report.add(
                WorkflowDefinitionError(
                    f"edge from unknown node {source!r}",
                    workflow=wf,
                    node=source if isinstance(source, str) else None,
                ),
                route,
            )
            continue
        if source in outgoing:
            report.add(
                _fail(wf, source, "more than one outgoing edge; use one switch(...) to branch"),
                route,
            )
            continue
        outgoing[source] = route
        if isinstance(route, Switch):
            with report.check(route):
                _check_switch(wf, nodes, route)
        for target in route.targets():
            if not isinstance(target, str) or target not in known:
                report.add(_fail(wf, source, f"edge to unknown node {target!r}"), route)
    return tuple(outgoing.values())


def _check_switch(wf: str | None, nodes: Mapping[str, Node], route: Switch) -> None:
    source = route.source
    try:
        path = parse_path(route.on)
    except ValueError as exc:
        raise _fail(wf, source, str(exc)) from None
    if not route.cases and route.default is None:
        raise _fail(wf, source, f"switch on {route.on} has no cases")
    seen: set[tuple[str, object]] = set()
    for case in route.cases:
        if case.value is not None and not isinstance(case.value, str | int | bool):
            raise _fail(
                wf,
                source,
                f"switch on {route.on}: case value {case.value!r} is not a string, integer, "
                "boolean or null",
            )
        key = case_key(case.value)
        if key in seen:
            raise _fail(wf, source, f"switch on {route.on} lists case {case.value!r} twice")
        seen.add(key)
    if path.is_outcome:
        _check_outcome_cases(wf, route)
        for outcome, given in (("failed", route.failed), ("timed_out", route.timed_out)):
            if given is not None and route.target_for(outcome) is not None:
                raise _fail(
                    wf, source,
                    f"switch on $result.outcome routes {outcome!r} twice (a case and"
                    f" {outcome}=); keep one",
                )  # fmt: skip
    node = nodes.get(source)  # None: the node itself has a problem already reported
    if path.scope is PathScope.OUTPUT:
        replies = isinstance(node, AgentNode) and isinstance(node.expected_output, AssistantMessage)
        if replies and path.segments:
            raise _fail(
                wf,
                source,
                f"switch on {route.on}: the output of an assistant_message() step is its "
                "reply text; switch on '$' or '$result.outcome' instead",
            )
        if isinstance(node, HumanDecisionNode) and path.segments == ("choice",):
            _check_coverage(wf, route, node.choice_ids, "choice")
        if (
            isinstance(node, AgentNode)
            and node.route_field is not None
            and path.segments == (node.route_field,)
        ):
            _check_coverage(wf, route, node.routes, "route")


def _check_outcome_cases(wf: str | None, route: Switch) -> None:
    for case in route.cases:
        if case.value == CANCELLED:
            raise _fail(
                wf,
                route.source,
                "switch on $result.outcome cannot route 'cancelled': a cancelled node ends the "
                "run and is never routed",
            )
        if case.value not in _ROUTABLE_OUTCOMES:
            raise _fail(
                wf,
                route.source,
                f"switch on $result.outcome has case {case.value!r}; outcomes are 'ok', "
                "'failed' and 'timed_out'",
            )


def _check_coverage(wf: str | None, route: Switch, declared: Sequence[str], what: str) -> None:
    values = [case.value for case in route.cases]
    unknown = [v for v in values if v not in declared]
    if unknown:
        raise _fail(
            wf,
            route.source,
            f"switch on {route.on} has case {unknown[0]!r}, which is not a declared {what} "
            f"({', '.join(declared)})",
        )
    missing = [d for d in declared if d not in values]
    if missing and route.default is None:
        raise _fail(
            wf,
            route.source,
            f"switch on {route.on} does not cover every {what}: missing "
            f"{', '.join(repr(m) for m in missing)}",
        )


def _check_reachable(
    wf: str | None,
    start: str,
    known: Mapping[str, object],
    routes: Sequence[Route],
    report: _Report,
) -> None:
    outgoing = {route.source: route for route in routes}
    seen = {start}
    frontier = [start]
    while frontier:
        route = outgoing.get(frontier.pop())
        if route is None:
            continue
        for target in route.targets():
            if target in known and target not in seen:
                seen.add(target)
                frontier.append(target)
    for node_id, node in known.items():
        if node_id not in seen:
            report.add(_fail(wf, node_id, f"unreachable from the start node {start!r}"), node)
