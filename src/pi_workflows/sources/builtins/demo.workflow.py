"""builtin:demo - a tour of pi-workflows that needs no model.

Shapes some input, sends a progress message, runs a harmless command (this Python
interpreter printing its version as JSON) under an idempotent effect, asks one question
through a checkpoint, and ends with a JSON report. Input (optional): ``{"items": [numbers],
"greeting": str}``.
"""

from __future__ import annotations

import json
import sys

from pi_workflows import (
    NodeContext,
    Workflow,
    checkpoint,
    compute,
    edge,
    idempotent_effect,
    notify,
    seconds,
    shell,
)
from pi_workflows.authoring import JsonObject, JsonValue

_VERSION_SCRIPT = "import json, platform; print(json.dumps({'python': platform.python_version()}))"


def _items(ctx: NodeContext) -> list[JsonValue]:
    data = ctx.input if isinstance(ctx.input, dict) else {}
    items = data.get("items")
    return list(items) if isinstance(items, list) else [3, 1, 2]


def prepare(ctx: NodeContext) -> JsonObject:
    """Read the input, with defaults, into a small work order."""
    data = ctx.input if isinstance(ctx.input, dict) else {}
    greeting = data.get("greeting")
    numbers = [n for n in _items(ctx) if isinstance(n, int | float) and not isinstance(n, bool)]
    return {
        "greeting": greeting if isinstance(greeting, str) else "hello",
        "items": list(numbers),
    }


def summarize(ctx: NodeContext) -> JsonObject:
    """Sort the numbers and total them."""
    prepared = ctx.outputs["prepare"]
    assert isinstance(prepared, dict)
    items = prepared["items"]
    assert isinstance(items, list)
    numbers = sorted(n for n in items if isinstance(n, int | float) and not isinstance(n, bool))
    return {"sorted": list(numbers), "total": sum(numbers), "count": len(numbers)}


def announce(ctx: NodeContext) -> str:
    """The progress message."""
    summary = ctx.outputs["summarize"]
    assert isinstance(summary, dict)
    return f"Demo: sorted {summary['count']} numbers, total {summary['total']}."


def parse_version(ctx: NodeContext) -> JsonObject:
    """Parse the command's JSON line."""
    result = ctx.outputs["python_version"]
    assert isinstance(result, dict)
    stdout = result["stdout"]
    assert isinstance(stdout, str)
    parsed = json.loads(stdout.strip().splitlines()[-1])
    return {"python": str(parsed["python"])}


def report(ctx: NodeContext) -> JsonObject:
    """The run's output: everything gathered, as one JSON object."""
    prepared, summary, version = (
        ctx.outputs["prepare"],
        ctx.outputs["summarize"],
        ctx.outputs["parse_version"],
    )
    assert isinstance(prepared, dict)
    assert isinstance(summary, dict)
    assert isinstance(version, dict)
    return {
        "greeting": prepared["greeting"],
        "sorted": summary["sorted"],
        "total": summary["total"],
        "python": version["python"],
        "answer": ctx.outputs["ask"],
    }


workflow = Workflow(
    "demo",
    start="prepare",
    nodes={
        "prepare": compute(prepare),
        "summarize": compute(summarize),
        "announce": notify(announce),
        "python_version": shell(
            [sys.executable, "-c", _VERSION_SCRIPT],
            effect=idempotent_effect("demo-read-python-version"),
            timeout=seconds(30),
        ),
        "parse_version": compute(parse_version),
        "ask": checkpoint(
            {"question": "What should the demo report say? Any short answer will do."}
        ),
        "report": compute(report),
    },
    edges=[
        edge("prepare", "summarize"),
        edge("summarize", "announce"),
        edge("announce", "python_version"),
        edge("python_version", "parse_version"),
        edge("parse_version", "ask"),
        edge("ask", "report"),
    ],
    max_steps=20,
)
