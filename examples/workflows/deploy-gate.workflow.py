"""deploy-gate: wait for the deploy system to say it is done, or give up after an hour.

`announce` tells the origin session what it waits for. `deployed` waits with no runner for
the event `deployed` (the deploy system runs `pi-workflows run signal RUN_ID deployed
--data '{"version": "1.4.2", "status": "ok"}' --idempotency-key deploy-1.4.2`). An event
sent before the run gets there is kept, and the same key never counts twice. `validate`
refuses an event for another version (its sender hears why, and the wait goes on); after an
hour the wait times out and `$result.outcome` routes to `late`.

    pi-workflows run start deploy-gate --input '{"version": "1.4.2"}'
"""

from typing import Any

from pi_workflows import NodeContext, Rejected, Workflow, edge, minutes, notify, switch, wait_event


def same_version(data: Any, ctx: NodeContext) -> None:
    wanted = ctx.input.get("version") if isinstance(ctx.input, dict) else None
    if not isinstance(data, dict) or data.get("version") != wanted:
        raise Rejected(f'this run waits for version {wanted!r}; send {{"version": "{wanted}"}}')


workflow = Workflow(
    "deploy-gate",
    start="announce",
    nodes={
        "announce": notify(lambda ctx: f"Waiting for the deploy of {ctx.input['version']}."),
        "deployed": wait_event("deployed", timeout=minutes(60), validate=same_version),
        "done": notify(
            lambda ctx: (
                f"Deployed {ctx.outputs['deployed']['version']}:"
                f" {ctx.outputs['deployed'].get('status', 'ok')}."
            ),
            kind="final",
        ),
        "late": notify(lambda ctx: "No deploy within the hour.", kind="final"),
    },
    edges=[
        edge("announce", "deployed"),
        switch("deployed", on="$result.outcome", cases={"ok": "done", "timed_out": "late"}),
    ],
)
