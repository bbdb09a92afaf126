"""Drawing a workflow's graph: as text (`workflows show`, `watch`) and as Mermaid.

Owns three renderers of the definition snapshot the server sends (nodes with their kind,
timeout and effect; edges, switch cases labelled `field = value`): `render_graph` for a
workflow, `render_mermaid` for docs and editors, and `render_run_graph` for one run's graph
view (`run.watch`: each node's state, the current node, visits and attempts), laid out by
layer (distance from the start node) as the server computed it. Never contacts a server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pi_workflows.cli.output import plain

__all__ = ["STATE_GLYPHS", "render_graph", "render_mermaid", "render_run_graph"]

STATE_GLYPHS: Final = {
    "pending": ("○", "dim"),
    "running": ("◐", "cyan"),
    "waiting": ("◆", "yellow"),
    "completed": ("●", "green"),
    "failed": ("✖", "red"),
    "timed_out": ("⌛", "red"),
    "cancelled": ("⊘", "magenta"),
    "interrupted": ("⊘", "magenta"),
    "retried": ("↻", "yellow"),
    "exhausted": ("↻", "red"),
}
"""How each node state is drawn: a glyph and its style."""


def _edges(definition: Mapping[str, Any]) -> list[tuple[str, str, str | None]]:
    """`(from, to, label)` for every edge and switch case of a definition snapshot, in graph
    order: by their source node's place among the workflow's nodes (the order it declares
    them), a source's cases as the switch lists them."""
    found: list[tuple[str, str, str | None]] = []
    for route in definition.get("edges") or []:
        if not isinstance(route, Mapping):
            continue
        source = plain(route.get("from"))
        if "to" in route:
            found.append((source, plain(route.get("to")), None))
            continue
        for case in route.get("cases") or []:
            label = f"{plain(route.get('on'))} = {json.dumps(case.get('when'))}"
            found.append((source, plain(case.get("to")), label))
        if route.get("default"):
            found.append((source, plain(route.get("default")), "default"))
        for key, label in (("failed", "failed"), ("timedOut", "timed out")):
            if route.get(key):
                found.append((source, plain(route.get(key)), label))
    order = {node_id: index for index, node_id in enumerate(definition.get("nodes") or {})}
    return sorted(found, key=lambda edge: order.get(edge[0], len(order)))


def _node_note(spec: Mapping[str, Any]) -> str:
    notes = []
    if isinstance(spec.get("timeoutMs"), int):
        notes.append(f"timeout {spec['timeoutMs'] / 1000:g} s")
    effect = spec.get("effect")
    if isinstance(effect, Mapping):
        notes.append(f"{plain(effect.get('kind'))} effect {plain(effect.get('type'))}")
    if spec.get("choices"):
        notes.append("choices " + ", ".join(plain(c.get("id")) for c in spec["choices"]))
    retry = spec.get("retry")
    if isinstance(retry, Mapping):
        selects = [plain(o) for o in retry.get("on") or []]
        selects += [plain(c).rsplit(".", 1)[-1] for c in retry.get("onErrors") or []]
        if retry.get("predicate"):
            selects.append("a predicate")
        never = [plain(c).rsplit(".", 1)[-1] for c in retry.get("never") or []]
        notes.append(
            f"retry {plain(retry.get('attempts'))} tries on {'/'.join(selects)}"
            + (f" never {'/'.join(never)}" if never else "")
            + f", then {plain(retry.get('onExhausted'))}"
        )
    if isinstance(spec.get("durationMs"), int):
        notes.append(f"sleeps {spec['durationMs'] / 1000:g} s")
    if spec.get("event"):
        notes.append(f"event {plain(spec.get('event'))}")
    return "; ".join(notes)


def render_graph(shown: Mapping[str, Any]) -> RenderableType:
    """`workflows show`: the workflow, its nodes and its edges."""
    definition = shown.get("definition") or {}
    source = shown.get("source") or {}
    head = Text(f"workflow {plain(shown.get('workflow'))}", style="bold")
    head.append(f"  start {plain(definition.get('start'))}", style="")
    head.append(f"  max steps {plain(definition.get('maxSteps'))}\n{plain(source.get('ref'))}")
    nodes = Table(title="Nodes", title_justify="left", box=None, pad_edge=False)
    nodes.add_column("node", no_wrap=True, style="bold")
    nodes.add_column("kind", no_wrap=True)
    nodes.add_column("notes", overflow="fold")
    for node_id, spec in (definition.get("nodes") or {}).items():
        if isinstance(spec, Mapping):
            nodes.add_row(Text(node_id), Text(plain(spec.get("kind"))), Text(_node_note(spec)))
    edges = Table(title="Edges", title_justify="left", box=None, pad_edge=False)
    edges.add_column("from", no_wrap=True)
    edges.add_column("", no_wrap=True)
    edges.add_column("to", no_wrap=True)
    edges.add_column("when", overflow="fold")
    for source_id, target, label in _edges(definition):
        edges.add_row(Text(source_id), Text("→"), Text(target), Text(label or ""))
    return Group(head, Text(""), nodes, Text(""), edges)


def _mermaid_id(node_id: str) -> str:
    return "n_" + re.sub(r"[^A-Za-z0-9_]", "_", node_id)


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;").replace("|", "#124;")


def render_mermaid(definition: Mapping[str, Any]) -> str:
    """A Mermaid `flowchart TD` of a definition snapshot (node ids made safe, labels quoted)."""
    lines = ["flowchart TD"]
    start = definition.get("start")
    for node_id, spec in (definition.get("nodes") or {}).items():
        kind = plain(spec.get("kind")) if isinstance(spec, Mapping) else "?"
        name = _mermaid_text(f"{node_id} ({kind})")
        if node_id == start:
            lines.append(f'    {_mermaid_id(node_id)}(["{name}"])')
        else:
            lines.append(f'    {_mermaid_id(node_id)}["{name}"]')
    for source, target, label in _edges(definition):
        arrow = f"-->|{_mermaid_text(label)}|" if label else "-->"
        lines.append(f"    {_mermaid_id(source)} {arrow} {_mermaid_id(target)}")
    return "\n".join(lines)


def render_run_graph(graph: Mapping[str, Any]) -> Text:
    """One run's graph view, layer by layer (the number on the left is the distance from the
    start): each node with its state glyph, kind and state (`(carried)` when a fork carried
    it from its source; a times sign and N when it ran N > 1 times; the current node
    highlighted), and its outgoing edges below it."""
    text = Text()
    out: dict[str, list[tuple[str, str | None]]] = {}
    for edge in graph.get("edges") or []:
        if isinstance(edge, Mapping):
            out.setdefault(plain(edge.get("from")), []).append(
                (plain(edge.get("to")), edge.get("label"))
            )
    layer = None
    for node in graph.get("nodes") or []:
        if not isinstance(node, Mapping):
            continue
        if node.get("layer") != layer:
            layer = node.get("layer")
            text.append(f"{layer:>2} ", style="dim")
        else:
            text.append("   ")
        state = plain(node.get("state"))
        glyph, style = STATE_GLYPHS.get(state, ("?", ""))
        text.append(f"{glyph} ", style=style)
        text.append(plain(node.get("id")), style="bold reverse" if node.get("current") else "bold")
        text.append(f" {plain(node.get('kind'))} ", style="dim")
        text.append(state, style=style)
        if node.get("carried"):
            text.append(" (carried)", style="dim")  # a fork carried it from its source
        attempts = node.get("attempts")
        if isinstance(attempts, int) and attempts > 1:
            text.append(f" \u00d7{attempts}", style="bold")  # the times sign
        text.append("\n")
        targets = out.get(plain(node.get("id")), [])
        for index, (target, label) in enumerate(targets):
            branch = "└→" if index == len(targets) - 1 else "├→"
            text.append(f"     {branch} {target}", style="dim")
            if label:
                text.append(f" if {label}", style="dim")
            text.append("\n")
    return text
