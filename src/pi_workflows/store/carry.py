"""Whether a workflow's new definition can carry a run's recorded state, read from the two
definition snapshots (``engine/snapshot.py``'s JSON): no workflow code, no database.

A fork (``forks``) and an upgrade (``upgrades``) both let a run continue on the code as it
is now. The new graph carries the run when every node with a recorded output or result
still exists with the same kind, and the node the run waits at (with its attempt open)
still exists with the same kind, and the node it will resume at still exists. Anything
else is a reason, in one line naming the node, and the caller refuses. Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["carry_problems", "effects_ahead", "graph_changes", "node_kinds"]


def _nodes(definition: Mapping[str, Any]) -> Mapping[str, Any]:
    nodes = definition.get("nodes")
    return nodes if isinstance(nodes, Mapping) else {}


def node_kinds(definition: Mapping[str, Any]) -> dict[str, str]:
    """Every node id of a snapshot and its kind."""
    return {
        str(node_id): str(node.get("kind")) if isinstance(node, Mapping) else "?"
        for node_id, node in _nodes(definition).items()
    }


def carry_problems(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    recorded: Iterable[str],
    waiting_at: str | None = None,
    resume_at: str | None = None,
) -> list[str]:
    """Why ``new`` cannot carry a run recorded under ``old`` (empty: it can).

    ``recorded``: the nodes with a settled result the run keeps; ``waiting_at``: the node
    whose attempt is open (a request, a durable wait) or settled but not routed;
    ``resume_at``: the node a runner starts next when no attempt is open.
    """
    before, after = node_kinds(old), node_kinds(new)
    problems: list[str] = []
    if waiting_at is not None:
        if waiting_at not in after:
            problems.append(f"the run waits at node {waiting_at}, which the new code removed")
        elif before.get(waiting_at, after[waiting_at]) != after[waiting_at]:
            problems.append(
                f"the run waits at node {waiting_at}, which was {before[waiting_at]} and is"
                f" now {after[waiting_at]}"
            )
    if resume_at is not None and resume_at != waiting_at and resume_at not in after:
        problems.append(f"the run continues at node {resume_at}, which the new code removed")
    for node_id in sorted(set(recorded)):
        if node_id == waiting_at:
            continue
        if node_id not in after:
            problems.append(f"node {node_id} has a recorded result but the new code removed it")
        elif node_id in before and before[node_id] != after[node_id]:
            problems.append(
                f"node {node_id} has a recorded result as {before[node_id]} but is now"
                f" {after[node_id]}"
            )
    return problems


def graph_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between two snapshots, one line each: nodes added, removed or changed
    (kind, or another field such as an expected output or choices), routes changed, start
    and step limit."""
    before, after = _nodes(old), _nodes(new)
    lines: list[str] = []
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    if added:
        lines.append(f"nodes added: {', '.join(added)}")
    if removed:
        lines.append(f"nodes removed: {', '.join(removed)}")
    for node_id in sorted(set(before) & set(after)):
        was, now = before[node_id], after[node_id]
        if was == now:
            continue
        if (
            isinstance(was, Mapping)
            and isinstance(now, Mapping)
            and was.get("kind") != now.get("kind")
        ):
            lines.append(f"node {node_id}: {was.get('kind')} -> {now.get('kind')}")
        else:
            fields = sorted(
                key for key in {*_keys(was), *_keys(now)} if _field(was, key) != _field(now, key)
            )
            lines.append(f"node {node_id} changed: {', '.join(fields)}")
    if _routes(old) != _routes(new):
        lines.append("routes changed")
    for key, label in (("start", "start node"), ("maxSteps", "step limit")):
        if old.get(key) != new.get(key):
            lines.append(f"{label}: {old.get(key)} -> {new.get(key)}")
    return lines


def _keys(node: Any) -> list[str]:
    return [str(key) for key in node] if isinstance(node, Mapping) else []


def _field(node: Any, key: str) -> Any:
    return node.get(key) if isinstance(node, Mapping) else None


def _routes(definition: Mapping[str, Any]) -> list[Any]:
    edges = definition.get("edges")
    return list(edges) if isinstance(edges, list) else []


def _targets(edge: Mapping[str, Any]) -> list[str]:
    found = [edge.get("to"), edge.get("default"), edge.get("failed"), edge.get("timedOut")]
    cases = edge.get("cases")
    if isinstance(cases, list):
        found += [case.get("to") for case in cases if isinstance(case, Mapping)]
    return [str(target) for target in found if isinstance(target, str)]


def effects_ahead(definition: Mapping[str, Any], start: str) -> list[dict[str, Any]]:
    """The managed effects a run starting at ``start`` may apply: every node reachable from
    it (itself included) that declares an effect, in graph order (breadth first), as
    ``{nodeId, type, kind}``."""
    routes: dict[str, list[str]] = {}
    for edge in _routes(definition):
        if isinstance(edge, Mapping):
            routes.setdefault(str(edge.get("from")), []).extend(_targets(edge))
    nodes = _nodes(definition)
    seen, queue, ahead = {start}, [start], []
    while queue:
        node_id = queue.pop(0)
        node = nodes.get(node_id)
        effect = node.get("effect") if isinstance(node, Mapping) else None
        if isinstance(effect, Mapping):
            ahead.append(
                {"nodeId": node_id, "type": effect.get("type"), "kind": effect.get("kind")}
            )
        for target in routes.get(node_id, []):
            if target not in seen:
                seen.add(target)
                queue.append(target)
    return ahead
