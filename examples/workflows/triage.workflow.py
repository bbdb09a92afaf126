"""triage: an agent decision, a person's approval, a manual effect and failure routing.

`classify` is a `decision` (an agent step that must pick a route). A person approves the
fix; `apply` is a manual effect (never retried: if its outcome is uncertain the run stops
for review). Its failure is routed through `$result.outcome` to a checkpoint. `summary`
takes the model's visible reply as its output (`assistant_message()`).
"""

from pi_workflows import (
    ActionContext,
    NodeContext,
    Workflow,
    action,
    agent,
    assistant_message,
    checkpoint,
    choice,
    compute,
    decision,
    edge,
    human_decision,
    idempotent_effect,
    manual_effect,
    minutes,
    shell,
    switch,
)


def items(ctx: NodeContext) -> dict[str, object]:
    data = ctx.input if isinstance(ctx.input, dict) else {}
    found = data.get("items")
    return {"items": found if isinstance(found, list) else []}


def apply_fix(ctx: ActionContext) -> dict[str, object]:
    # A real workflow would change something here; a manual effect is never retried.
    return {"applied": True, "key": ctx.effect_key}


workflow = Workflow(
    "triage",
    start="collect",
    max_steps=40,
    nodes={
        "collect": compute(items),
        "classify": decision(
            prompt=lambda ctx: f"Classify these items: {ctx.outputs['collect']['items']}",
            routes={"fix": "Something needs fixing", "ignore": "Nothing to do"},
            timeout=minutes(10),
        ),
        "approve": human_decision(
            title="Apply the fix?",
            choices=[choice("yes", "Apply"), choice("no", "Skip")],
            on_timeout=(minutes(30), "no"),
        ),
        "apply": action(apply_fix, effect=manual_effect("apply-fix")),
        "log": shell(["git", "log", "-1", "--oneline"], effect=idempotent_effect("git-read")),
        "ask": checkpoint(lambda ctx: {"question": "The fix failed. Anything to note?"}),
        "summary": agent(
            prompt="Summarise what this triage run did in two sentences.",
            expected_output=assistant_message(),
        ),
    },
    edges=[
        edge("collect", "classify"),
        switch("classify", on="$.route", cases={"fix": "approve", "ignore": "summary"}),
        switch("approve", on="$.choice", cases={"yes": "apply", "no": "summary"}),
        switch("apply", on="$result.outcome", cases={"ok": "log", "failed": "ask"}),
        edge("log", "summary"),
        edge("ask", "summary"),
    ],
)
