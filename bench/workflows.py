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


_SLEEP_FAR = '''"""Bench: sleep {days} days (far in the future), then one compute node."""

from pi_workflows import Workflow, compute, edge, sleep

workflow = Workflow(
    "{name}",
    start="nap",
    nodes={{
        "nap": sleep({days} * 86_400),
        "done": compute(lambda ctx: {{"slept": ctx.outputs["nap"]}}),
    }},
    edges=[edge("nap", "done")],
)
'''

_SLEEP_UNTIL = '''"""Bench: sleep until the input's aware datetime, then a stamped node."""

import time
from datetime import datetime

from pi_workflows import Workflow, compute, edge, sleep


def woke(ctx):
    return {{"nap": ctx.outputs["nap"], "wallNs": time.time_ns(), "t": time.monotonic_ns()}}


workflow = Workflow(
    "{name}",
    start="nap",
    nodes={{
        "nap": sleep(until=lambda ctx: datetime.fromisoformat(ctx.input["at"])),
        "next": compute(woke),
    }},
    edges=[edge("nap", "next")],
)
'''

_RETRY_ONCE = '''"""Bench: one compute node that fails its first try, retried at once (delay 0).

The first try leaves its start stamp in the input's marker file and raises; the second
finds the file and returns both stamps (a compute node writing a file breaks the authoring
rule on purpose: the bench needs to know which try it is in).
"""

import os
import time

from pi_workflows import Workflow, compute, retry

PAD = "x" * 56


def flaky(ctx):
    entered = time.monotonic_ns()
    marker = ctx.input["marker"]
    if not os.path.exists(marker):
        with open(marker, "w") as handle:
            handle.write(str(entered))
        raise RuntimeError("the first try fails")
    with open(marker) as handle:
        first = int(handle.read())
    return {{"i": 0, "t": entered, "first": first, "pad": PAD}}


workflow = Workflow(
    "{name}",
    start="n0",
    nodes={{"n0": compute(flaky, retry=retry(attempts=2, delay=0))}},
    edges=[],
)
'''

_EVENT = '''"""Bench: wait for the event "go" (no validate, so the signal is not held), then a
node that stamps its start."""

import time

from pi_workflows import Workflow, compute, edge, wait_event

workflow = Workflow(
    "{name}",
    start="go",
    nodes={{
        "go": wait_event("go"),
        "next": compute(lambda ctx: {{"t": time.monotonic_ns(), "event": ctx.outputs["go"]}}),
    }},
    edges=[edge("go", "next")],
)
'''


_CHILD = '''"""Bench: one compute node (a child run of ``fanout``, or a run a client starts):
its input is the item; it stamps its start."""

import time

from pi_workflows import Workflow, compute

workflow = Workflow(
    "{name}",
    start="n0",
    nodes={{"n0": compute(lambda ctx: {{"item": ctx.input, "t": time.monotonic_ns()}})}},
    edges=[],
)
'''

_FAN_OUT = '''"""Bench: ``fan_out`` of ``input.children`` runs of ``{child}`` (the items
0 .. n - 1), at most {concurrency} at once, then a node that stamps its start."""

import time

from pi_workflows import Workflow, compute, edge, fan_out


def joined(ctx):
    children = ctx.outputs["spread"]
    ok = sum(1 for child in children if child["outcome"] == "ok")
    stamps = {{"wallNs": time.time_ns(), "t": time.monotonic_ns()}}
    return {{"children": len(children), "ok": ok, **stamps}}


workflow = Workflow(
    "{name}",
    start="spread",
    nodes={{
        "spread": fan_out(
            "{child}.workflow.py",
            items=lambda ctx: list(range(ctx.input["children"])),
            concurrency={concurrency},
        ),
        "joined": compute(joined),
    }},
    edges=[edge("spread", "joined")],
)
'''


def write_sleep_far(project: Path, days: int = 30) -> Path:
    """``sleepfar.workflow.py``: a sleep of ``days`` days, then one compute node."""
    return _write(project, "sleepfar", _SLEEP_FAR.format(name="sleepfar", days=days))


def write_sleep_until(project: Path) -> Path:
    """``sleepuntil.workflow.py``: sleep until ``input.at`` (ISO-8601 with a UTC offset),
    then a node stamping ``wallNs`` and ``t``; the run's output carries the sleep's
    ``{"until", "lateMs"}`` as ``nap``."""
    return _write(project, "sleepuntil", _SLEEP_UNTIL.format(name="sleepuntil"))


def write_retry_once(project: Path) -> Path:
    """``retryonce.workflow.py``: a compute node failing its first try (``input.marker``
    says which try it is), ``retry(attempts=2, delay=0)``; output ``first`` and ``t``: the
    two tries' start stamps."""
    return _write(project, "retryonce", _RETRY_ONCE.format(name="retryonce"))


def write_event(project: Path) -> Path:
    """``event.workflow.py``: ``wait_event("go")`` without validate, then a stamped node."""
    return _write(project, "event", _EVENT.format(name="event"))


def write_child(project: Path) -> Path:
    """``child.workflow.py``: one compute node; output ``{"item": input, "t"}``."""
    return _write(project, "child", _CHILD.format(name="child"))


def write_fan_out(project: Path, concurrency: int) -> Path:
    """``fanoutC.workflow.py`` (and ``child.workflow.py`` beside it): ``fan_out`` of
    ``input.children`` one-node children at most ``concurrency`` at once, then a node
    stamping ``wallNs`` and ``t``; output ``children`` and ``ok`` (the children that
    completed)."""
    write_child(project)
    name = f"fanout{concurrency}"
    source = _FAN_OUT.format(name=name, child="child", concurrency=concurrency)
    return _write(project, name, source)


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
