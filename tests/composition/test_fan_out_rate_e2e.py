"""``fan_out(rate=...)`` through a real server, runners and a restart: children start no
faster than the rate in any window, as recorded in the store (``run_children.started_at``),
also when the server is killed and started again in the middle; a bad rate is refused
at load in one line.

The tests poll the store for progress; they never sleep to make time pass. They assert the
spacing of the recorded start times, which is what the rate bounds.
"""

from __future__ import annotations

import pytest

from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

LEAF = """
from pi_workflows import Workflow, compute

workflow = Workflow("leaf", start="a", nodes={"a": compute(lambda ctx: {"n": ctx.input["n"]})},
                    edges=[])
"""

PACED = """
from pi_workflows import Workflow, compute, edge, fan_out

workflow = Workflow(
    "paced",
    start="items",
    nodes={
        "items": compute(lambda ctx: {"items": list(range(ctx.input["count"]))}),
        "each": fan_out("leaf", items=lambda ctx: ctx.outputs["items"]["items"],
                        input=lambda ctx, item: {"n": item}, concurrency=10, rate=RATE),
        "done": compute(lambda ctx: {"total": sum(c["output"]["n"] for c in ctx.outputs["each"])}),
    },
    edges=[edge("items", "each"), edge("each", "done")],
)
"""


def _starts(server: ServerProcess, parent: str) -> list[int]:
    return [
        int(row[0])
        for row in server.query(
            "SELECT c.started_at FROM run_children c JOIN run_joins j USING (wait_id)"
            " WHERE j.parent_run_id = ? AND c.started_at IS NOT NULL ORDER BY c.started_at",
            parent,
        )
    ]


def _spaced(starts: list[int], count: int, period_ms: int) -> list[int]:
    """The gaps between each start and the one ``count`` later: all at least the period
    when no window of ``period_ms`` holds more than ``count`` starts."""
    return [starts[i + count] - starts[i] for i in range(len(starts) - count)]


def test_children_start_no_faster_than_the_rate(server: ServerProcess) -> None:
    """6 items at ``2/s`` with room for 10 at once: starts in pairs a second apart (each
    start at least 1000 ms after the one two before it); the run completes with every
    child's output."""
    server.write_workflow("leaf", LEAF)
    server.write_workflow("paced", PACED.replace("RATE", repr("2/s")))
    parent = server.start_run("paced", {"count": 6})
    done = server.wait_status(parent, {"completed", "failed"}, 60)
    assert done["status"] == "completed", done
    assert done["output"] == {"total": 15}
    starts = _starts(server, parent)
    assert len(starts) == 6
    assert min(_spaced(starts, 2, 1000)) >= 1000, starts
    assert server.diagnose() == []


def test_a_restarted_server_keeps_the_rate_of_the_starts_it_recorded(
    server: ServerProcess,
) -> None:
    """5 items at ``3/min``: three start at once; the server is SIGKILLed and started
    again; while the window holds them back ``run show`` says when the next child starts;
    the new server starts the other two only a minute after the first three (it reads the
    recorded starts), and the run completes."""
    server.write_workflow("leaf", LEAF)
    server.write_workflow("paced", PACED.replace("RATE", repr("3/min")))
    parent = server.start_run("paced", {"count": 5})
    wait_for(lambda: len(_starts(server, parent)) >= 3, 30, "the first three to start")
    server.kill()
    server.start()
    view = server.wait_status(parent, "waiting", 30)
    assert "its rate starts the next one at" in view["wait"]["text"], view["wait"]
    shown = server.cli("run", "show", parent)
    assert "its rate starts the next one at" in shown.stdout, shown.stdout
    assert len(_starts(server, parent)) == 3
    wait_for(
        lambda: (
            server.query("SELECT status FROM runs WHERE run_id = ?", parent)[0][0]
            in ("completed", "failed")
        ),
        150,
        "the paced run to end after the restart",
    )
    done = server.wait_status(parent, {"completed", "failed"}, 10)
    assert done["status"] == "completed", done
    starts = _starts(server, parent)
    assert len(starts) == 5
    assert starts[3] - starts[0] >= 60_000, starts
    assert min(_spaced(starts, 3, 60_000)) >= 60_000, starts
    assert server.diagnose() == []


@pytest.mark.parametrize("rate", ["10/day", "0/min", "ten/min", "10 per minute", "10/m"])
def test_a_bad_rate_is_refused_at_load_in_one_line(server: ServerProcess, rate: str) -> None:
    """A rate that is not ``N/s``, ``N/min`` or ``N/h`` fails the workflow's load: one
    line naming what a rate looks like, and no run is created."""
    server.write_workflow("leaf", LEAF)
    server.write_workflow("paced", PACED.replace("RATE", repr(rate)))
    refused = server.cli("run", "start", "paced", "--input", '{"count": 1}')
    assert refused.returncode != 0
    lines = [line for line in refused.stderr.strip().splitlines() if line]
    assert len(lines) == 1, refused.stderr
    assert "fan_out rate must be 'N/s', 'N/min' or 'N/h'" in lines[0]
    assert repr(rate) in lines[0]
    assert server.query("SELECT count(*) FROM runs") == [(0,)]
