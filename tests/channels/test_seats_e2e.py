"""An audience that leaves out `pi` or `web` keeps the decision out of that seat: the origin
session is not presented its card, the page shows it as addressed elsewhere, and it is
still answered on any seat that answers with `decision.answer` (first valid answer wins)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.web.run_page import _waiting

from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

SESSION = "session-seats-1"

ASK = """
from pi_workflows import Workflow, choice, human_decision

workflow = Workflow(
    "ask",
    start="ask",
    nodes={"ask": human_decision("Go?", [choice("yes"), choice("no")], audience=AUDIENCE)},
    edges=[],
)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path)
    added = process.cli(
        "channel", "add", "desk", "--kind", "notify", "--url", "json://127.0.0.1:9/x"
    )
    assert added.returncode == 0, added.stderr
    assert process.cli("audience", "set", "away", "--channels", "desk").returncode == 0
    assert process.cli("audience", "set", "here", "--channels", "pi,web,desk").returncode == 0
    process.start()
    yield process
    process.cleanup()


def _decision_run(server: ServerProcess, audience: str) -> tuple[str, dict[str, Any]]:
    server.write_workflow("ask", ASK.replace("AUDIENCE", repr(audience)))
    run_id = server.start_run("ask", origin_session=SESSION)
    view = server.wait_status(run_id, "waiting")
    return run_id, view


def _session_kinds(server: ServerProcess) -> list[str]:
    with server.client() as client:
        found = client.get_session(SESSION)
    session = found.get("session", found)
    return [m["kind"] for m in session["messages"]]


def test_a_decision_for_an_audience_without_pi_or_web_is_not_offered_there(
    server: ServerProcess,
) -> None:
    """Seats `desk` only: the request records its seats, the origin session's view has no
    decision card, the page's waiting section says where it is addressed instead of
    offering buttons, and the CLI still answers it."""
    run_id, view = _decision_run(server, "away")
    waiting = view["waitingOn"]
    assert waiting["request"]["seats"] == ["desk"]
    assert "decision" not in _session_kinds(server)
    shown = _waiting(view, None)
    assert shown is not None
    assert shown["elsewhere"] == "desk"
    assert server.diagnose() == [], "a decision card held back is no inconsistency"
    assert server.cli("decision", "answer", run_id, "--choice", "no").returncode == 0
    server.wait_status(run_id, "completed")
    assert server.diagnose() == []


def test_a_decision_for_an_audience_with_pi_and_web_is_offered_there(
    server: ServerProcess,
) -> None:
    """Seats `pi,web,desk`: the origin session is presented the decision's card and the page
    offers its buttons."""
    run_id, view = _decision_run(server, "here")
    assert view["waitingOn"]["request"]["seats"] == ["pi", "web", "desk"]
    wait_for(lambda: "decision" in _session_kinds(server), 30, "the decision card")
    shown = _waiting(view, None)
    assert shown is not None
    assert shown["elsewhere"] is None
    assert server.cli("decision", "answer", run_id, "--choice", "yes").returncode == 0
    server.wait_status(run_id, "completed")
