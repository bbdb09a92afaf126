"""The workflow files the bench runs on pi-workflows, written into a temp project.

Runs in the bench process (it only writes source text; the runner children execute it).
Every node is a no-op ``compute`` whose output is about 100 bytes of JSON:
``{"i": index, "t": time.monotonic_ns(), "pad": "..."}``. ``CLOCK_MONOTONIC`` is one clock
for every process on Linux, so the bench compares these stamps with its own. The last node
also copies the first node's stamp (and the gate node's, for the recovery shape) into its
output, which becomes the run's output: one ``run.get`` gives every mark the bench needs.
"""

from __future__ import annotations

from pathlib import Path

_CHAIN = '''"""Bench: {n} no-op compute nodes in a chain."""

import time

from pi_workflows import Workflow, compute, edge

N = {n}
PAD = "x" * 56


def make(i):
    def run(ctx):
        out = {{"i": i, "t": time.monotonic_ns(), "pad": PAD}}
        if i == N - 1:
            out["first"] = ctx.outputs["n0"]["t"] if N > 1 else out["t"]
        return out

    return run


workflow = Workflow(
    "{name}",
    start="n0",
    max_steps=N + 5,
    nodes={{f"n{{i}}": compute(make(i)) for i in range(N)}},
    edges=[edge(f"n{{i}}", f"n{{i + 1}}") for i in range(N - 1)],
)
'''

_GATE = '''"""Bench: {n} no-op compute nodes; node n{k} waits for the input's gate file."""

import os
import time

from pi_workflows import Workflow, compute, edge

N = {n}
K = {k}
PAD = "x" * 56


def make(i):
    def run(ctx):
        entered = time.monotonic_ns()
        if i == K:
            marker = ctx.input["marker"]
            with open(marker + ".tmp", "w") as handle:
                handle.write(str(os.getpid()))
            os.replace(marker + ".tmp", marker)
            while not os.path.exists(ctx.input["gate"]):
                time.sleep(0.002)
        out = {{"i": i, "t": entered, "pad": PAD}}
        if i == N - 1:
            out["first"] = ctx.outputs["n0"]["t"]
            out["gate"] = ctx.outputs[f"n{{K}}"]["t"]
        return out

    return run


workflow = Workflow(
    "{name}",
    start="n0",
    max_steps=N + 5,
    nodes={{f"n{{i}}": compute(make(i)) for i in range(N)}},
    edges=[edge(f"n{{i}}", f"n{{i + 1}}") for i in range(N - 1)],
)
'''

_PARK = '''"""Bench: wait at a checkpoint, then one compute node."""

from pi_workflows import Workflow, checkpoint, compute, edge

workflow = Workflow(
    "{name}",
    start="ask",
    nodes={{
        "ask": checkpoint({{"question": "go on?"}}),
        "done": compute(lambda ctx: {{"answer": ctx.outputs["ask"]}}),
    }},
    edges=[edge("ask", "done")],
)
'''


_SUBMIT = '''"""Bench: a checkpoint whose answer a runner validates, then a stamped node."""

import time

from pi_workflows import Workflow, checkpoint, compute, edge


def check(answer, ctx):
    return None  # accepts: the cost measured is the validation runner, not this body


workflow = Workflow(
    "{name}",
    start="ask",
    nodes={{
        "ask": checkpoint({{"question": "go on?"}}, validate=check),
        "next": compute(lambda ctx: {{"t": time.monotonic_ns()}}),
    }},
    edges=[edge("ask", "next")],
)
'''


def write_submit(project: Path) -> Path:
    """``submit.workflow.py``: a validated checkpoint, then a node that stamps its start."""
    return _write(project, "submit", _SUBMIT.format(name="submit"))


def write_chain(project: Path, n: int) -> Path:
    """``chainN.workflow.py``: ``n`` no-op compute nodes; returns its path."""
    name = f"chain{n}"
    return _write(project, name, _CHAIN.format(n=n, name=name))


def write_gate(project: Path, n: int, k: int) -> Path:
    """``gateN.workflow.py``: ``n`` nodes, node ``n{k}`` blocks on ``input.gate``."""
    if not 0 < k < n - 1:
        raise ValueError("the gate node must have nodes before and after it")
    name = f"gate{n}"
    return _write(project, name, _GATE.format(n=n, k=k, name=name))


def write_park(project: Path) -> Path:
    """``park.workflow.py``: a checkpoint, then one compute node."""
    return _write(project, "park", _PARK.format(name="park"))


def _write(project: Path, name: str, source: str) -> Path:
    project.mkdir(parents=True, exist_ok=True)
    path = project / f"{name}.workflow.py"
    path.write_text(source, encoding="utf-8")
    return path
