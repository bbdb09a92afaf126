"""release: a person approves, then the reusable `deploy-gate` workflow runs as a child.

`approve` is a human decision. On "ship", `deploy` starts `deploy-gate` (the file beside this
one: a relative path is taken from this file's directory) as a child run with the version,
and waits for it with no runner; the child waits for the deploy system's `deployed` event,
which goes to the child run (`pi-workflows run show RUN_ID` of this run lists it). The
child's final output is the node's output; a failed or cancelled child routes to `failed`.

    pi-workflows run start release --input '{"version": "1.4.2"}'
"""

from pi_workflows import Workflow, choice, human_decision, minutes, notify, subworkflow, switch

workflow = Workflow(
    "release",
    start="approve",
    nodes={
        "approve": human_decision(
            title=lambda ctx: f"Deploy {ctx.input.get('version', 'the build')}?",
            choices=[choice("ship", "Ship it"), choice("hold", "Hold")],
            on_timeout=(minutes(30), "hold"),
        ),
        "deploy": subworkflow(
            "deploy-gate.workflow.py",
            input=lambda ctx: {"version": ctx.input.get("version", "0.0.0")},
        ),
        "done": notify(lambda ctx: f"Released: {ctx.outputs['deploy']['message']}", kind="final"),
        "failed": notify(
            lambda ctx: f"The deploy did not finish: {ctx.results['deploy']['error']}",
            kind="final",
        ),
        "held": notify("The release is on hold.", kind="final"),
    },
    edges=[
        switch("approve", on="$.choice", cases={"ship": "deploy", "hold": "held"}),
        switch("deploy", on="$result.outcome", cases={"ok": "done", "failed": "failed"}),
    ],
)
