"""release-approval: a human decision with a timeout default.

Only a person can answer (the model-facing tool refuses protected decisions). If nobody
answers within 30 minutes the decision takes "hold" by itself. The switch on `$.choice`
must cover every declared choice; the graph check refuses it otherwise.
"""

from pi_workflows import Workflow, choice, human_decision, minutes, notify, switch

workflow = Workflow(
    "release-approval",
    start="approve",
    nodes={
        "approve": human_decision(
            title=lambda ctx: f"Release {ctx.input.get('version', 'the build')} now?",
            choices=[
                choice("ship", "Ship it", "Publish the release now"),
                choice("hold", "Hold", "Keep the release for later"),
            ],
            on_timeout=(minutes(30), "hold"),
        ),
        "shipped": notify("The release was approved.", kind="final"),
        "held": notify(
            lambda ctx: (
                "The release is on hold (nobody answered in time)."
                if ctx.outputs["approve"]["decidedBy"] == "timeout"
                else "The release is on hold."
            ),
            kind="final",
        ),
    },
    edges=[switch("approve", on="$.choice", cases={"ship": "shipped", "hold": "held"})],
)
