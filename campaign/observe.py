"""Looking at a seed in progress: the server, its runners, the runs, the witnesses, the leases.

Runs in the campaign driver, once per tick, only through the public surfaces (the Python
client) plus two read-only side channels the oracle needs: the witness log and the token
hashes in `leases` (sampled, so that a hash that was replaced is still known at the end).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Final

from campaign.context import TERMINAL, RunTrack, SeedContext
from campaign.leaks import token_hashes
from campaign.oracle import check_modes

HASH_SAMPLE_SECONDS: Final = 0.5
STALL_SECONDS: Final = 30.0
"""How long the oracle lets a step be seen stalled in a row (the rule's repairs act at the
next attach or idle report, within seconds; a frozen server's faults last a few)."""


def observe(ctx: SeedContext) -> None:
    """One look at everything; updates `ctx` in place."""
    _server_still_there(ctx)
    status = ctx.surfaces.read("status")
    if status is None:
        ctx.server_up = False
        return
    ctx.server_up = True
    pid = int(status["pid"])
    if status.get("epoch") is not None:
        ctx.server_epoch = int(status["epoch"])
    if pid != ctx.server_pid:
        ctx.server_pid = pid
        ctx.servers_seen += 1
        ctx.processes.note(pid, "server")
        ctx.note(f"server pid {pid} epoch {status.get('epoch')}")
        check_modes(ctx, running=True)
    ctx.runner_pids = {}
    for runner in status.get("runners", []):
        if runner.get("pid"):  # none while it is launching
            ctx.processes.note(int(runner["pid"]), "runner")
            ctx.runner_pids[int(runner["pid"])] = str(runner["runId"])
    now = time.monotonic()
    for track in ctx.tracks:
        if track.run_id is None or (track.status in TERMINAL and track.effects_checked_after_end):
            continue
        view = ctx.surfaces.read("get_run", track.run_id)
        if not view:
            continue
        track.view = view
        runner = view.get("runner")
        if isinstance(runner, dict) and runner.get("pid"):
            ctx.processes.note(int(runner["pid"]), "runner")
        _delivery(ctx, track, view, now)
        fingerprint = (view.get("status"), view.get("revision"), view.get("currentNode"))
        if fingerprint != track.fingerprint:
            track.fingerprint = fingerprint
            track.changed_at = now
    _witnesses(ctx)
    if now - ctx.last_hash_sample > HASH_SAMPLE_SECONDS:
        ctx.last_hash_sample = now
        ctx.token_hashes |= token_hashes(ctx.home / "state.sqlite")


def _delivery(ctx: SeedContext, track: RunTrack, view: dict[str, Any], now: float) -> None:
    """The delivery rule: a pending step is inside a live turn of a live seat, or due to be
    presented again. A step seen `stalled` (delivered, no turn works on it, nothing due)
    for longer than `STALL_SECONDS` in a row is a violation."""
    waiting = view.get("waitingOn")
    found = waiting.get("delivery") if isinstance(waiting, dict) else None
    if not isinstance(found, dict) or found.get("state") != "stalled":
        track.stalled_since = None
        return
    assert isinstance(waiting, dict)
    request = str(waiting.get("requestId"))
    if track.stalled_since is None or track.stalled_request != request:
        track.stalled_since, track.stalled_request = now, request
        return
    if now - track.stalled_since > STALL_SECONDS:
        ctx.violation(
            "stepStalled",
            f"step {waiting.get('nodeId')} ({request}) of run {track.run_id} was stalled for"
            f" over {STALL_SECONDS:g} s: {found.get('detail')}",
            track.run_id,
        )


def _witnesses(ctx: SeedContext) -> None:
    ctx.witnesses.refresh()
    for body in ctx.witnesses.unfinished():
        ctx.processes.note(body.pid, "shell" if body.form == "shell" else "runner")


def _server_still_there(ctx: SeedContext) -> None:
    """A server that exits without being told to is a violation (it must exit loudly)."""
    if ctx.server_pid is None or not ctx.server_up:
        return
    seen = ctx.processes.seen.get(ctx.server_pid)
    if seen is not None and not ctx.processes.alive(seen):
        ctx.violation(
            "serverExited",
            f"the server (pid {ctx.server_pid}) exited by itself; log: {log_tail(ctx.home)}",
        )
        ctx.server_up = False


def log_tail(home: Path, lines: int = 12) -> str:
    """The end of the server log, as one line."""
    path = home / "logs" / "server.log"
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(text.splitlines()[-lines:])


def dump_run(ctx: SeedContext, run_id: str, why: str) -> str:
    """Write everything known about a run to the seed's directory; return the file."""
    path = ctx.root / f"dump-{run_id}.json"
    data: dict[str, Any] = {
        "why": why,
        "view": ctx.surfaces.read_no_start("get_run", run_id),
        "effects": ctx.surfaces.read_no_start("list_effects", run_id),
        "status": ctx.surfaces.read_no_start("status"),
        "witness": [
            {"key": b.key, "node": b.node, "visit": b.visit, "pid": b.pid, "events": b.events}
            for b in ctx.witnesses.bodies.values()
            if b.run == run_id
        ],
        "serverLog": log_tail(ctx.home, 60).split(" | "),
        "notes": ctx.notes[-80:],
    }
    path.write_text(json.dumps(data, indent=2, default=str))
    return str(path)
