"""Regenerate docs/images/watch.svg: `python docs/images/watch_screenshot.py` from the repo.

Starts a private server, runs a small release workflow up to its human decision, opens
`pi-workflows watch RUN` in Textual's headless harness and exports the screen as SVG.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from support.server import running_server  # noqa: E402

from pi_workflows.cli.watch_app import WatchApp  # noqa: E402
from pi_workflows.cli.watch_app.app import RunScreen  # noqa: E402

WORKFLOW = """
from pi_workflows import (Workflow, choice, compute, edge, human_decision, idempotent_effect,
                          notify, shell, switch)

def plan(ctx):
    print("planning release of", ctx.input["version"])
    return {"version": ctx.input["version"], "changes": 14}

workflow = Workflow("release", start="plan", nodes={
    "plan": compute(plan),
    "test": shell(lambda ctx: ["sh", "-c", "echo 212 passed"], effect=idempotent_effect("tests")),
    "announce": notify(lambda ctx: f"Release {ctx.outputs['plan']['version']} is ready"),
    "approve": human_decision(title=lambda ctx: "Publish the release?",
                              choices=[choice("yes", "Publish"), choice("no", "Hold")]),
    "publish": compute(lambda ctx: {"published": True}),
    "hold": compute(lambda ctx: {"published": False}),
}, edges=[edge("plan", "test"), edge("test", "announce"), edge("announce", "approve"),
          switch("approve", on="$.choice", cases={"yes": "publish", "no": "hold"})])
"""


async def shoot(home: Path, run_id: str, out: Path) -> None:
    """Open the run in the watch view and save the screen once its view has arrived."""
    app = WatchApp(home, run_id=run_id)
    async with app.run_test(size=(112, 34)) as pilot:
        for _ in range(400):
            await pilot.pause(0.05)
            if isinstance(app.screen, RunScreen) and app.screen.view is not None:
                break
        await pilot.pause(0.3)
        out.write_text(app.export_screenshot(title="pi-workflows watch"))


def main() -> None:
    """Write the screenshot next to this script."""
    with tempfile.TemporaryDirectory() as root, running_server(Path(root)) as server:
        server.write_workflow("release", textwrap.dedent(WORKFLOW))
        run_id = server.start_run("release", {"version": "1.4.0"})
        server.wait_status(run_id, "waiting")
        asyncio.run(shoot(server.home, run_id, Path(__file__).with_name("watch.svg")))


if __name__ == "__main__":
    main()
