"""The graph's layout: layers top to bottom, switch cases to one node drawn once."""

from __future__ import annotations

from pi_workflows.web.graph import HEIGHT, layout

GRAPH = {
    "start": "a",
    "nodes": [
        {"id": "a", "kind": "compute", "layer": 0, "state": "completed", "attempts": 1},
        {"id": "b", "kind": "human_decision", "layer": 1, "state": "waiting", "current": True},
        {"id": "c", "kind": "compute", "layer": 2, "state": "pending"},
        {"id": "d", "kind": "compute", "layer": 2, "state": "pending", "attempts": 3},
    ],
    "edges": [
        {"from": "a", "to": "b", "label": None},
        {"from": "b", "to": "c", "label": '$.choice = "yes"'},
        {"from": "b", "to": "c", "label": '$.choice = "maybe"'},
        {"from": "b", "to": "d", "label": "default"},
        {"from": "d", "to": "a", "label": None},
    ],
}


def test_layers_go_down_and_nodes_of_a_layer_side_by_side() -> None:
    """Each layer is one row below the last; two nodes of a layer do not overlap."""
    drawn = layout(GRAPH)
    boxes = {b.id: b for b in drawn.boxes}
    assert boxes["a"].y < boxes["b"].y < boxes["c"].y == boxes["d"].y
    assert abs(boxes["c"].x - boxes["d"].x) >= 168
    assert boxes["b"].current
    assert boxes["d"].detail == "compute · pending · 3 attempts"
    assert drawn.height >= boxes["d"].y + HEIGHT


def test_cases_to_one_node_are_one_line_and_a_loop_goes_around() -> None:
    """The two cases b -> c are one path with both labels; d -> a is drawn back."""
    lines = layout(GRAPH).lines
    assert len(lines) == 4
    labels = {line.label for line in lines}
    assert '$.choice = "yes" | $.choice = "maybe"' in labels
    assert [line.back for line in lines].count(True) == 1


def test_no_graph_is_an_empty_drawing() -> None:
    """A view without a graph draws nothing (and does not fail)."""
    drawn = layout(None)
    assert (drawn.boxes, drawn.lines) == ([], [])
