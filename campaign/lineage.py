"""Forks and upgrades in a seed: what the operator does (fork a run once it ended; change
`mend`'s code while its run waits, then upgrade the run) and what the oracle then requires.

Runs in the campaign driver. The operator's side is called from `operator.act` with the
operator's one command sender (`send(what, *args)`: by the CLI or the client, one key per
logical command, retried across faults), so a fork or an upgrade killed mid-flight is sent
again under its key and must be adopted. The oracle's side (`check`) runs with the others
once the seed's runs settled:

- a fork was made once (its source lists exactly it, every `run fork` answer named it),
  names its source and fork node, and no attempt it carried ran again in it: no effect body
  of the fork at a carried node visit (witnesses);
- a `chain` fork the operator sent with `--set step=...` (half of them, a stream of their
  own) records exactly the latest carried `step` visit as set by a person, and no other
  carried attempt; one sent without records none. The value set is the one the source's
  `step` produced, so the fork completes with the output the oracle expects of any chain;
- an upgraded `mend` run was upgraded exactly once (`run.upgraded` in its history, though
  the command may have been retried), asked its question again from the new code and
  completed on it (`version` and `asked` are the new version), and its effect before the
  upgrade applied once (the idempotent witness checks).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

from campaign.context import TERMINAL, RunTrack, SeedContext, source_has_ended
from campaign.plan import rng_for
from campaign.surfaces import Answer, Surfaces
from campaign.workflows import MEND_VERSIONS, chain_output, tip, write_mend

Send = Callable[..., Answer]

MAX_UPGRADE_TRIES: Final = 6
"""Upgrades the operator sends (each a logical command) before it reports a violation."""

SKIPPED_FORK: Final = frozenset({"unknownForkPoint", "invalidTransition"})
"""Refusals of a fork whose source did not complete: the node was never reached (a cancel
came first), or its effects are not settled; the fork is then skipped, not a violation."""


def source_of(ctx: SeedContext, track: RunTrack) -> RunTrack | None:
    """The track a fork track forks."""
    fork = track.planned.fork
    if fork is None:
        return None
    return next((t for t in ctx.tracks if t.planned.index == fork.source), None)


def command(
    surfaces: Surfaces, what: str, run_id: str, key: str, via_cli: bool, *args: Any
) -> Answer:
    """Send a `fork` (`args`: node, visit; `run_id` is the source) or an `upgrade` (`args`:
    dry) by the CLI or the client. A dry run stores nothing, so it carries no key."""
    if what == "fork":
        node, visit, edits = args
        visit_args = [] if visit is None else ["--visit", str(visit)]
        set_args = [
            arg
            for name, value in (edits or {}).items()
            for arg in ("--set", f"{name}={json.dumps(value)}")
        ]
        if via_cli:
            return surfaces.cli_command(
                "run", "fork", run_id, "--from", node, *visit_args, *set_args,
                "--idempotency-key", key,
            )  # fmt: skip
        return surfaces.call(
            "fork", run_id, node, visit=visit, idempotency_key=key, outputs=edits or None
        )
    (dry,) = args
    if dry:
        if via_cli:
            return surfaces.cli_command("run", "upgrade", run_id, "--dry-run")
        return surfaces.call("upgrade", run_id, dry_run=True)
    if via_cli:
        return surfaces.cli_command("run", "upgrade", run_id, "--idempotency-key", key)
    return surfaces.call("upgrade", run_id, idempotency_key=key)


def fork_edits(ctx: SeedContext, track: RunTrack, source: RunTrack) -> dict[str, Any] | None:
    """The outputs a fork of a `chain` run replaces (`run fork --set`), for half of them
    (a stream of its own): its last `step` output, set to the value the source produced."""
    if source.planned.workflow != "chain":
        return None
    if rng_for(ctx.seed, "forkset", track.planned.index).random() >= 0.5:
        return None
    x, n = int(source.planned.input["x"]), int(source.planned.input["n"])
    return {"step": {"acc": chain_output(x, n)["acc"], "i": n, "more": False}}


def fork_when_ready(ctx: SeedContext, track: RunTrack, send: Send) -> None:
    """Fork the source once it ended and the operator settled its effects; the fork becomes
    this track's run. A source that never completes (a cancel, given up) may skip it."""
    fork = track.planned.fork
    source = source_of(ctx, track)
    assert fork is not None
    assert source is not None
    if not source_has_ended(ctx, track, source, "fork"):
        return
    track.fork_edits = fork_edits(ctx, track, source)
    answer = send("fork", fork.node, fork.visit, track.fork_edits, target=source.run_id)
    if answer.ok:
        track.run_id = str(answer.body["runId"])
        track.start_answers.append(track.run_id)
        ctx.note(
            f"forked {source.run_id} from {fork.node} (visit {fork.visit or 'latest'}) ="
            f" {track.run_id}: carried {answer.body.get('carriedAttempts')} attempts,"
            f" {answer.body.get('carriedEffects')} effects"
        )
        return
    if source.status != "completed" and answer.code in SKIPPED_FORK:
        track.skipped = True
        ctx.note(f"fork #{track.planned.index} skipped: {answer.message[:200]}")
        return
    if answer.status != "lost":
        ctx.violation("forkRefused", f"run fork of {source.run_id}: {answer.message}", None)
        track.skipped = True


def mend(ctx: SeedContext, track: RunTrack, send: Send) -> bool:
    """The upgrade of a `mend` run: once it waits on its question, the operator changes the
    workflow's code, then upgrades the run (sometimes after a dry run), and only then
    answers. Returns True when it handled the run this tick (the operator answers nothing
    else for it)."""
    view = track.view or {}
    if track.upgraded or view.get("status") in TERMINAL:
        return False  # an ended run (a cancel came first) is the operator's like any other
    waiting = view.get("waitingOn") or {}
    code_park = view.get("status") == "paused" and view.get("parkReason") in (
        "workflowSourceChanged",
        "workflowLoadFailed",
    )
    if not track.edited:
        if view.get("status") != "waiting" or waiting.get("kind") != "checkpoint":
            return False
        write_mend(ctx.project, MEND_VERSIONS[1])
        track.edited = True
        ctx.note(f"changed mend's code to version {MEND_VERSIONS[1]} while {track.run_id} waits")
    if view.get("status") not in ("waiting", "paused") and not code_park:
        return True
    if track.upgrade_tries >= MAX_UPGRADE_TRIES:
        return True
    track.upgrade_tries += 1
    if rng_for(ctx.seed, "dry", track.planned.index, track.upgrade_tries).random() < 0.5:
        plan = send("upgrade", True)
        if plan.ok and plan.body.get("problems"):  # the new graph carries it: never refused
            ctx.violation("upgradeRefused", f"the dry run says: {plan.body}", track.run_id)
    answer = send("upgrade", False)
    if answer.ok:
        track.upgraded = True
        ctx.note(f"upgraded {track.run_id}: now {answer.body.get('status')}")
    elif answer.status != "lost" and track.upgrade_tries >= MAX_UPGRADE_TRIES:
        ctx.violation("upgradeRefused", f"run upgrade: {answer.message}", track.run_id)
    return True


def checkpoint_answer(track: RunTrack) -> dict[str, Any]:
    """The operator's answer to a checkpoint: the tip, and for `mend` the version it asked."""
    answer: dict[str, Any] = {"tip": tip(int(track.planned.input["x"]))}
    request = ((track.view or {}).get("waitingOn") or {}).get("request") or {}
    if track.planned.upgrade and isinstance(request, dict):
        answer["version"] = request.get("version")
    return answer


def check(ctx: SeedContext) -> None:
    """The oracle's lineage promises (the module docstring lists them)."""
    for track in ctx.tracks:
        if track.run_id is None or track.stuck:
            continue
        if track.planned.fork is not None:
            _fork(ctx, track)
        if track.planned.upgrade:
            _upgraded(ctx, track)


def _fork(ctx: SeedContext, track: RunTrack) -> None:
    source = source_of(ctx, track)
    assert source is not None
    assert track.planned.fork is not None
    view = track.view or {}
    lineage = view.get("lineage") or {}
    found = lineage.get("forkedFrom") or {}
    if (found.get("runId"), found.get("nodeId")) != (source.run_id, track.planned.fork.node):
        ctx.violation("forkLineage", f"the fork names {found}, not {source.run_id}", track.run_id)
    shown = ctx.surfaces.read("get_run", source.run_id) or {}
    forks = [f.get("runId") for f in (shown.get("lineage") or {}).get("forks") or []]
    if forks != [track.run_id] or len(set(track.start_answers)) != 1:
        ctx.violation(
            "forkTwice",
            f"one fork key made forks {forks} (answers named {sorted(set(track.start_answers))})",
            source.run_id,
        )
    carried_rows = [a for a in view.get("attempts") or [] if a.get("carriedFrom")]
    carried = {(a.get("nodeId"), a.get("visit")) for a in carried_rows}
    set_by = sorted((str(a.get("nodeId")), int(a.get("visit") or 0)) for a in carried_rows
                    if a.get("outputSetBy") == "person")  # fmt: skip
    wanted = []
    for node in track.fork_edits or {}:
        visits = [int(a.get("visit") or 0) for a in carried_rows if a.get("nodeId") == node]
        wanted += [(node, max(visits))] if visits else []
    if set_by != sorted(wanted):
        ctx.violation(
            "forkSetOutput",
            f"the fork's carried attempts set by a person are {set_by}, not {sorted(wanted)}",
            track.run_id,
        )
    ctx.witnesses.refresh()
    for body in ctx.witnesses.bodies.values():
        if body.run == track.run_id and (body.node, body.visit) in carried:
            ctx.violation(
                "carriedApplied",
                f"the fork ran the body of {body.node} visit {body.visit}, which it carried",
                track.run_id,
            )


def _upgraded(ctx: SeedContext, track: RunTrack) -> None:
    view = track.view or {}
    events = ctx.surfaces.read("history", track.run_id) or []
    upgrades = [e for e in events if e.get("type") == "run.upgraded"]
    if track.upgraded and len(upgrades) != 1:
        ctx.violation("upgradeCount", f"{len(upgrades)} run.upgraded events", track.run_id)
    if view.get("status") != "completed":
        return
    output = view.get("output") or {}
    new = MEND_VERSIONS[1]
    if not track.upgraded:
        ctx.violation("upgradeMissing", "a mend run completed without its upgrade", track.run_id)
    elif (output.get("version"), output.get("asked")) != (new, new):
        ctx.violation(
            "upgradeOutput",
            f"version {output.get('version')} asked {output.get('asked')}, not {new} and {new}",
            track.run_id,
        )
