"""`run retry` in a seed: a `botch` run fails by design (the world its `check` node reads is
closed); once it failed and its effects are settled, the operator opens the world and
retries it, and the oracle checks the retry.

Runs in the campaign driver. The operator's side (`retry_when_ready`) sends `run retry`
under the planned key by the CLI or the client (the plan's choice), and sometimes
(a stream of its own, `retryAgain`) the same command again under the same key through the
same surface (a receipt is keyed by client id and key, docs/protocol.md), which must name
the same new run; once the retry completed, `run retry` of it through the other surface
(so a seed drives both), which must be refused (`invalidTransition`: a completed run is
forked, not retried). The
oracle (`check`, with the settled checks) requires, strictly:

- the source ended `failed` by design (its error names the closed world; or its manual
  charge, rejected by the operator from the witnesses, failed it) and stays failed
  (`retrySource`); a `botch` run that failed is retried (`retryMissing`);
- the retry is a new run (`docs/cli.md`: a fork, not a new round), named by every answer
  (`retryTwice`), listed as the source's one fork (`retryTwice`), forked from the visit
  whose failure ended the source (`retryLineage`), with exactly one `run.forked` event
  that records `retry: true` (`retryProvenance`);
- it completed with the output of its input (`retryOutcome`, `output`), or was cancelled
  by a `cancelRun` fault;
- no effect of the source was applied again: no body of the retry at a visit it carried,
  and across the source and the retry the manual charge applied once and the idempotent
  preparation once (`retryReapplied`; at most once when the retry did not complete).
"""

from __future__ import annotations

from typing import Any, Final

from campaign.context import RunTrack, SeedContext, source_has_ended
from campaign.plan import rng_for
from campaign.surfaces import Answer, Surfaces
from campaign.workflows import BOTCH_FAILURE

AGAIN_CHANCE: Final = 0.3
"""How often the operator sends the retry a second time (same surface, same key)."""
EFFECT_NODES: Final = ("prepare", "charge")
"""The `botch` nodes whose bodies are effects (witnessed)."""


def fails_by_design(track: RunTrack) -> bool:
    """A `botch` run that is not a retry: it ends `failed` as planned."""
    return track.planned.workflow == "botch" and track.planned.retry_of is None


def source_of(ctx: SeedContext, track: RunTrack) -> RunTrack | None:
    """The track a retry track retries."""
    index = track.planned.retry_of
    return next((t for t in ctx.tracks if t.planned.index == index), None)


def command(surfaces: Surfaces, run_id: str, key: str, via_cli: bool) -> Answer:
    """`run retry RUN` by the CLI or the client, under `key`."""
    if via_cli:
        return surfaces.cli_command("run", "retry", run_id, "--idempotency-key", key)
    return surfaces.call("retry", run_id, idempotency_key=key)


def retry_when_ready(ctx: SeedContext, track: RunTrack) -> None:
    """Open the world and retry the source once it failed and its effects are settled; the
    retry becomes this track's run. A source cancelled by a fault skips it."""
    source = source_of(ctx, track)
    assert source is not None
    if not source_has_ended(ctx, track, source, "retry"):
        return
    assert source.run_id is not None  # an ended source has a run
    if source.status != "failed":
        track.skipped = True
        if not source.cancel_sent:
            ctx.violation("retrySource", f"botch ended {source.status}, not failed", source.run_id)
        ctx.note(f"retry #{track.planned.index} skipped: its source ended {source.status}")
        return
    (ctx.witness_dir / "world" / str(source.planned.input["ticket"])).touch()
    planned = track.planned
    answer = command(ctx.surfaces, source.run_id, planned.key, planned.via_cli)
    ctx.note(
        f"retry {source.run_id} via {'cli' if planned.via_cli else 'client'}: "
        f"{answer.status} {answer.message[:160]}"
    )
    if not answer.ok:
        kind = "commandLost" if answer.status == "lost" else "retryRefused"
        ctx.violation(kind, f"run retry of {source.run_id}: {answer.message}", source.run_id)
        track.skipped = True
        return
    track.run_id = str(answer.body["runId"])
    track.start_answers.append(track.run_id)
    if rng_for(ctx.seed, "retryAgain", planned.index).random() < AGAIN_CHANCE:
        again = command(ctx.surfaces, source.run_id, planned.key, planned.via_cli)
        ctx.note(f"retry {source.run_id} again: {again.status} {again.body.get('runId')}")
        if again.ok:
            track.start_answers.append(str(again.body["runId"]))
        else:
            ctx.violation("retryRefused", f"the same retry again: {again.message}", source.run_id)


def refuse_completed(ctx: SeedContext, track: RunTrack) -> None:
    """`run retry` of the completed retry, through the surface the retry did not use: it
    must be refused with `invalidTransition` (a completed run is forked, not retried)."""
    if track.planned.retry_of is None or track.status != "completed" or track.retried_completed:
        return
    track.retried_completed = True
    assert track.run_id is not None
    key = f"{track.planned.key}-completed"
    answer = command(ctx.surfaces, track.run_id, key, not track.planned.via_cli)
    ctx.note(f"retry of the completed {track.run_id}: {answer.status} {answer.message[:160]}")
    if answer.status != "refused" or answer.code != "invalidTransition":
        ctx.violation(
            "retryCompleted",
            f"run retry of a completed run was {answer.status} ({answer.code}): {answer.message}",
            track.run_id,
        )


def check(ctx: SeedContext) -> None:
    """The oracle of every `botch` run and its retry (see the module docstring)."""
    for track in ctx.tracks:
        if track.planned.retry_of is None:
            continue
        source = source_of(ctx, track)
        if source is None or source.run_id is None or source.stuck:
            continue
        _source(ctx, source)
        if source.status == "failed" and track.run_id is None:
            ctx.violation("retryMissing", "the failed botch run was never retried", source.run_id)
        if track.run_id is not None and not track.stuck:
            _retry(ctx, track, source)


def _source(ctx: SeedContext, source: RunTrack) -> None:
    view = source.view or {}
    status, error = view.get("status"), str(view.get("error") or "")
    if status == "cancelled" and source.cancel_sent:
        return
    rejected = any(r.accepted and r.decision == "rejected" for r in source.resolutions)
    if status != "failed" or (BOTCH_FAILURE not in error and not rejected):
        ctx.violation("retrySource", f"botch ended {status}: {error}", source.run_id)


def _retry(ctx: SeedContext, track: RunTrack, source: RunTrack) -> None:
    run_id, source_id = str(track.run_id), str(source.run_id)
    view = track.view or {}
    if run_id == source_id:
        ctx.violation("retrySameRun", "run retry answered with the failed run itself", run_id)
    if len(set(track.start_answers)) != 1:
        ctx.violation(
            "retryTwice", f"one retry key made runs {sorted(set(track.start_answers))}", source_id
        )
    shown = ctx.surfaces.read("get_run", source_id) or {}
    forks = [f.get("runId") for f in (shown.get("lineage") or {}).get("forks") or []]
    if forks != [run_id]:
        ctx.violation("retryTwice", f"the source lists forks {forks}, not [{run_id}]", source_id)
    if shown.get("status") != "failed":
        ctx.violation("retrySource", f"the retried source is now {shown.get('status')}", source_id)
    found = (view.get("lineage") or {}).get("forkedFrom") or {}
    failed_at = _failure_node(source)
    if (found.get("runId"), found.get("nodeId")) != (source_id, failed_at):
        ctx.violation(
            "retryLineage", f"the retry names {found}, not {source_id} at {failed_at}", run_id
        )
    events = ctx.surfaces.read("history", run_id) or []
    forked = [e for e in events if e.get("type") == "run.forked"]
    if len(forked) != 1 or (forked[0].get("data") or {}).get("retry") is not True:
        ctx.violation("retryProvenance", f"the retry's run.forked events are {forked}", run_id)
    status = view.get("status")
    x = int(track.planned.input["x"])
    if status == "completed":
        expected = {"prepared": 23 * x, "charged": 29 * x}
        if view.get("output") != expected:
            ctx.violation("output", f"botch: output {view.get('output')} is not {expected}", run_id)
    elif not (status == "cancelled" and track.cancel_sent):
        ctx.violation("retryOutcome", f"the retry ended {status}: {view.get('error')}", run_id)
    _effects_once(ctx, track, source, view)


def _failure_node(source: RunTrack) -> str:
    """Where the source failed: at `check` by design, or at `charge` when the operator
    rejected its ambiguous charge (the rejection fails the node)."""
    rejected = any(r.accepted and r.decision == "rejected" for r in source.resolutions)
    error = str((source.view or {}).get("error") or "")
    return "charge" if rejected and BOTCH_FAILURE not in error else "check"


def _effects_once(
    ctx: SeedContext, track: RunTrack, source: RunTrack, view: dict[str, Any]
) -> None:
    """No body of the retry at a visit it carried; each effect applied once in all."""
    ctx.witnesses.refresh()
    carried = {
        (a.get("nodeId"), a.get("visit"))
        for a in view.get("attempts") or []
        if a.get("carriedFrom")
    }
    runs = {track.run_id, source.run_id}
    bodies = [b for b in ctx.witnesses.bodies.values() if b.run in runs]
    for body in bodies:
        if body.run == track.run_id and (body.node, body.visit) in carried:
            ctx.violation(
                "retryReapplied",
                f"the retry ran the body of {body.node} visit {body.visit}, which it carried",
                track.run_id,
            )
    for node in EFFECT_NODES:
        applied = sum(1 for b in bodies if b.node == node and b.applied)
        if applied > 1 or (track.status == "completed" and applied != 1):
            ctx.violation(
                "retryReapplied",
                f"{node} applied {applied} times across the failed run and its retry",
                track.run_id,
            )
