"""What `run fork` and `run upgrade` (and `run show`'s Upgrade section) say, line by line."""

from __future__ import annotations

import pytest

from pi_workflows.cli.lineage_text import fork_lines, upgrade_lines

pytestmark = pytest.mark.timeout(30)

SOURCE = {"kind": "file", "ref": "/p/.pi/workflows/ask.workflow.py", "revision": "a" * 64,
          "mounted": {"/p/.pi/workflows/helper.py": "1"}}  # fmt: skip


def test_a_fork_names_what_it_carried_and_each_effect_ahead() -> None:
    """Each managed effect ahead gets a line; one the source applied says so."""
    lines = fork_lines(
        {"runId": "run_f", "sourceRunId": "run_s", "nodeId": "c", "visit": 2,
         "carriedAttempts": 3, "carriedEffects": 1,
         "effectsAhead": [{"nodeId": "ship", "type": "ship", "kind": "manual",
                           "appliedInSource": True},
                          {"nodeId": "log", "type": "git", "kind": "idempotent",
                           "appliedInSource": False}]}
    )  # fmt: skip
    assert lines == [
        "forked run run_f from run run_s at node c (visit 2): 3 node result(s) and 1 settled"
        " effect(s) carried",
        "managed effects ahead of it (each applies as a new effect of the fork):",
        "  ship: ship (manual); the source applied it already",
        "  log: git (idempotent)",
    ]


def test_an_upgrade_says_what_changes_and_what_the_run_does_next() -> None:
    """The code and modules that changed, the graph, the step asked again, the next move."""
    after = {**SOURCE, "revision": "b" * 64, "mounted": {"/p/.pi/workflows/helper.py": "2"}}
    lines = upgrade_lines(
        {"runId": "run_1", "status": "paused", "from": SOURCE, "to": after,
         "changes": ["nodes added: d"], "problems": [], "unchanged": False,
         "recreatesRequest": {"requestId": "req_1", "nodeId": "ask", "kind": "agent"},
         "continues": True, "refusal": None}
    )  # fmt: skip
    assert lines[:3] == [
        "code: ask.workflow.py (revision aaaaaaaaaaaa -> bbbbbbbbbbbb)",
        "modules changed: helper.py",
        "graph: nodes added: d",
    ]
    assert lines[3].startswith("its open agent step at node ask is presented again")
    assert lines[4] == "then it continues"


def test_a_refused_upgrade_says_why_and_nothing_it_would_do() -> None:
    """Problems and refusals are listed; no next move is promised; a refusal that came
    before any plan shows no graph line."""
    refused = upgrade_lines(
        {"runId": "run_1", "status": "waiting", "from": SOURCE, "to": SOURCE, "changes": [],
         "problems": ["the run waits at node ask, which the new code removed"],
         "unchanged": False, "recreatesRequest": None, "continues": False, "refusal": None}
    )  # fmt: skip
    assert refused[-1] == "cannot carry it: the run waits at node ask, which the new code removed"
    assert not any("continues" in line or "keeps waiting" in line for line in refused)
    early = upgrade_lines({"possible": False, "refusal": "its workflow does not load"})
    assert early == ["refused: its workflow does not load"]
