"""The fairness rule through a real server at capacity 2: a person's run started beside a
wide fan_out gets one of the next free runner slots, though the fan_out's queued children
are older (docs/server.md, "Child runs: the tree, capacity and fairness")."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from support.composition import LEAF, fan, witnessed
from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

ITEMS = 40


def test_a_run_started_beside_a_wide_fan_out_gets_a_next_slot(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    server = server_process.start(PI_WORKFLOWS_MAX_RUNNERS="2")
    server.write_workflow("leaf", LEAF)
    server.write_workflow("fan", fan(concurrency=ITEMS))
    witness = tmp_path / "witness.jsonl"
    parent = server.start_run(
        "fan", {"items": list(range(ITEMS)), "witness": str(witness), "sleep": 0.2}
    )
    wait_for(lambda: len(witnessed(witness)) >= 2, 60, "the first children to start")
    assert server.query(
        "SELECT COUNT(*) FROM run_queue q JOIN runs r USING (run_id)"
        " WHERE r.parent_run_id = ? AND q.status = 'ready'",
        parent,
    ) >= [(ITEMS - 4,)], "the fan_out's children are queued ahead of the person's run"
    queued_at = time.time()
    person = server.start_run("leaf", {"item": -1, "witness": str(witness)})
    server.wait_status(person, "completed")
    server.wait_status(parent, "completed", timeout=180)

    starts = [mark for mark in witnessed(witness) if mark["e"] == "start"]
    mine = next(i for i, mark in enumerate(starts) if mark["item"] == -1)
    overtaking = [mark for mark in starts[:mine] if mark["at"] > queued_at]
    # At most the runs launched for the slots that were already free, or freeing, when the
    # person's run was queued; without the rule it waits behind some thirty children.
    assert len(overtaking) <= 2, (len(overtaking), mine)
    assert sorted(mark["item"] for mark in starts) == [-1, *range(ITEMS)]
    assert server.diagnose() == []
