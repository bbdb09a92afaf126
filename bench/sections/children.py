"""Section 5c: child runs: a ``fan_out`` beside the same runs started by a client, and the
cost of a wide join to its parent.

Runs in the bench process, on one server of its own at ``PI_WORKFLOWS_MAX_RUNNERS=16``
(``children_capacity``).

1. **Fan-out against a client** (``warmup`` + ``children_reps`` rounds, the two measures
   in an order swapped every round): a parent whose ``fan_out`` starts ``children_count``
   one-node children (concurrency 16), then a node that stamps its wall clock:
   ``fanOutMs`` is ``run.start`` sent to that stamp (the children's runners, the join, and
   the parent's runner after it). Beside it, one client starts the same ``children_count``
   one-node runs one after another and waits for every one: ``clientMs`` is the first
   ``run.start`` sent to the last run's completing transaction (server clock, ms). The
   ratio is per round.

2. **A join of a thousand** (``children_join`` children, concurrency 16, once): what the
   parent itself costs while its children run, read from its history: the runners it got
   (``run.claimed``: one before the wait, one after the join), its queue entries
   (``run.resumed``) and its joins (``children.joined``). Each child's end is written to the
   parent inside that child's own terminal transaction (``child.ended``): the parent gets no
   transaction, no runner and no wake of its own per child.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from bench.context import Context
from bench.ourserver import BenchError, OurServer
from bench.stats import figure, ratios
from bench.workflows import write_child, write_fan_out

CAPACITY = 16
WAIT_SECONDS = 600.0


def _fan_out(server: OurServer, workflow: Any, count: int) -> tuple[float, str]:
    t0_wall = time.time_ns()
    receipt = server.client.start_run(str(workflow), {"children": count})
    run_id = str(receipt["runId"])
    view = server.wait_run(run_id, timeout=WAIT_SECONDS, poll=0.01)
    out = view.get("output") or {}
    if view.get("status") != "completed" or out.get("ok") != count:
        raise BenchError(f"the fan_out ended {view.get('status')}: {out or view.get('error')}")
    return (int(out["wallNs"]) - t0_wall) / 1e6, run_id


def _client(server: OurServer, workflow: Any, count: int) -> float:
    t0_wall = time.time_ns()
    run_ids = [str(server.client.start_run(str(workflow), item)["runId"]) for item in range(count)]
    last = 0
    for run_id in run_ids:
        view = server.wait_run(run_id, timeout=WAIT_SECONDS, poll=0.01)
        if view.get("status") != "completed":
            raise BenchError(f"a client-started run ended {view.get('status')}")
        last = max(last, int(view["finishedAt"]))
    return (last * 1_000_000 - t0_wall) / 1e6


def _parent_costs(server: OurServer, run_id: str) -> dict[str, int]:
    kinds: Counter[str] = Counter()
    after = 0
    while True:
        page = server.client.history(run_id, after=after, limit=1000)
        if not page:
            break
        kinds.update(str(event.get("type")) for event in page)
        after = int(page[-1]["revision"])
        if len(page) < 1000:
            break
    return {
        "runnersClaimed": kinds["run.claimed"],
        "joins": kinds["children.joined"],
        "childEndsRecorded": kinds["child.ended"] + kinds["children.joined"],
        "events": sum(kinds.values()),
    }


def run(ctx: Context) -> dict[str, Any]:
    """Measure and summarise; see the module docstring."""
    sizes = ctx.sizes
    server = OurServer(
        ctx.procs,
        ctx.section_dir("children"),
        extra_env={"PI_WORKFLOWS_MAX_RUNNERS": str(CAPACITY)},
    ).start()
    fan_wf = write_fan_out(server.project, CAPACITY)
    child_wf = write_child(server.project)
    count = sizes.children_count
    fan_ms: list[float] = []
    client_ms: list[float] = []
    try:
        for rep in range(sizes.warmup + sizes.children_reps):
            measured = rep >= sizes.warmup
            ctx.say(
                f"children: {'round ' + str(rep - sizes.warmup + 1) if measured else 'warm-up'}"
            )
            if rep % 2 == 0:
                fan, _ = _fan_out(server, fan_wf, count)
                alone = _client(server, child_wf, count)
            else:
                alone = _client(server, child_wf, count)
                fan, _ = _fan_out(server, fan_wf, count)
            if measured:
                fan_ms.append(fan)
                client_ms.append(alone)
        ctx.say(f"children: a join of {sizes.children_join}")
        join_ms, parent = _fan_out(server, fan_wf, sizes.children_join)
        costs = _parent_costs(server, parent)
    finally:
        server.stop()
    return {
        "method": (
            f"capacity {CAPACITY}: a fan_out of {count} one-node children (concurrency "
            f"{CAPACITY}) run.start -> its next node's stamp, beside one client starting the "
            f"same {count} runs and waiting for all (first start -> last completion); then a "
            f"fan_out of {sizes.children_join}, whose parent's history is counted"
        ),
        "capacity": CAPACITY,
        "children": count,
        "reps": sizes.children_reps,
        "fanOutMs": figure(fan_ms),
        "clientMs": figure(client_ms),
        "ratio": ratios(fan_ms, client_ms),
        "join": {"children": sizes.children_join, "ms": round(join_ms, 1), **costs},
    }
