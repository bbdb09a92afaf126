"""Which workflow a child runs, through a real server: a ``Workflow`` object of a
project-local module the parent imports (a mounted source of the parent; the child run
records its own source), and a ``fan_out`` of a workflow to itself, bounded by the depth
limit with one line."""

from __future__ import annotations

import pytest

from support.server import ServerProcess

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

HELPER = """
from pi_workflows import Workflow, compute

square = Workflow("square", start="sq", nodes={
    "sq": compute(lambda ctx: {"square": ctx.input["n"] * ctx.input["n"]}),
})
"""

PARENT = """
from pi_workflows import Workflow, compute, edge, fan_out, subworkflow

from shapes import square

workflow = Workflow(
    "squares",
    start="one",
    nodes={
        "one": subworkflow(square, input=lambda ctx: {"n": ctx.input["n"]}),
        "many": fan_out(square, items=lambda ctx: [1, 2, 3], input=lambda ctx, i: {"n": i}),
        "done": compute(lambda ctx: {"one": ctx.outputs["one"]["square"],
                                     "many": [c["output"]["square"]
                                              for c in ctx.outputs["many"]]}),
    },
    edges=[edge("one", "many"), edge("many", "done")],
)
"""

SELF = """
from pi_workflows import Workflow, compute, fan_out, switch

workflow = Workflow(
    "spiral",
    start="again",
    nodes={
        "again": fan_out("spiral", items=lambda ctx: [0], concurrency=1),
        "why": compute(lambda ctx: {"error": ctx.results["again"]["error"]}),
        "up": compute(lambda ctx: {"depth": len(ctx.outputs["again"])}),
    },
    edges=[switch("again", on="$result.outcome", cases={"failed": "why", "ok": "up"})],
)
"""


def test_a_workflow_object_of_a_helper_module_runs_as_a_child(server: ServerProcess) -> None:
    server.write_module("shapes", HELPER)
    server.write_workflow("squares", PARENT)
    parent = server.start_run("squares", {"n": 7})
    done = server.wait_status(parent, "completed", timeout=120)
    assert done["output"] == {"one": 49, "many": [1, 4, 9]}
    children = server.query(
        "SELECT r.workflow_name, s.source_kind, s.source_ref FROM runs r"
        " JOIN run_sources s USING (run_id) WHERE r.parent_run_id = ?",
        parent,
    )
    assert len(children) == 4
    assert {(name, kind) for name, kind, _ in children} == {("square", "file")}
    assert {ref.rsplit("/", 1)[-1] for _, _, ref in children} == {"shapes.py::square"}
    [(mounted,)] = server.query("SELECT mounted_json FROM run_sources WHERE run_id = ?", parent)
    assert "shapes.py" in mounted
    assert server.diagnose() == []


def test_a_fan_out_to_itself_stops_at_the_depth_limit_with_one_line(
    server: ServerProcess,
) -> None:
    server.write_workflow("spiral", SELF)
    root = server.start_run("spiral", {})
    assert server.wait_status(root, "completed", timeout=150)["output"] == {"depth": 1}
    depths = server.query(
        "SELECT MAX(depth), COUNT(*) FROM runs WHERE root_run_id = ? OR run_id = ?", root, root
    )
    assert depths == [(8, 9)]
    [(deepest,)] = server.query("SELECT run_id FROM runs WHERE depth = 8 AND root_run_id = ?", root)
    error = server.run(deepest)["output"]["error"]
    assert "runs nest at most 8 levels" in error
    assert len(error.splitlines()) == 1
    assert server.query("SELECT COUNT(*) FROM runs WHERE status != 'completed'") == [(0,)]
    assert server.diagnose() == []
