"""One seed of the campaign, start to finish: `python -m campaign.seed --seed N --out FILE`.

Runs in its own process (the campaign runs every seed in a fresh one, so a seed's
environment, threads and children never leak into the next). Phases:

1. set-up: a temporary root with a state directory, a HOME, a project whose
   `.pi/workflows/` holds the campaign's workflows, and a witness directory; the server is
   started with `pi-workflows server start`;
2. chaos: every tick (about 0.1 s), observe, fire the next fault when due, let the operator
   act; until every planned run started and every planned fault fired;
3. quiesce: no more faults; the operator continues until every run settled (or the stuck
   detector gave up on it) and every origin session has nothing left to present;
4. oracle: `oracle.settled`, then the session clients stop, `server stop`,
   `oracle.after_stop`, `oracle.secrets`, and `oracle.attributed` (attribution and
   deliveries, read from the stopped server's database).

Origin sessions have one scripted client each (`sessions.py`), started after the server;
detached runs get the stand-in headless agent from the server (`PI_WORKFLOWS_PI` is the
seed's `bin/pi`).

The result (a JSON file) lists the faults that fired, the runs and the violations.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Final

from campaign import oracle
from campaign.context import RunTrack, SeedContext
from campaign.faults import FaultRunner
from campaign.leaks import LeakScanner
from campaign.observe import log_tail, observe
from campaign.operator import act
from campaign.plan import make_plan
from campaign.processes import Processes
from campaign.sessions import SessionClients, write_pi_wrapper
from campaign.surfaces import Surfaces
from campaign.telegram import TelegramSeat
from campaign.witness import Witnesses
from campaign.workflows import write_project

LEASE_SECONDS: Final = 2.0
TICK: Final = 0.1
QUIESCE_SECONDS: Final = 180.0


def seed_environment(root: Path, seed: int = 0, server_faults: str | None = None) -> dict[str, str]:
    """The environment every CLI command, server and session client of the seed runs with.

    `server_faults` arms `PI_WORKFLOWS_FAULTS` (for example the rule-off flag
    `runs.presentation_moves_execution=flag`: the oracle must then see violations).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PI_WORKFLOWS_", "XDG_"))}
    env.update(
        {
            "HOME": str(root / "home"),
            "PI_WORKFLOWS_HOME": str(root / "state"),
            "PI_WORKFLOWS_LEASE_SECONDS": str(LEASE_SECONDS),
            "PI_WORKFLOWS_IDLE_EXIT_SECONDS": "0",
            "PI_WORKFLOWS_KILL_GRACE_SECONDS": "1",
            "PI_WORKFLOWS_NODE_GRACE_SECONDS": "1",
            "PI_WORKFLOWS_PI": str(root / "bin" / "pi"),
            # A Telegram seat's channel process, SIGKILLed, comes back within a second.
            "PI_WORKFLOWS_CHANNEL_BACKOFF_SECONDS": "0.3",
            "CAMPAIGN_SEED": str(seed),
        }
    )
    if server_faults:
        env["PI_WORKFLOWS_FAULTS"] = server_faults
    return env


def run_seed(
    seed: int,
    root: Path,
    *,
    stuck_seconds: float,
    scenario: str | None = None,
    server_faults: str | None = None,
) -> dict[str, Any]:
    """Run one seed in `root` (an empty directory) and return its result."""
    env = seed_environment(root, seed, server_faults)
    # The Python client auto-starts servers from this process: they inherit this environment.
    os.environ.clear()
    os.environ.update(env)
    home, project, witness_dir = root / "state", root / "project", root / "witness"
    (root / "home").mkdir(parents=True)
    write_project(project, witness_dir)
    pi_wrapper = write_pi_wrapper(root)
    leaks = LeakScanner()
    processes = Processes(str(home))
    ctx_notes: list[str] = []
    surfaces = Surfaces(home, project, env, processes, leaks, f"campaign-{seed}", ctx_notes.append)
    plan = make_plan(seed, LEASE_SECONDS, scenario)
    ctx = SeedContext(
        seed=seed,
        root=root,
        home=home,
        project=project,
        witness_dir=witness_dir,
        plan=plan,
        lease_seconds=LEASE_SECONDS,
        surfaces=surfaces,
        processes=processes,
        witnesses=Witnesses(witness_dir),
        leaks=leaks,
        pi_wrapper=pi_wrapper,
    )
    ctx.sessions = SessionClients(
        root / "sessions", home, env, seed, processes, ctx.violation, ctx.note
    )
    surfaces.note = ctx.note
    ctx.tracks = [RunTrack(planned) for planned in plan.runs]
    if plan.telegram is not None:
        leaks.secret("the bot token", plan.telegram.token)
        ctx.telegram = TelegramSeat(plan.telegram, seed, root)
    faults = FaultRunner(ctx)
    try:
        if ctx.telegram is not None:
            ctx.telegram.start()
        _phases(ctx, faults, stuck_seconds)
    except BuildChangedError as exc:
        ctx.violation("buildChanged", str(exc))
    except Exception:
        ctx.violation("campaignError", traceback.format_exc(limit=8).replace("\n", " | "))
    finally:
        faults.finish()
        ctx.sessions.stop_all()
        surfaces.close()
        processes.kill_everything()
        if ctx.telegram is not None:
            ctx.telegram.close()
    return _result(ctx)


def _phases(ctx: SeedContext, faults: FaultRunner, stuck_seconds: float) -> None:
    # 1. set-up
    code, _, err = ctx.surfaces.cli("server", "start", "--json")
    if code != 0:
        ctx.violation("startFailed", f"server start exited {code}: {err}")
        return
    assert ctx.sessions is not None
    if ctx.telegram is not None:
        ctx.telegram.configure(ctx)
    used = sorted({t.planned.session for t in ctx.tracks if t.planned.session})
    ctx.sessions.start_all(used)
    # 2. chaos (the seed's schedule is added and deleted within it)
    while (
        not faults.finished
        or any(t.run_id is None and not t.skipped for t in ctx.tracks)
        or (ctx.plan.schedule is not None and not ctx.schedule.deleted)
    ):
        _tick(ctx, faults, stuck_seconds)
    ctx.note("chaos over; quiescing")
    # 3. quiesce
    deadline = time.monotonic() + QUIESCE_SECONDS
    delivered_at = 0.0
    while not all(_quiet(t) for t in ctx.tracks) or not ctx.schedule.quiet or not delivered_at:
        if time.monotonic() > deadline:
            ctx.violation("seedTimeout", f"runs did not settle within {QUIESCE_SECONDS:.0f} s")
            break
        _tick(ctx, faults, stuck_seconds)
        if all(_quiet(t) for t in ctx.tracks) and ctx.schedule.quiet and _delivered(ctx):
            delivered_at = time.monotonic()
    faults.finish()
    observe(ctx)
    if ctx.telegram is not None:
        ctx.telegram.finish_kills(ctx)
        ctx.telegram.settle(ctx)
    # 4. oracle
    oracle.settled(ctx)
    ctx.sessions.stop_all()
    began = round(time.time() * 1000)
    code, _, err = ctx.surfaces.cli("server", "stop", "--json")
    ctx.faults_done.append(
        {"kind": "finalStop", "startMs": began, "endMs": round(time.time() * 1000),
         "final": True, "skipped": False, "detail": "the seed's last server stop"}
    )  # fmt: skip
    ctx.surfaces.close()
    ctx.server_up = False
    if code != 0:
        ctx.violation("stopFailed", f"server stop exited {code}: {err}; {log_tail(ctx.home)}")
    oracle.after_stop(ctx)
    oracle.secrets(ctx)
    oracle.attributed(ctx)
    oracle.telegram(ctx)


def _delivered(ctx: SeedContext) -> bool:
    """Every origin session with a client has nothing left to present (checked once the
    runs are quiet): the session clients are alive and caught up."""
    assert ctx.sessions is not None
    for session in ctx.sessions.clients:
        view = ctx.surfaces.read("get_session", session)
        if view is None or view.get("messages"):
            return False
    return True


def _quiet(track: RunTrack) -> bool:
    if track.skipped:
        return True
    if track.settled:
        return track.effects_checked_after_end or track.stuck
    if track.status == "waiting" and track.gave_up_below:
        return True
    return (
        track.status == "paused"
        and (track.view or {}).get("parkReason") != "serverStopped"
        and track.resumes >= 6
    )


class BuildChangedError(Exception):
    """The checkout changed under the seed (its schema): no server of it can start again."""


ANOTHER_BUILD: Final = "was created by another build of the pi-workflows schema"


def _tick(ctx: SeedContext, faults: FaultRunner, stuck_seconds: float) -> None:
    if ANOTHER_BUILD in ctx.surfaces.last_error or any(
        ANOTHER_BUILD in v.message for v in ctx.violations
    ):
        raise BuildChangedError(
            "the schema of this checkout changed while the seed ran (someone edited it): its "
            "state database is refused; the seed is abandoned, run it again"
        )
    began = time.monotonic()
    observe(ctx)
    faults.tick()
    assert ctx.sessions is not None
    ctx.sessions.tick()
    if ctx.telegram is not None:
        ctx.telegram.tick(ctx)
    act(ctx, stuck_seconds=stuck_seconds)
    spent = time.monotonic() - began
    if spent < TICK:
        time.sleep(TICK - spent)  # the polling cadence; nothing waits on it for ordering


def _result(ctx: SeedContext) -> dict[str, Any]:
    if ctx.telegram is not None:
        # The report holds everything of the seed it returns: never the bot token.
        ctx.leaks.feed("the seed's report", json.dumps(_report(ctx)))
        for finding in ctx.leaks.secret_findings():
            ctx.violation("secretLeaked", finding)
    return _report(ctx)


def _report(ctx: SeedContext) -> dict[str, Any]:
    runs = []
    for track in ctx.tracks:
        view = track.view or {}
        runs.append(
            {
                "index": track.planned.index,
                "workflow": track.planned.workflow,
                "runId": track.run_id,
                "status": view.get("status"),
                "parkReason": view.get("parkReason"),
                "resumes": track.resumes,
                "resolutions": [r.decision for r in track.resolutions if r.accepted],
                "mode": str(track.planned.mode),
            }
        )
    return {
        "seed": ctx.seed,
        "seconds": round(ctx.elapsed(), 2),
        "plan": ctx.plan.describe(),
        "faults": ctx.faults_done,
        "runs": runs,
        "servers": ctx.servers_seen,
        "cliKills": ctx.surfaces.cli_kills,
        "witnessBodies": len(ctx.witnesses.bodies),
        "attributed": ctx.attributed,
        "durable": ctx.durable_counts,
        "telegram": ctx.telegram_counts,
        "sessionClients": {
            s: {"starts": c.starts, "kills": c.kills}
            for s, c in (ctx.sessions.clients.items() if ctx.sessions else [])
        },
        "tokenHashesSeen": len(ctx.token_hashes),
        "bytesScannedForSecrets": ctx.leaks.fed,
        "violations": [v.to_json() for v in ctx.violations],
        "notes": ctx.notes,
    }


def main(argv: list[str] | None = None) -> int:
    """Run one seed and write its result as JSON."""
    parser = argparse.ArgumentParser(prog="python -m campaign.seed")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--root", type=Path, help="an empty directory (default: a new one)")
    parser.add_argument("--stuck-seconds", type=float, default=60.0)
    parser.add_argument("--keep", action="store_true", help="keep the seed's directory")
    parser.add_argument("--scenario", help="a named plan instead of the seed's random one")
    parser.add_argument("--server-faults", help="PI_WORKFLOWS_FAULTS for the seed's servers")
    args = parser.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix=f"pwc{args.seed}-"))
    result = run_seed(
        args.seed,
        root / "r",
        stuck_seconds=args.stuck_seconds,
        scenario=args.scenario,
        server_faults=args.server_faults,
    )
    if result["violations"] or args.keep:
        result["kept"] = str(root)
    else:
        shutil.rmtree(root / "r", ignore_errors=True)
    args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
