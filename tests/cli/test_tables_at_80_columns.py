"""Every table the CLI prints keeps ids, statuses and times whole at 80 columns.

Each renderer gets rows with ids of the real length (``run_`` and 26 characters), long
workflow and node names and long free text, and is printed by a Rich console 80 columns
wide, as in a plain terminal: every id appears whole on one line, and no line is wider.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rich.console import Console, RenderableType

from pi_workflows.cli.commands.effects import render_effects
from pi_workflows.cli.commands.schedules import render_schedule, render_schedules
from pi_workflows.cli.output import render_problems, render_runs, render_status
from pi_workflows.cli.show import render_run

WIDTH = 80
RUN = "run_01m8zq49g1pxfkegewvs0g1pvt"
CHILD = "run_01m8zq49g10a4ahg7kvhmzkxyy"
EFFECT = "eff_01m8zn9gkcmpx5rwcm8emqb72p"
ATTEMPT = "att_01m8zn9gkbfnnqxwpf62qm6n93"
SCHEDULE = "sch_01m8zmrjq4w0nwyfcpypjfk76b"
LONG = "a-rather-long-workflow-name-for-tables"
NOW = 1_796_358_848_815


def _run_view() -> dict[str, Any]:
    return {
        "runId": RUN,
        "workflow": LONG,
        "status": "waiting",
        "runStatus": "waiting",
        "currentNode": "review-every-file-in-the-change",
        "createdAt": NOW,
        "updatedAt": NOW,
        "parentRunId": None,
        "rootRunId": RUN,
        "depth": 0,
        "attempts": [
            {
                "attemptId": ATTEMPT,
                "nodeId": "review-every-file-in-the-change",
                "visit": 1,
                "attemptNo": 1,
                "tryNo": 1,
                "status": "failed",
                "startedAt": NOW,
                "finishedAt": NOW + 1500,
                "error": "ValueError: " + "x" * 200,
            }
        ],
        "effects": [
            {
                "effectId": EFFECT,
                "type": "a-long-effect-type-name",
                "kind": "manual",
                "nodeId": "charge-the-customer-card",
                "visit": 1,
                "status": "ambiguous",
            }
        ],
        "joins": [
            {
                "nodeId": "each",
                "kind": "fan_out",
                "workflow": LONG,
                "total": 2,
                "started": 2,
                "ended": 1,
                "failed": 0,
                "status": "running",
                "children": [
                    {
                        "item": 0,
                        "runId": CHILD,
                        "status": "completed",
                        "currentNode": "a-node-with-a-long-name-too",
                    }
                ],
                "childrenOmitted": 1,
            }
        ],
        "needsPerson": [
            {
                "runId": CHILD,
                "status": "ambiguous",
                "parkReason": "effectAmbiguous",
                "waitingOn": None,
            }
        ],
    }


CASES: dict[str, tuple[Callable[[], RenderableType], list[str]]] = {
    "run list": (
        lambda: render_runs(
            [
                {
                    "runId": RUN,
                    "workflow": LONG,
                    "status": "waiting",
                    "currentNode": "a-node-with-a-long-name",
                    "updatedAt": NOW,
                    "children": {
                        "ended": 4,
                        "total": 10,
                        "failed": 2,
                        "counts": {"completed": 2, "failed": 1, "cancelled": 1, "running": 6},
                    },
                },
            ]
        ),
        [RUN, "waiting 2/10 completed, 1 failed, 1 cancelled"],
    ),
    "run show": (lambda: render_run(_run_view()), [RUN, CHILD, EFFECT, "ambiguous"]),
    "effect list": (
        lambda: render_effects(
            [
                {
                    "effectId": EFFECT,
                    "runId": RUN,
                    "nodeId": "charge-the-customer-card",
                    "visit": 12,
                    "type": "a-long-effect-type-name",
                    "kind": "idempotent",
                    "status": "ambiguous",
                    "attempts": 3,
                },
            ]
        ),
        [EFFECT, RUN, "ambiguous", "idempotent"],
    ),
    "state diagnose": (
        lambda: render_problems(
            [
                {
                    "code": "ambiguousEffectOnUnparkedRun",
                    "runId": RUN,
                    "repairable": False,
                    "message": "effect " + EFFECT + " is ambiguous while its run continues; pause"
                    " the run and resolve the effect with 'pi-workflows effect resolve'",
                },
            ]
        ),
        [RUN, "ambiguousEffectOnUnparkedRun"],
    ),
    "server status": (
        lambda: render_status(
            {
                "pid": 1234,
                "epoch": 7,
                "version": "0.1.0",
                "socket": "/tmp/x/server.sock",
                "runners": [
                    {"runId": RUN, "pid": 4_194_303, "status": "ready", "runnerEpoch": 123456}
                ],
            }
        ),
        [RUN],
    ),
    "schedule list": (
        lambda: render_schedules(
            [
                {
                    "name": "nightly-release-notes-for-everyone",
                    "status": "active",
                    "workflow": LONG,
                    "cadence": "cron '0 2 * * 1-5' (Europe/Berlin)",
                    "nextFireAt": NOW,
                    "lastFire": None,
                },
            ]
        ),
        ["nightly-release-notes-for-everyone", "active"],
    ),
    "schedule show": (
        lambda: render_schedule(
            {"name": "nightly", "scheduleId": SCHEDULE, "status": "active", "workflow": LONG},
            [
                {
                    "fireAt": NOW,
                    "outcome": "started",
                    "runId": RUN,
                    "runStatus": "completed",
                    "detail": "a detail that is long enough to need wrapping at eighty columns",
                }
            ],
        ),
        [SCHEDULE, RUN, "completed", "started"],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_table_keeps_ids_whole_at_80_columns(name: str) -> None:
    build, whole = CASES[name]
    console = Console(width=WIDTH, record=True, color_system=None, highlight=False)
    console.print(build())
    lines = console.export_text().splitlines()
    too_wide = [line for line in lines if len(line) > WIDTH]
    assert too_wide == [], f"{name}: lines wider than {WIDTH}"
    for value in whole:
        assert any(value in line for line in lines), f"{name}: {value!r} was cut:\n" + "\n".join(
            lines
        )
