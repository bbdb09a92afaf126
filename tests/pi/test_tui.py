"""A smoke test of the Pi terminal UI under tmux: `/workflow list` and a decision dialog."""

from __future__ import annotations

from pathlib import Path

from pi.support.mock_provider import MockProvider, text
from pi.support.pi_rpc import PiProcess
from pi.support.pi_tui import TuiPi

from support.server import ServerProcess

APPROVE = """
from pi_workflows import Workflow, choice, compute, human_decision, switch

workflow = Workflow(
    "approve",
    start="approve",
    nodes={
        "approve": human_decision(
            title="Ship the build?",
            choices=[choice("ship", "Ship it", "Publish the build now"), choice("hold", "Hold")],
        ),
        "shipped": compute(lambda ctx: {"result": "shipped"}),
        "held": compute(lambda ctx: {"result": "held"}),
    },
    edges=[switch("approve", on="$.choice", cases={"ship": "shipped", "hold": "held"})],
)
"""

SESSION = "tui-session"


def test_the_tui_lists_workflows_shows_a_decision_and_decides_it_in_a_dialog(
    root: Path, server: ServerProcess, provider: MockProvider
) -> None:
    """In the real TUI, `/workflow list` shows the project's workflows; a decision of this
    session appears as a card and in the status line; `/workflow decide RUN` opens a select
    dialog whose first choice, picked with Enter, decides the run."""
    path = server.write_workflow("approve", APPROVE)
    provider.on(lambda _request: True, text("The build was shipped."))
    pi = PiProcess(
        root,
        provider,
        cwd=server.project,
        env={"PI_WORKFLOWS_HOME": str(server.home)},
        session_id=SESSION,
    )
    with TuiPi(pi) as tui:
        tui.wait_screen(lambda s: "mock-model" in s, "Pi's footer")
        tui.type("/workflow list ")  # the trailing space closes the subcommand completion
        tui.key("Enter")
        listed = tui.wait_screen(lambda s: "approve (project)" in s, "the workflow list")
        run_id = server.start_run("approve", origin_session=SESSION)
        card = tui.wait_screen(
            lambda s: "for you, not the model" in s and "decision waiting" in s, "the card"
        )
        tui.type(f"/workflow decide {run_id}")
        tui.key("Enter")
        dialog = tui.wait_screen(lambda s: "Ship it [ship]" in s, "the select dialog")
        tui.key("Enter")
        decided = tui.wait_screen(lambda s: f"Decided ship for run {run_id}" in s, "the result")

    assert str(path) in listed
    assert "Decision: Ship the build?" in card
    assert f"/workflow decide {run_id}" in card
    assert "Ship the build?" in dialog
    assert "Hold [hold]" in dialog
    assert "Decided ship" in decided
    view = server.wait_status(run_id, {"completed", "failed"})
    assert view["output"] == {"result": "shipped"}
