"""Lines for people about forks and upgrades: what a fork carried and which managed
effects lie ahead of it, and what an upgrade changes (or why it cannot).

Owns the wording of `run fork`, `run upgrade` and the upgrade section of `run show`. Pure
functions of the server's receipts and plans; never contacts a server.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from pi_workflows.cli.output import plain, records

__all__ = ["fork_lines", "upgrade_lines"]

_SHORT = 12  # characters of a sha256 revision shown


def _revision(identity: Mapping[str, Any]) -> str:
    text = plain(identity.get("revision"))
    return text[:_SHORT] if len(text) == 64 else text


def fork_lines(receipt: Mapping[str, Any]) -> list[str]:
    """What `run fork` prints: the fork, what it carried, the effects ahead of it."""
    carried_attempts = receipt.get("carriedAttempts", 0)
    carried_effects = receipt.get("carriedEffects", 0)
    lines = [
        f"forked run {plain(receipt.get('runId'))} from run {plain(receipt.get('sourceRunId'))}"
        f" at node {plain(receipt.get('nodeId'))} (visit {plain(receipt.get('visit'))}):"
        f" {carried_attempts} node result(s) and {carried_effects} settled effect(s) carried"
    ]
    for entry in records(receipt.get("outputsSet")):
        lines.append(
            f"output of node {plain(entry.get('nodeId'))} (visit {plain(entry.get('visit'))})"
            " set by you, checked by its contract"
        )
    ahead = records(receipt.get("effectsAhead"))
    if not ahead:
        lines.append("no managed effect lies ahead of it")
        return lines
    lines.append("managed effects ahead of it (each applies as a new effect of the fork):")
    for effect in ahead:
        note = "; the source applied it already" if effect.get("appliedInSource") else ""
        lines.append(
            f"  {plain(effect.get('nodeId'))}: {plain(effect.get('type'))}"
            f" ({plain(effect.get('kind'))}){note}"
        )
    return lines


def upgrade_lines(plan: Mapping[str, Any]) -> list[str]:
    """What an upgrade plan (a dry run, or the receipt of one carried out) says: the code
    it moves to, what changed, the request it re-creates and what the run does next; or
    why it cannot happen."""
    run_id = plain(plan.get("runId"))
    before, after = plan.get("from"), plan.get("to")
    lines: list[str] = []
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        was, now = _revision(before), _revision(after)
        change = "unchanged" if was == now else f"revision {was} -> {now}"
        lines.append(f"code: {PurePath(plain(after.get('ref'))).name} ({change})")
        old, new = before.get("mounted") or {}, after.get("mounted") or {}
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            moved = sorted(k for k in {*old, *new} if old.get(k) != new.get(k))
            if moved:
                names = ", ".join(PurePath(plain(m)).name for m in moved)
                lines.append(f"modules changed: {names}")
    if "changes" in plan:  # a plan the server made (not a refusal before it could)
        changes = [plain(c) for c in plan.get("changes") or []]
        lines.append(
            "graph: " + ("; ".join(changes) if changes else "no change to its nodes or routes")
        )
    problems = [plain(p) for p in plan.get("problems") or []]
    if plan.get("refusal"):
        lines.append(f"refused: {plain(plan.get('refusal'))}")
    if plan.get("unchanged"):
        lines.append("nothing to upgrade: it already runs the workflow's current code")
    for problem in problems:
        lines.append(f"cannot carry it: {problem}")
    if problems or plan.get("refusal") or plan.get("unchanged"):
        return lines
    request = plan.get("recreatesRequest")
    if isinstance(request, Mapping):
        lines.append(
            f"its open {plain(request.get('kind'))} step at node {plain(request.get('nodeId'))}"
            " is presented again from the new code (an answer not yet accepted is sent again;"
            " its deadline starts again)"
        )
    if plan.get("continues"):
        lines.append("then it continues")
    elif plan.get("status") == "paused":
        lines.append(f"it stays paused: pi-workflows run resume {run_id} continues it")
    elif not isinstance(request, Mapping):
        lines.append("it keeps waiting as it was")
    return lines
