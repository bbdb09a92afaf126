"""Workflow sources the composition tests write into a real project.

``leaf``: one compute node that records its start and its end in a witness file outside
the database (``{"run", "item", "at", "e": start|end}``), sleeps ``sleep`` seconds, and
fails when its input says ``fail``; its output is ``{"double": 2 * item}``. ``fan``: a
``fan_out`` of ``leaf`` over ``items`` (options substituted), routed by outcome.
``wrap``: a ``subworkflow`` of ``leaf`` routed by outcome. ``gleaf`` (``GATED_LEAF``): like
``leaf``, but its node holds until the file its input names as ``release`` exists, so only
a pause (or a kill) stops a leaf that started: a test never mistakes a finished leaf for a
paused one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LEAF = """
import json
import time

from pi_workflows import Workflow, compute


def _mark(ctx, event):
    with open(ctx.input["witness"], "a") as out:
        out.write(json.dumps({"run": ctx.run_id, "item": ctx.input["item"], "e": event,
                              "at": time.time()}) + "\\n")


def work(ctx):
    _mark(ctx, "start")
    time.sleep(ctx.input.get("sleep", 0))
    if ctx.input.get("fail"):
        raise ValueError(f"item {ctx.input['item']} fails")
    _mark(ctx, "end")
    return {"double": ctx.input["item"] * 2}


workflow = Workflow("leaf", start="work", nodes={"work": compute(work)})
"""

GATED_LEAF = """
import json, os, time
from pathlib import Path
from pi_workflows import Workflow, compute


def _mark(ctx, event):
    with open(ctx.input["witness"], "a") as out:
        out.write(json.dumps({"run": ctx.run_id, "item": ctx.input["item"], "e": event,
                              "at": time.time()}) + "\\n")


def work(ctx):
    _mark(ctx, "start")
    while not Path(ctx.input["release"]).exists():
        time.sleep(0.02)  # held until the test releases it, or its runner is stopped
    _mark(ctx, "end")
    return {"double": ctx.input["item"] * 2}


workflow = Workflow("gleaf", start="work", nodes={"work": compute(work)})
"""

FAN = """
from pi_workflows import Workflow, compute, fan_out, switch


def child_input(ctx, item):
    options = ctx.input.get("options", {})
    return {"item": item, "witness": ctx.input["witness"], **options.get(str(item), {}),
            "sleep": options.get(str(item), {}).get("sleep", ctx.input.get("sleep", 0))}


workflow = Workflow(
    "fan",
    start="each",
    nodes={
        "each": fan_out("leaf", items=lambda ctx: ctx.input["items"], input=child_input,
                        concurrency=CONCURRENCY, fail_fast=FAIL_FAST),
        "sum": compute(lambda ctx: {"total": sum(c["output"]["double"]
                                                 for c in ctx.outputs["each"])}),
        "report": compute(lambda ctx: {"error": ctx.results["each"]["error"],
                                       "children": ctx.results["each"]["details"]["children"]}),
    },
    edges=[switch("each", on="$result.outcome", cases={"ok": "sum", "failed": "report"})],
)
"""

WRAP = """
from pi_workflows import Workflow, compute, subworkflow, switch

workflow = Workflow(
    "wrap",
    start="one",
    nodes={
        "one": subworkflow("leaf", input=lambda ctx: {"item": ctx.input["item"],
                                                      "witness": ctx.input["witness"],
                                                      "sleep": ctx.input.get("sleep", 0),
                                                      "fail": ctx.input.get("fail", False)}),
        "done": compute(lambda ctx: {"child": ctx.outputs["one"]}),
        "failed": compute(lambda ctx: {"error": ctx.results["one"]["error"]}),
    },
    edges=[switch("one", on="$result.outcome", cases={"ok": "done", "failed": "failed"})],
)
"""


def fan(concurrency: int = 2, fail_fast: bool = False) -> str:
    """The ``fan`` workflow with its options."""
    return FAN.replace("CONCURRENCY", str(concurrency)).replace("FAIL_FAST", str(fail_fast))


def witnessed(witness: Path) -> list[dict[str, Any]]:
    """Every mark the leaves wrote, in order."""
    if not witness.exists():
        return []
    return [json.loads(line) for line in witness.read_text().splitlines() if line.strip()]


def most_at_once(marks: list[dict[str, Any]]) -> int:
    """The most leaves that had started and not yet ended at one moment."""
    live = best = 0
    for mark in sorted(marks, key=lambda m: (m["at"], m["e"] == "start")):
        live += 1 if mark["e"] == "start" else -1
        best = max(best, live)
    return best
