"""`run.list` pages: newest first, a cursor that never skips or repeats a run, filters."""

from __future__ import annotations

from pathlib import Path

import pytest

from pi_workflows.store import lifecycle, views
from pi_workflows.store.clock import FakeClock

from support.store import new_run, open_test_db

pytestmark = pytest.mark.timeout(120)


def test_paging_past_a_thousand_runs_sees_each_run_once(tmp_path: Path) -> None:
    """1,205 runs (many created in the same millisecond) come back exactly once, in order."""
    clock = FakeClock()
    db = open_test_db(tmp_path, clock)
    created = []
    for index in range(1205):
        if index % 3 == 0:
            clock.advance(1)  # the others share a millisecond: the run id breaks the tie
        created.append(lifecycle.reserve(db, new_run("even" if index % 2 else "odd")).run_id)
    seen: list[str] = []
    cursor = None
    pages = 0
    with db.read() as conn:
        while True:
            page, cursor = views.list_runs_page(conn, after=cursor, limit=1000)
            seen.extend(run["runId"] for run in page)
            pages += 1
            if cursor is None:
                break
        evens, _ = views.list_runs_page(conn, workflow="even", limit=1000)
        recent, _ = views.list_runs_page(conn, since=clock.now_ms(), limit=1000)
        with pytest.raises(ValueError, match="not a run list cursor"):
            views.list_runs_page(conn, after="garbage")
    assert pages == 2
    assert len(seen) == len(set(seen)) == 1205
    assert set(seen) == set(created)
    order = {run_id: index for index, run_id in enumerate(created)}
    stamps = [(order[run_id] // 3) for run_id in seen]  # the creation millisecond, in order
    assert stamps == sorted(stamps, reverse=True)
    assert len(evens) == 602
    assert {run["workflow"] for run in evens} == {"even"}
    assert 1 <= len(recent) <= 3
