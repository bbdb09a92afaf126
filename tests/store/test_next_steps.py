"""`nextStep`: the one line every seat shows about what a person does next with a run."""

from __future__ import annotations

import pytest

from pi_workflows.store.next_steps import next_step


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        ({"runId": "r", "status": "running", "runStatus": "running"}, None),
        ({"runId": "r", "status": "completed", "runStatus": "completed"}, None),
        (
            {"runId": "r", "runStatus": "failed"},
            "to run it again from the start: pi-workflows run restart r",
        ),
        (
            {"runId": "r", "runStatus": "cancelled", "parentRunId": "p"},
            "restart its parent to run it again: pi-workflows run restart p",
        ),
        (
            {"runId": "r", "runStatus": "paused", "parkReason": "userPaused"},
            "pi-workflows run resume r",
        ),
        (
            {"runId": "r", "runStatus": "waiting",
             "waitingOn": {"kind": "checkpoint", "status": "pending"}},
            "pi-workflows checkpoint answer r --value JSON",
        ),
        (
            {"runId": "r", "runStatus": "waiting",
             "waitingOn": {"kind": "decision", "status": "validating"}},
            "an answer is being validated; nothing to do unless it is rejected",
        ),
        (
            {"runId": "r", "runStatus": "waiting", "wait": {"kind": "event", "event": "deployed"}},
            "pi-workflows run signal r deployed --data JSON",
        ),
        (
            {"runId": "r", "runStatus": "paused", "parkReason": "effectAmbiguous",
             "effects": [{"effectId": "e1", "status": "ambiguous"},
                         {"effectId": "e2", "status": "ambiguous"}]},
            "decide what effect e1 did (and 1 more: effect list r): pi-workflows effect"
            " resolve e1 --applied|--rejected|--retry, then pi-workflows run resume r",
        ),
    ],
)  # fmt: skip
def test_each_state_has_its_one_next_step(view: dict[str, object], expected: str | None) -> None:
    """The line for each kind of stop, or None for a run that needs nothing."""
    assert next_step(view) == expected


def test_changed_code_names_the_upgrade_dry_run_restart_and_resume() -> None:
    """A run parked on changed code is told every way on: upgrade (dry run first), restart,
    or the old files back and resume."""
    line = next_step({"runId": "r", "runStatus": "paused", "parkReason": "workflowSourceChanged"})
    assert line is not None
    for command in (
        "pi-workflows run upgrade r --dry-run",
        "pi-workflows run upgrade r;",
        "pi-workflows run restart r",
        "pi-workflows run resume r",
    ):
        assert command in line
