"""The run's graph laid out for the page's SVG: boxes by layer, edges between them.

Pure: takes the `graph` of a pushed `run.view` (`{start, nodes, edges}`, each node with the
`layer` and the `state` the server computed) and returns positions. Layers go top to
bottom in the server's order (distance from the start node), nodes left to right in the
order the server lists them. An edge to the same or an earlier layer (a loop) is drawn as
a curve around the right side. Never reads anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

__all__ = ["Box", "Layout", "Line", "layout"]

WIDTH: Final = 168
HEIGHT: Final = 46
GAP_X: Final = 28
GAP_Y: Final = 46
MARGIN: Final = 12
LABEL_CHARS: Final = 22


@dataclass(frozen=True)
class Box:
    """One node: where it is and what it says."""

    id: str
    kind: str
    state: str
    current: bool
    x: int
    y: int
    label: str
    detail: str
    """`kind · state`, and the attempts when there were more than one."""


@dataclass(frozen=True)
class Line:
    """One edge as an SVG path, with its label's position."""

    path: str
    label: str | None
    label_x: int
    label_y: int
    back: bool


@dataclass(frozen=True)
class Layout:
    """The whole drawing."""

    width: int
    height: int
    boxes: list[Box]
    lines: list[Line]


def _short(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def layout(graph: dict[str, Any] | None) -> Layout:
    """Positions for every node and edge of `graph` (an empty drawing for None)."""
    nodes = [n for n in (graph or {}).get("nodes", []) if isinstance(n, dict)]
    layers: dict[int, list[dict[str, Any]]] = {}
    for node in nodes:
        layer = node.get("layer")
        layers.setdefault(layer if isinstance(layer, int) else 1_000_000, []).append(node)
    order = sorted(layers)
    widest = max((len(layers[k]) for k in order), default=0)
    width = MARGIN * 2 + widest * WIDTH + max(0, widest - 1) * GAP_X + 80
    height = MARGIN * 2 + len(order) * HEIGHT + max(0, len(order) - 1) * GAP_Y
    boxes: dict[str, Box] = {}
    for row, key in enumerate(order):
        members = layers[key]
        span = len(members) * WIDTH + (len(members) - 1) * GAP_X
        left = (width - 80 - span) // 2
        for column, node in enumerate(members):
            state = str(node.get("state") or "pending")
            attempts = node.get("attempts")
            detail = f"{node.get('kind')} · {state}"
            if isinstance(attempts, int) and attempts > 1:
                detail += f" · {attempts} attempts"
            boxes[str(node.get("id"))] = Box(
                id=str(node.get("id")),
                kind=str(node.get("kind")),
                state=state,
                current=bool(node.get("current")),
                x=left + column * (WIDTH + GAP_X),
                y=MARGIN + row * (HEIGHT + GAP_Y),
                label=_short(str(node.get("id"))),
                detail=_short(detail, 30),
            )
    merged: dict[tuple[str, str], list[str]] = {}
    for edge in (graph or {}).get("edges", []):
        if isinstance(edge, dict):
            labels = merged.setdefault((str(edge.get("from")), str(edge.get("to"))), [])
            if edge.get("label") is not None:
                labels.append(str(edge["label"]))
    lines = [
        line
        for (source, target), labels in merged.items()
        for line in [_line(boxes, source, target, " | ".join(labels) or None)]
        if line is not None
    ]
    return Layout(width=width, height=height, boxes=list(boxes.values()), lines=lines)


def _line(boxes: dict[str, Box], start: str, end: str, label: str | None) -> Line | None:
    """The path of the edges from `start` to `end` (several switch cases to one node are
    one line, their labels joined)."""
    source, target = boxes.get(start), boxes.get(end)
    if source is None or target is None:
        return None
    text = None if label is None else _short(label, 40)
    if target.y > source.y:
        x1, y1 = source.x + WIDTH // 2, source.y + HEIGHT
        x2, y2 = target.x + WIDTH // 2, target.y
        middle = (y1 + y2) // 2
        path = f"M{x1},{y1} C{x1},{middle} {x2},{middle} {x2},{y2 - 4}"
        return Line(path, text, (x1 + x2) // 2 + 4, middle, back=False)
    # A loop (or an edge within a layer): around the right side of both boxes.
    x1, y1 = source.x + WIDTH, source.y + HEIGHT // 2
    x2, y2 = target.x + WIDTH, target.y + HEIGHT // 2
    bulge = max(x1, x2) + 50
    path = f"M{x1},{y1} C{bulge},{y1} {bulge},{y2} {x2 + 4},{y2}"
    return Line(path, text, bulge - 20, (y1 + y2) // 2, back=True)
