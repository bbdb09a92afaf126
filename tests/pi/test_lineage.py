"""Restart, fork and upgrade from Pi: the `/workflow` subcommands for the person, and the
`workflow` tool's `restart` and `fork` within the limits docs/pi.md gives the model.

Every test runs a real pi-workflows server, the real Pi binary in RPC mode with only our
extension loaded, and the scripted model; state is checked through the Python client.
"""

from __future__ import annotations

import re

import pytest

from pi.support.mock_provider import (
    MockProvider,
    last_is_tool_result,
    text,
    tool_call,
    user_text_matches,
)
from pi.support.pi_rpc import MakePi
from pi.support.records import result_text, tool_results

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

SESSION = "lineage-1"
RUN_ID = re.compile(r"run_[0-9a-z]+")

STEPS = """
from pi_workflows import Workflow, checkpoint, compute, edge

workflow = Workflow(
    "steps",
    start="a",
    nodes={
        "a": compute(lambda ctx: {"n": ctx.input.get("n", 1)}),
        "ask": checkpoint({"question": "name?"}),
        "greet": compute(lambda ctx: {"text": WORD + " " + ctx.outputs["ask"]["name"],
                                      "n": ctx.outputs["a"]["n"]}),
    },
    edges=[edge("a", "ask"), edge("ask", "greet")],
)
"""

MANUAL = """
from pi_workflows import Workflow, action, manual_effect

workflow = Workflow(
    "manual",
    start="pay",
    nodes={"pay": action(lambda ctx: {"paid": True}, effect=manual_effect("pay"))},
    edges=[],
)
"""


def _steps(server: ServerProcess, word: str) -> None:
    server.write_workflow("steps", f"WORD = {word!r}\n" + STEPS)


def _completed(server: ServerProcess, **kwargs: str) -> str:
    """A run of ``steps`` answered ``Ada`` and completed."""
    run_id = server.start_run("steps", {"n": 1}, **kwargs)
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.answer_checkpoint(run_id, {"name": "Ada"})
    server.wait_status(run_id, "completed")
    return run_id


def test_the_person_restarts_forks_and_upgrades_runs_with_workflow_commands(
    server: ServerProcess, make_pi: MakePi
) -> None:
    """`/workflow restart` reruns a completed run; `/workflow fork RUN greet` on changed code
    makes a fork that keeps the answer; `/workflow upgrade RUN --dry-run` then `upgrade`
    move a waiting run to the new code; each says what happened in one notification."""
    _steps(server, "hello")
    source = _completed(server)
    waiting = server.start_run("steps", {"n": 2})
    server.wait_status(waiting, "waiting")
    pi = make_pi(session_id=SESSION)

    restarted = pi.slash(f"/workflow restart {source}")
    assert restarted["notifyType"] == "info", restarted
    assert restarted["message"] == f"Run {source} is queued again, from its start."
    assert server.wait_status(source, "waiting")["round"] == 1

    _steps(server, "bye")
    forked = pi.slash(f"/workflow fork {waiting} ask --visit 1")
    assert forked["notifyType"] == "info", forked
    assert "1 node result(s) and 0 settled effect(s) carried" in forked["message"]
    fork = RUN_ID.findall(forked["message"])[0]
    fork_view = server.wait_status(fork, "waiting")
    assert fork_view["originSession"] == SESSION
    assert fork_view["lineage"]["parentRunId"] == waiting

    dry = pi.slash(f"/workflow upgrade {waiting} --dry-run")
    assert dry["message"].startswith(f"Run {waiting} can be upgraded"), dry
    assert "is presented again from the new code" in dry["message"]
    done = pi.slash(f"/workflow upgrade {waiting}")
    assert done["notifyType"] == "info", done
    assert done["message"].startswith(f"Run {waiting} now runs the workflow's current code")
    server.wait_status(waiting, "waiting")
    with server.client() as client:
        client.answer_checkpoint(waiting, {"name": "Bo"})
        client.answer_checkpoint(fork, {"name": "Cy"})
    assert server.wait_status(waiting, "completed")["output"] == {"text": "bye Bo", "n": 2}
    assert server.wait_status(fork, "completed")["output"] == {"text": "bye Cy", "n": 2}
    bad = pi.slash(f"/workflow fork {waiting} nowhere")
    assert bad["notifyType"] == "error"
    assert "\n" not in bad["message"]
    assert "has no node nowhere" in bad["message"]
    assert server.diagnose() == []


def test_the_model_forks_an_ended_run_of_its_session(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The tool's `fork` of a completed run this session started makes the fork, presented
    in this session, and the model sees what it carried."""
    _steps(server, "hello")
    source = _completed(server, origin_session=SESSION)
    provider.on(last_is_tool_result, text("Forked."))
    provider.on(
        user_text_matches(r"fork run_"),
        tool_call("workflow", {"action": "fork", "runId": source, "fromNode": "greet"}),
    )
    pi = make_pi(session_id=SESSION)

    [end] = tool_results(pi.run_prompt(f"fork {source} from greet"))

    assert not end["isError"], end
    fork = end["result"]["details"]["runId"]
    assert fork != source
    assert "2 node result(s)" in result_text(end)
    view = server.wait_status(fork, "completed")
    assert view["output"] == {"text": "hello Ada", "n": 1}
    assert view["originSession"] == SESSION
    assert server.diagnose() == []


PARENT = """
from pi_workflows import Workflow, subworkflow

workflow = Workflow("parent", start="one", nodes={"one": subworkflow("manual")}, edges=[])
"""


@pytest.mark.parametrize("case", ["other session", "not ended", "manual effect", "child runs"])
def test_the_model_may_not_restart_or_fork_what_the_docs_keep_for_the_person(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider, case: str
) -> None:
    """The tool refuses to restart a run another session started, a run that has not ended,
    a run that applied a manual effect, and a run whose child runs may have (a parent whose
    child applied one); the refusal names the person's command and the run is left as it
    was."""
    _steps(server, "hello")
    server.write_workflow("manual", MANUAL)
    server.write_workflow("parent", PARENT)
    if case == "other session":
        run_id, words = _completed(server, origin_session="someone-else"), "not started from"
    elif case == "not ended":
        run_id = server.start_run("steps", origin_session=SESSION)
        server.wait_status(run_id, "waiting")
        words = "only runs that have ended"
    elif case == "manual effect":
        run_id = server.start_run("manual", origin_session=SESSION)
        server.wait_status(run_id, "completed")
        words = "applied a manual effect"
    else:  # its child applied the manual effect: not in the parent's own effects
        run_id = server.start_run("parent", origin_session=SESSION)
        server.wait_status(run_id, "completed")
        words = "started child runs"
    before = server.run(run_id)
    provider.on(last_is_tool_result, text("I may not."))
    provider.on(
        user_text_matches(r"restart run_"),
        tool_call("workflow", {"action": "restart", "runId": run_id}),
    )
    pi = make_pi(session_id=SESSION)

    [end] = tool_results(pi.run_prompt(f"restart {run_id}"))

    assert end["isError"] is True
    assert words in result_text(end)
    assert f"/workflow restart {run_id}" in result_text(end)
    after = server.run(run_id)
    assert (after["status"], after["revision"]) == (before["status"], before["revision"])


def test_status_of_a_run_parked_on_changed_code_names_the_upgrade(
    server: ServerProcess, make_pi: MakePi
) -> None:
    """`/workflow status RUN` of a run parked `workflowSourceChanged` names `/workflow
    upgrade` (dry run first), restart and cancel; `/workflow resume RUN` is refused in one
    line that names the upgrade, and the run stays parked."""
    _steps(server, "hello")
    run_id = server.start_run("steps", {"n": 1})
    server.wait_status(run_id, "waiting")
    _steps(server, "bye")
    with server.client() as client, pytest.raises(Exception, match="workflowSourceChanged"):
        client.answer_checkpoint(run_id, {"name": "Ada"})
    server.wait_status(run_id, "paused")
    pi = make_pi(session_id=SESSION)

    status = pi.slash(f"/workflow status {run_id}")
    resumed = pi.slash(f"/workflow resume {run_id}")

    assert status["notifyType"] == "info", status
    for words in (
        f"/workflow upgrade {run_id} --dry-run",
        f"/workflow upgrade {run_id};",
        f"/workflow restart {run_id}",
        f"/workflow cancel {run_id}",
    ):
        assert words in status["message"], status["message"]
    assert resumed["notifyType"] == "error", resumed
    assert "\n" not in resumed["message"]
    assert f"pi-workflows run upgrade {run_id} --dry-run" in resumed["message"]
    assert server.run(run_id)["parkReason"] == "workflowSourceChanged"
    assert server.diagnose() == []
