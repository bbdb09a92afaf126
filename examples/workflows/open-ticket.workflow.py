"""open-ticket: an action with an idempotent effect.

The action passes `ctx.effect_key` to the outside system (here a directory standing in for
a ticket service) as its idempotency key, so a retry after a crash finds the ticket it
already created instead of opening a second one. Input: {"title": str, "outbox": path}.
"""

from pathlib import Path

from ticket_outbox import create_ticket

from pi_workflows import ActionContext, Workflow, action, edge, idempotent_effect, notify


def open_ticket(ctx: ActionContext) -> dict[str, object]:
    data = ctx.input if isinstance(ctx.input, dict) else {}
    title = str(data.get("title") or "Follow up")
    outbox = Path(str(data.get("outbox") or ".ticket-outbox"))
    ctx.publish_update({"status": "creating", "title": title})
    return create_ticket(outbox, ctx.effect_key, title)


workflow = Workflow(
    "open-ticket",
    start="open",
    nodes={
        "open": action(open_ticket, effect=idempotent_effect("ticket-create")),
        "done": notify(lambda ctx: f"Ticket {ctx.outputs['open']['id']} is open.", kind="final"),
    },
    edges=[edge("open", "done")],
)
