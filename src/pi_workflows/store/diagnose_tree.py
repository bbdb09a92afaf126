"""The tree invariants ``diagnose`` checks: child runs, their joins and their parents.

Reads only, like ``diagnose``; every contradiction is reported with the run it concerns and
none is repairable (a wrong tree row is not something to guess about):

- ``liveChildOfEndedParent``: a child run still active while its parent has ended (a
  parent's end cancels its tree in the same transaction);
- ``childEndNotJoined``: a child run ended but its join still counts it started, or its
  join row disagrees with how it ended (the child's end and its join row are one commit);
- ``joinCountMismatch``: a join's started, ended or failed counts disagree with its rows;
- ``joinStalled``: a running join with no child waiting or active (nothing would ever end
  it), or a joined one whose parent's wait is still pending: the parent would wait forever;
  also a rate-limited running join with children waiting, none active, its parent not
  paused and no due time on its wait (no child's end and no timer would start the next).

A parent left waiting after its join fired its wait has no pending wait and no request:
``diagnose`` reports it as ``waitingWithoutRequest``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from pi_workflows.store.children import paused_above
from pi_workflows.store.states import TERMINAL_STATUSES

_TERMINAL = tuple(status.value for status in TERMINAL_STATUSES)


def check_tree(conn: sqlite3.Connection, add: Callable[[Any], None], problem: type) -> None:
    """Report every tree contradiction through ``add`` (as ``problem`` instances)."""
    marks = ", ".join("?" for _ in _TERMINAL)
    for child_id, status, parent_id, parent_status in conn.execute(
        "SELECT c.run_id, c.status, p.run_id, p.status FROM runs c JOIN runs p"
        f" ON p.run_id = c.parent_run_id WHERE c.status NOT IN ({marks})"
        f" AND p.status IN ({marks})",
        (*_TERMINAL, *_TERMINAL),
    ):
        add(
            problem(
                "liveChildOfEndedParent",
                child_id,
                f"child run is {status} while its parent {parent_id} is {parent_status}; cancel"
                " it with 'pi-workflows run cancel'",
                False,
            )
        )
    for child_id, row_status, run_status, wait_id in conn.execute(
        "SELECT c.child_run_id, c.status, r.status, c.wait_id FROM run_children c"
        " JOIN runs r ON r.run_id = c.child_run_id"
        " WHERE c.status NOT IN ('waiting', 'skipped')"
    ):
        ended = run_status in _TERMINAL
        if (row_status == "started") == ended or (ended and row_status != run_status):
            add(
                problem(
                    "childEndNotJoined",
                    child_id,
                    f"child run is {run_status} but its row in join {wait_id} is {row_status}",
                    False,
                )
            )
    _check_joins(conn, add, problem)


def _check_joins(conn: sqlite3.Connection, add: Callable[[Any], None], problem: type) -> None:
    for row in conn.execute(
        "SELECT j.wait_id, j.parent_run_id, j.status, j.started, j.ended, j.failed, j.total,"
        " w.status,"
        " (SELECT COUNT(*) FROM run_children c WHERE c.wait_id = j.wait_id"
        "  AND c.status NOT IN ('waiting', 'skipped')),"
        " (SELECT COUNT(*) FROM run_children c WHERE c.wait_id = j.wait_id"
        "  AND c.status NOT IN ('waiting', 'skipped', 'started')),"
        " (SELECT COUNT(*) FROM run_children c WHERE c.wait_id = j.wait_id"
        "  AND c.status IN ('failed', 'timed_out', 'cancelled')),"
        " (SELECT COUNT(*) FROM run_children c WHERE c.wait_id = j.wait_id"
        "  AND c.status IN ('waiting', 'started')),"
        " (SELECT COUNT(*) FROM run_children c WHERE c.wait_id = j.wait_id),"
        " j.rate_count, w.due_at,"
        " (SELECT COUNT(*) FROM run_children c WHERE c.wait_id = j.wait_id"
        "  AND c.status = 'waiting')"
        " FROM run_joins j JOIN run_waits w USING (wait_id)"
    ):
        wait_id, parent, status, started, ended, failed, total = row[:7]
        wait_status = row[7]
        rows_started, rows_ended, rows_failed, rows_open, rows = row[8:13]
        rate, due_at, rows_waiting = row[13:]
        if (
            rate is not None
            and status == "running"
            and wait_status == "pending"
            and due_at is None
            and rows_waiting > 0
            and rows_waiting == rows_open  # none active
            and paused_above(conn, parent) is None
        ):
            add(
                problem(
                    "joinStalled",
                    parent,
                    f"join {wait_id} holds {rows_waiting} children back for its rate with none"
                    " active and no due time on its wait: nothing will start the next one",
                    False,
                )
            )
        if (started, ended, failed, total) != (rows_started, rows_ended, rows_failed, rows):
            add(
                problem(
                    "joinCountMismatch",
                    parent,
                    f"join {wait_id} counts {started} started, {ended} ended, {failed} failed"
                    f" of {total}, but its rows say {rows_started}, {rows_ended}, {rows_failed}"
                    f" of {rows}",
                    False,
                )
            )
        if (status in ("running", "failing") and rows_open == 0) or (
            status == "joined" and wait_status == "pending"
        ):
            add(
                problem(
                    "joinStalled",
                    parent,
                    f"join {wait_id} is {status} with {rows_open} children open and its wait"
                    f" {wait_status}: nothing will ever wake the parent",
                    False,
                )
            )


__all__ = ["check_tree"]
