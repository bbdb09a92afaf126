"""The views live renderers show: one run with its graph, and the run list.

Owns no table; reads only. ``run_watch`` is the ``RunView`` (``views.run_view``) plus
``graph``: the run's definition snapshot (stored with the run, so no workflow code is
loaded) laid out as nodes and edges, each node with the state of its latest attempt in the
current round. The server computes it, so every renderer (``pi-workflows watch``, the Pi
extension, a program) shows the same status. ``runs_watch`` is a page of run summaries.
Both are bounded to fit one pushed frame (``view_bounds.PUSH_BYTES``): message texts and a
large request are cut, and the oldest list items left out with a count of them.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from typing import Any

from pi_workflows.store import jsoncol, view_bounds, views
from pi_workflows.store.runs import RunRow, read_run


def run_watch(conn: sqlite3.Connection, run_id: str) -> dict[str, Any]:
    """``{run: RunView, graph: Graph}`` of one run (what ``run.watch`` pushes), bounded:
    see ``bounded_run_view``."""
    run = read_run(conn, run_id)
    view = {"run": views.run_view(conn, run_id), "graph": graph(conn, run)}
    return bounded_run_view(view)


def runs_watch(
    conn: sqlite3.Connection,
    *,
    statuses: list[str] | None = None,
    workflow: str | None = None,
    limit: int = 100,
) -> dict[str, Any]:
    """``{runs, counts, runsOmitted}``: the newest run summaries (the oldest of them left
    out when the page would exceed ``PUSH_BYTES``) and the number of runs per status."""
    runs, _ = views.list_runs_page(conn, statuses=statuses, workflow=workflow, limit=limit)
    counts = dict(
        conn.execute("SELECT status, COUNT(*) FROM viewer_runs GROUP BY status").fetchall()
    )
    omitted = 0
    while runs and view_bounds.encoded_size({"runs": runs, "counts": counts}) > (
        view_bounds.PUSH_BYTES
    ):
        keep = len(runs) // 2
        omitted += len(runs) - keep
        runs = runs[:keep]  # newest first: the oldest go
    return {"runs": runs, "counts": counts, "runsOmitted": omitted}


_OMITTED = {
    "messages": "messagesOmitted",
    "attempts": "attemptsOmitted",
    "effects": "effectsOmitted",
    "joins": "joinsOmitted",
}
"""The lists of a run view that may be shortened (oldest first), and their counters."""


def bounded_run_view(view: dict[str, Any]) -> dict[str, Any]:
    """A ``{run, graph}`` view cut to fit one pushed frame (deterministically).

    Message texts come cut already (``views.run_messages``); a ``waitingOn.request`` over
    ``RUN_VIEW_REQUEST_BYTES`` becomes ``{"omittedBytes": n}``; then, while the view still
    exceeds ``PUSH_BYTES``, the oldest half of its largest list (messages, attempts,
    effects, joins) is left out and counted in ``messagesOmitted``, ``attemptsOmitted``,
    ``effectsOmitted`` or ``joinsOmitted``. A view that cannot be cut further is returned
    as it is (the server then ends the watch with ``run.unavailable``).
    """
    run = dict(view["run"])
    run.setdefault("messagesOmitted", 0)
    waiting = run.get("waitingOn")
    if isinstance(waiting, dict):
        size = view_bounds.encoded_size(waiting.get("request"))
        if size > view_bounds.RUN_VIEW_REQUEST_BYTES:
            run["waitingOn"] = {**waiting, "request": {"omittedBytes": size}}
    bounded = {**view, "run": run}
    while view_bounds.encoded_size(bounded) > view_bounds.PUSH_BYTES:
        sizes = {name: view_bounds.encoded_size(run.get(name, [])) for name in _OMITTED}
        name = max(sorted(sizes), key=lambda n: sizes[n])
        items = list(run.get(name, []))
        if not items:
            break
        left_out = (len(items) + 1) // 2
        run[name] = items[left_out:]  # oldest first: the oldest go
        run[_OMITTED[name]] = int(run.get(_OMITTED[name]) or 0) + left_out
    return bounded


def _definition(conn: sqlite3.Connection, digest: str) -> dict[str, Any]:
    row = conn.execute("SELECT data FROM blobs WHERE digest = ?", (digest,)).fetchone()
    if row is None:
        return {}
    value = jsoncol.loads(bytes(row[0]).decode("utf-8"))
    return value if isinstance(value, dict) else {}


def _edges(definition: dict[str, Any]) -> list[dict[str, Any]]:
    """``[{from, to, label}]``: a plain edge has no label; a switch case is labelled
    ``<field> = <value>``, its default ``default``, and its outcome routes ``failed`` and
    ``timed out``."""
    edges: list[dict[str, Any]] = []
    for route in definition.get("edges", []):
        if not isinstance(route, dict):
            continue
        source = route.get("from")
        if "to" in route:
            edges.append({"from": source, "to": route["to"], "label": None})
            continue
        for case in route.get("cases", []):
            label = f"{route.get('on')} = {jsoncol.dumps(case.get('when'))}"
            edges.append({"from": source, "to": case.get("to"), "label": label})
        if route.get("default"):
            edges.append({"from": source, "to": route["default"], "label": "default"})
        for key, label in (("failed", "failed"), ("timedOut", "timed out")):
            if route.get(key):
                edges.append({"from": source, "to": route[key], "label": label})
    return edges


def _layers(start: str | None, node_ids: list[str], edges: list[dict[str, Any]]) -> dict[str, int]:
    """Each node's distance from the start (breadth first); unreached nodes go last."""
    depth: dict[str, int] = {}
    if start in node_ids:
        depth[start] = 0
        queue = deque([start])
        while queue:
            node = queue.popleft()
            for edge in edges:
                target = edge["to"]
                if edge["from"] == node and target in node_ids and target not in depth:
                    depth[target] = depth[node] + 1
                    queue.append(target)
    last = max(depth.values(), default=-1) + 1
    return {node: depth.get(node, last) for node in node_ids}


def graph(conn: sqlite3.Connection, run: RunRow) -> dict[str, Any]:
    """The run's graph: ``{start, nodes: [GraphNode], edges: [{from, to, label}]}``.

    ``GraphNode`` is ``{id, kind, layer, state, visits, attempts, current, effect,
    attemptId, error, carried}``: ``state`` is ``pending`` (not run in this round) or the status of
    its latest attempt (``running``, ``waiting``, ``completed``, ``failed``, ``timed_out``,
    ``cancelled``, ``interrupted``); ``visits`` counts settled attempts and ``attempts``
    every attempt of this round; ``current`` marks the run's current node; ``carried``
    that its latest attempt is one a fork carried from its source.
    """
    definition = _definition(conn, run.definition_digest)
    nodes = definition.get("nodes", {})
    node_ids = list(nodes) if isinstance(nodes, dict) else []
    edges = _edges(definition)
    layers = _layers(definition.get("start"), node_ids, edges)
    rows = conn.execute(
        "SELECT node_id, attempt_id, status, error, carried_from FROM node_attempts"
        " WHERE run_id = ? AND round = ? ORDER BY rowid",
        (run.run_id, run.round),
    ).fetchall()
    latest: dict[str, tuple[str, str, str | None, bool]] = {}
    tried: dict[str, int] = {}
    settled: dict[str, int] = {}
    for node_id, attempt_id, status, error, carried in rows:
        latest[node_id] = (attempt_id, status, error, carried is not None)
        tried[node_id] = tried.get(node_id, 0) + 1
        if status in ("completed", "failed", "timed_out"):
            settled[node_id] = settled.get(node_id, 0) + 1
    shown = []
    for node_id in sorted(node_ids, key=lambda n: (layers[n], node_ids.index(n))):
        spec = nodes[node_id] if isinstance(nodes[node_id], dict) else {}
        attempt = latest.get(node_id)
        effect = spec.get("effect")
        shown.append(
            {
                "id": node_id,
                "kind": spec.get("kind"),
                "layer": layers[node_id],
                "state": "pending" if attempt is None else attempt[1],
                "visits": settled.get(node_id, 0),
                "attempts": tried.get(node_id, 0),
                "current": node_id == run.current_node,
                "effect": effect.get("type") if isinstance(effect, dict) else None,
                "attemptId": None if attempt is None else attempt[0],
                "error": None if attempt is None else attempt[2],
                "carried": attempt is not None and attempt[3],
            }
        )
    return {"start": definition.get("start"), "nodes": shown, "edges": edges}
