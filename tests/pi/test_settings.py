"""Live settings from the real Pi: `/workflow settings`, `/workflow change-settings` and the
`workflow` tool's `settings` and `change-settings` actions, with the scripted model.

The person's command changes a waiting run's settings and the next node sees them; the
model's tool changes them only where the workflow names the model in
`settings_changed_by`, and elsewhere sees the server's refusal as the tool's error.
"""

from __future__ import annotations

import json

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

TUNED = """
from pi_workflows import Workflow, checkpoint, compute, edge

workflow = Workflow(
    "tuned",
    start="ask",
    nodes={
        "ask": checkpoint({"question": "Go on?"}),
        "use": compute(lambda ctx: {"level": ctx.settings["level"], "change": ctx.settings_change}),
    },
    edges=[edge("ask", "use")],
    settings={"type": "object", "properties": {"level": {"type": "integer", "maximum": 5,
              "default": 1}}, "required": ["level"]},
    settings_changed_by=CHANGED_BY,
)
"""

LEVEL_3 = [{"op": "replace", "path": "/level", "value": 3}]


def _waiting(server: ServerProcess, changed_by: str) -> str:
    server.write_workflow("tuned", TUNED.replace("CHANGED_BY", changed_by))
    run_id = server.start_run("tuned")
    server.wait_status(run_id, "waiting")
    return run_id


def _finish(server: ServerProcess, run_id: str) -> dict[str, object]:
    view = server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.answer_checkpoint(run_id, "yes", view["waitingOn"]["requestId"])
    return dict(server.wait_status(run_id, "completed")["output"])


def test_the_person_changes_settings_with_the_command(
    server: ServerProcess, make_pi: MakePi
) -> None:
    """`/workflow change-settings RUN PATCH` applies the patch as the person's change, a
    stale `--expect-change` is one error line that changes nothing, `/workflow settings RUN`
    shows the result, and the node after the checkpoint sees it."""
    run_id = _waiting(server, "'person'")
    pi = make_pi()

    changed = pi.slash(f"/workflow change-settings {run_id} {json.dumps(LEVEL_3)}")
    stale = pi.slash(f"/workflow change-settings {run_id} {json.dumps(LEVEL_3)} --expect-change 0")
    bad = pi.slash(f'/workflow change-settings {run_id} {{"op": "replace"}}')
    shown = pi.slash(f"/workflow settings {run_id}")

    assert changed["message"] == f'Run {run_id} settings are at change 1: {{"level":3}}'
    assert stale["notifyType"] == "error"
    assert "at change 1, not 0" in stale["message"]
    assert "\n" not in stale["message"]
    assert bad["notifyType"] == "error"
    assert "must be a JSON list of operations" in bad["message"]
    assert shown["message"] == (
        f'Run {run_id} settings (change 1, changed by person): {{"level":3}}'
    )
    with server.client() as client:
        history = client.settings(run_id)["history"]
    assert [(h["change"], h["changedBy"]) for h in history] == [(0, "defaults"), (1, "person")]
    assert _finish(server, run_id) == {"level": 3, "change": 1}


def test_the_model_changes_settings_only_where_the_workflow_allows_it(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The tool's `change-settings` is refused for a workflow that lets only a person change
    its settings (the model sees the server's line) and applied, as the model's change, for
    one that names the model; its `settings` action reads them."""
    person_only = _waiting(server, "'person'")
    open_to_model = _waiting(server, "('person', 'model')")
    provider.on(last_is_tool_result, text("Done."))
    for run_id in (person_only, open_to_model):
        provider.on(
            user_text_matches(rf"tune {run_id}"),
            tool_call("workflow", {"action": "change-settings", "runId": run_id, "patch": LEVEL_3}),
        )
    provider.on(
        user_text_matches(r"read settings"),
        tool_call("workflow", {"action": "settings", "runId": open_to_model}),
    )
    pi = make_pi()

    [refused] = tool_results(pi.run_prompt(f"tune {person_only}"))
    [applied] = tool_results(pi.run_prompt(f"tune {open_to_model}"))
    [read] = tool_results(pi.run_prompt("read settings"))

    assert refused["isError"] is True
    assert "lets person change its settings, not the model" in result_text(refused)
    assert not applied["isError"], applied
    assert result_text(applied) == f'Run {open_to_model} settings are at change 1: {{"level":3}}'
    assert "changed by model and person" in result_text(read)
    with server.client() as client:
        assert client.settings(person_only)["change"] == 0
        history = client.settings(open_to_model)["history"]
    assert history[-1]["changedBy"] == "model"
    assert _finish(server, open_to_model) == {"level": 3, "change": 1}
