"""Run deadlines and cleanup nodes in a seed: what the oracle requires of a `lapse` run.

Runs in the campaign driver, once the seed's runs settled (`check`) and after the last stop
(`self_kill_causes`, for attribution). A `lapse` run's 2 s run deadline crosses its working
`work` node, so, strictly:

- it ends `timed_out` with an error naming the run deadline (or `cancelled`, only when the
  operator's `cancelRun` fault cancelled it first; with no cleanup only when no node of it
  had started);
- its cleanup node `release` ran and is recorded `completed` in `run show` with the reason
  it ended with; `abandoned` only when a cancel came during it, `failed` or `timed_out` only
  when faults of the seed stopped its runners (a kill, a freeze, a server down);
- its effect applied exactly once (the witness of the one body that applied it, every other
  body of its key a dedup), with the reason it ran with in its result;
- when its cleanup killed its own runner mid-way (a `selfKill` witness), it ran again in a
  new runner and still applied once: a later body or dedup of the same key follows.
"""

from __future__ import annotations

from typing import Any

from campaign.attribution import Cause
from campaign.context import SeedContext
from campaign.workflows import CLEANUP_NODES, RUN_DEADLINES

DEADLINE_WORDS = "run deadline passed"
"""What the error of a run ended by its run deadline says."""

CAUSED_BY_FAULTS = frozenset(
    {"killRunner", "killRunnerGroup", "stopRunner", "killServer", "killServerAndChildren",
     "stopServer", "gracefulStop", "cancelRun", "pauseRun"}
)  # fmt: skip
"""Faults that may keep a cleanup from completing (its record then says so)."""


def self_kill_causes(records: list[dict[str, Any]]) -> list[Cause]:
    """A cleanup body that killed its own runner (SIGKILL) explains that runner's crash and
    the effect attempt it lost, like a `killRunner` of that pid."""
    return [
        Cause(
            kind="selfKill",
            start=round(float(r["t"]) * 1000),
            end=round(float(r["t"]) * 1000),
            run_id=str(r["run"]),
            pids=frozenset({int(r["pid"])}),
        )
        for r in records
    ]


def check(ctx: SeedContext) -> None:
    """The oracle of every `lapse` run of the seed (see the module docstring)."""
    witnesses = ctx.witnesses
    witnesses.refresh()
    faulted = {
        str(f.get("runId")) for f in ctx.faults_done
        if not f.get("skipped") and f.get("kind") in CAUSED_BY_FAULTS
    }  # fmt: skip
    server_wide = any(
        not f.get("skipped") and f.get("kind") in CAUSED_BY_FAULTS and not f.get("runId")
        for f in ctx.faults_done
    )
    for track in ctx.tracks:
        workflow = track.planned.workflow
        if workflow not in RUN_DEADLINES or track.run_id is None or track.stuck:
            continue
        run_id = track.run_id
        view = track.view or {}
        status, error = view.get("status"), str(view.get("error") or "")
        if status == "timed_out":
            if DEADLINE_WORDS not in error:
                ctx.violation("runDeadline", f"lapse ended timed_out with {error!r}", run_id)
        elif not (status == "cancelled" and track.cancel_sent):
            ctx.violation("runDeadline", f"lapse ended {status} ({error})", run_id)
            continue
        cleanup = view.get("cleanup")
        if status == "cancelled" and cleanup is None and not view.get("attempts"):
            continue  # cancelled before its first node started: nothing to clean up
        if not isinstance(cleanup, dict) or cleanup.get("nodeId") != CLEANUP_NODES[workflow]:
            ctx.violation("cleanup", f"lapse ended {status} with no cleanup: {cleanup}", run_id)
            continue
        outcome = cleanup.get("status")
        excused = run_id in faulted or server_wide
        if outcome != "completed" and not (
            excused and outcome in ("failed", "timed_out", "abandoned")
        ):
            ctx.violation("cleanup", f"its cleanup is {outcome}: {cleanup.get('error')}", run_id)
        if cleanup.get("reason") != error:
            ctx.violation(
                "cleanup", f"cleanup reason {cleanup.get('reason')!r} is not {error!r}", run_id
            )
        bodies = [
            witnesses.bodies[n] for n in witnesses.order
            if witnesses.bodies[n].run == run_id and witnesses.bodies[n].node == "release"
        ]  # fmt: skip
        applied = [b for b in bodies if b.applied]
        if outcome == "completed" and len(applied) != 1:
            ctx.violation("cleanupEffect", f"the cleanup applied {len(applied)} times", run_id)
        for body in applied:
            result = body.result if isinstance(body.result, dict) else {}
            value = result.get("value")
            reason = value.get("reason") if isinstance(value, dict) else None
            if reason != error:
                ctx.violation(
                    "cleanupEffect",
                    f"the cleanup ran with reason {reason!r}, not {error!r}",
                    run_id,
                )
        kills = [r for r in witnesses.self_kills if r.get("run") == run_id]
        if kills and outcome == "completed":
            last_kill = max(float(r["t"]) for r in kills)
            again = [b for b in bodies if b.started_at is not None and b.started_at > last_kill]
            if not again:
                ctx.violation(
                    "cleanupResumed",
                    "the cleanup killed its runner mid-way and no body ran again after it",
                    run_id,
                )
