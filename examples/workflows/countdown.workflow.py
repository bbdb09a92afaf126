"""countdown: a compute loop bounded by a switch.

`tick` counts down from the input's "from" (default 5) by visiting itself again until the
switch on `$.done` sends it to `finish`. `max_steps` bounds the loop: a start value that
needs more steps than that fails the run with `maxStepsExceeded` instead of spinning.
"""

from pi_workflows import NodeContext, Workflow, compute, switch


def tick(ctx: NodeContext) -> dict[str, object]:
    previous = ctx.outputs.get("tick")
    if isinstance(previous, dict) and isinstance(previous.get("remaining"), int):
        remaining = previous["remaining"] - 1
    else:
        data = ctx.input if isinstance(ctx.input, dict) else {}
        start = data.get("from")
        remaining = start if isinstance(start, int) and start >= 0 else 5
    return {"remaining": remaining, "done": remaining <= 0, "visit": ctx.visit}


workflow = Workflow(
    "countdown",
    start="tick",
    nodes={
        "tick": compute(tick),
        "finish": compute(lambda ctx: {"ticks": ctx.outputs["tick"]["visit"]}),
    },
    edges=[switch("tick", on="$.done", cases={True: "finish", False: "tick"})],
    max_steps=30,
)
