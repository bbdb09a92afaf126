"""typed-plan: typed contracts with JSON Schema dicts (a Pydantic model works the same way).

The run's input must be `{"files": [paths]}` (a wrong input is refused at `run start`, naming
the wrong field); the model's plan must match `PLAN` (a wrong one is sent back with the path of
the wrong field, before `validate` runs); the person's approval must match `APPROVAL`. The
expected output the model reads is generated from the schema.
"""

from typing import Any

from pi_workflows import NodeContext, Rejected, Workflow, agent, checkpoint, compute, edge

JOB = {
    "type": "object",
    "properties": {"files": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
    "required": ["files"],
}
PLAN = {
    "type": "object",
    "title": "Plan",
    "properties": {
        "steps": {
            "type": "array",
            "description": "one edit per file",
            "items": {
                "type": "object",
                "properties": {"file": {"type": "string"}, "edit": {"type": "string"}},
                "required": ["file", "edit"],
            },
        },
        "risk": {"enum": ["low", "medium", "high"], "description": "how risky the edits are"},
    },
    "required": ["steps", "risk"],
    "additionalProperties": False,
}
APPROVAL = {
    "type": "object",
    "properties": {"approve": {"type": "boolean"}, "comment": {"type": "string"}},
    "required": ["approve"],
}


def covers_every_file(plan: dict[str, Any], ctx: NodeContext) -> None:
    # The plan already matched PLAN: every step has a "file".
    planned = {step["file"] for step in plan["steps"]}
    missing = [f for f in ctx.input["files"] if f not in planned]
    if missing:
        raise Rejected(f"the plan has no step for {', '.join(missing)}")


workflow = Workflow(
    "typed-plan",
    start="plan",
    input=JOB,
    nodes={
        "plan": agent(
            lambda ctx: f"Plan one edit for each of these files: {', '.join(ctx.input['files'])}",
            output=PLAN,
            validate=covers_every_file,
        ),
        "approve": checkpoint(
            lambda ctx: {"question": "Apply this plan?", "risk": ctx.outputs["plan"]["risk"]},
            answer=APPROVAL,
        ),
        "report": compute(
            lambda ctx: {"plan": ctx.outputs["plan"], "approved": ctx.outputs["approve"]["approve"]}
        ),
    },
    edges=[edge("plan", "approve"), edge("approve", "report")],
)
