"""The oracle: what must hold after a seed, however it was hurt.

Runs in the campaign driver. `check_modes` runs at every server start and at the end; the
rest runs once the seed's runs have settled:

- every run is terminal, or parked with a documented reason after the operator gave up;
- `state diagnose` is clean, and `server status` shows no runner, expired claim or
  ambiguous effect;
- witnesses: no two bodies of one effect key at once; each manual key, and each manual node
  of a run, applied at most once; each idempotent node visit applied at most once; no body
  applied after the operator resolved its effect from evidence that it had not;
- outputs: a chain's arithmetic, a charge's amount, a deployment's choice and whoever made
  it, an agent step's score (only the operator's valid submission is ever accepted, and a
  step without a deadline never times out); an output that claims an effect applied
  matches the body that applied it, and one that says it did not is backed by the
  witnesses (or by a command the campaign killed);
- one `run start` key made one run; `run list` and `run show` agree;
- after `server stop`: no process of ours alive (`after_stop`);
- modes 0700/0600; no claim token or token hash outside `leases.token_hash` (`secrets`);
- attribution (`attributed`, after the stop): every runner that did not end normally,
  every effect whose outcome was lost and every park has a fault that can cause it
  (`attribution.py`); every notification and result of a run with an origin session was
  delivered to that session exactly once, and no workflow message twice (`deliveries`);
- schedules (`scheduled`, after the stop): each fire time started at most one run, every
  recorded start has its run, every fire time until the delete is accounted for (a fire or a
  missed range, as `--catchup` says), no fire failed or stayed queued, every run it started
  completed, and with `--overlap skip|queue` no two of its runs were active at once;
- durable time (`durable`, after the stop): no wait fired before its time or ended twice,
  no round of retries tried more often than its policy allows, no attempt ran its body
  twice, each run consumed at most one event, only a valid one, and never one the node
  refused;
- composition (`composition`, after the stop): no run below an ended parent is still
  live, a parent joined at most once per visit of its composition node (once when it
  completed), and no item of a join ran as two child runs (the children's witnesses);
- Telegram (`telegram`, after the stop; `campaign/telegram_oracle.py`): each decision
  addressed to the seat's audience answered once, matching the run's outcome, from the
  chat only by the allowed user's press; every stranger's press one refusal in the
  history; no update lost or handled twice; every settled decision's message edited with
  its outcome;
- lineage (`lineage.check`, with the settled checks): a fork was made once, names its
  source, and never ran a body it carried; an upgraded run was upgraded once and completed
  on the new code (a fork's output is checked like its workflow's, from the same input);
- `run retry` (`retrying.check`, with the settled checks): a run that failed by design was
  retried as one new run, forked at its failure with `retry: true`, that completed and
  applied no effect of the failed run again;
- runs that message runs (`messaging.check`, after the stop): each event a run's node sent
  is a settled effect, stored once in its receiver and consumed by it, as the witnesses
  outside the database saw it.
"""

from __future__ import annotations

import itertools
import sqlite3
import stat
from collections import Counter
from pathlib import Path
from typing import Any

from campaign import lapse, lineage, messaging, retrying
from campaign import ledger as ledgers
from campaign.attribution import attribute, causes_of
from campaign.context import TERMINAL, RunTrack, SeedContext
from campaign.leaks import token_hashes
from campaign.plan import Mode
from campaign.sessions import agent_records
from campaign.telegram_oracle import check as check_telegram
from campaign.workflows import (
    COMPOSITION,
    MANUAL_NODES,
    RUN_DEADLINES,
    TIMER_ATTEMPTS,
    chain_output,
    manual_value,
    tip,
    tree_total,
)

GIVE_UP_PARKS = frozenset({"runnerNoProgress", "runnerCrashed"})
"""Parks a run may still be in at the end, once the operator gave up resuming it; each of
them must still be explained by faults (`attributed`)."""
SUMMARY_FIELDS = (
    "workflow", "status", "runStatus", "queueStatus", "parkReason", "currentNode", "revision",
    "createdAt", "updatedAt", "finishedAt",
)  # fmt: skip


def check_modes(ctx: SeedContext, *, running: bool) -> None:
    """The state directory is 0700 and what it holds is 0600 (the socket while running)."""
    wanted: list[tuple[Path, int]] = [(ctx.home, 0o700), (ctx.home / "logs", 0o700)]
    for name in ("state.sqlite", "state.sqlite-wal", "state.sqlite-shm", "server.lock"):
        wanted.append((ctx.home / name, 0o600))
    wanted.append((ctx.home / "logs" / "server.log", 0o600))
    if running:
        wanted.append((ctx.home / "server.sock", 0o600))
    for path, mode in wanted:
        try:
            found = stat.S_IMODE(path.lstat().st_mode)
        except FileNotFoundError:
            if path.name in ("server.sock", "state.sqlite", "server.lock") and (
                running or path.name != "server.sock"
            ):
                ctx.violation("modes", f"{path.name} is missing")
            continue
        if found != mode:
            ctx.violation("modes", f"{path} has mode {found:04o}, not {mode:04o}")


def settled(ctx: SeedContext) -> None:
    """Terminal runs, clean diagnose and status, witnesses, outputs, list/show agreement."""
    _agents_submitted(ctx, agent_records(ctx.home))
    _runs_settled(ctx)
    _diagnose_and_status(ctx)
    _witnesses(ctx)
    for track in ctx.tracks:
        if track.run_id is not None and track.status == "completed" and not track.stuck:
            _output(ctx, track)
    _starts(ctx)
    _list_and_show(ctx)
    lineage.check(ctx)
    lapse.check(ctx)
    retrying.check(ctx)
    for problem in ctx.surfaces.problems:
        ctx.violation("surface", problem)


def _runs_settled(ctx: SeedContext) -> None:
    for track in ctx.tracks:
        if track.run_id is None or track.stuck:
            continue
        view = track.view or {}
        status = view.get("status")
        if status in TERMINAL:
            ended_by_deadline = status == "timed_out" and track.planned.workflow in RUN_DEADLINES
            by_design = status == "failed" and retrying.fails_by_design(track)  # checked there
            if (
                status != "completed"
                and not track.cancel_sent
                and not ended_by_deadline
                and not by_design
            ):
                ctx.violation(
                    "runEnded",
                    f"{track.planned.workflow} run ended {status}: {view.get('error')}",
                    track.run_id,
                )
            continue
        reason = view.get("parkReason")
        if status == "paused" and reason in GIVE_UP_PARKS and track.resumes >= 6:
            ctx.note(f"left parked: {track.run_id} {reason} after {track.resumes} resumes")
            continue
        if status == "waiting" and track.gave_up_below:
            ctx.note(f"left waiting: {track.run_id} on a run below that stays parked")
            continue
        ctx.violation(
            "notSettled",
            f"{track.planned.workflow} run is {status} (park {reason}) when the seed ended",
            track.run_id,
        )


def _diagnose_and_status(ctx: SeedContext) -> None:
    code, out, err = ctx.surfaces.cli("state", "diagnose", "--json")
    problems = (out or {}).get("problems") if isinstance(out, dict) else None
    if code != 0 or problems:
        ctx.violation("diagnose", f"state diagnose exited {code}: {problems or err}")
    code, status, err = ctx.surfaces.cli("server", "status", "--json")
    if code != 0 or not isinstance(status, dict):
        ctx.violation("status", f"server status exited {code}: {err}")
        return
    busy = [t for t in ctx.tracks if t.run_id and not t.settled]
    if status.get("expiredClaims"):
        ctx.violation("status", f"server status shows {status['expiredClaims']} expired claims")
    if status.get("ambiguousEffects"):
        ctx.violation("status", f"{status['ambiguousEffects']} effects still ambiguous")
    if status.get("runners") and not busy:
        ctx.violation("status", f"runners left with every run settled: {status['runners']}")
    code, effects, err = ctx.surfaces.cli("effect", "list", "--json")
    for effect in (effects or {}).get("effects", []) if isinstance(effects, dict) else []:
        track = ctx.track_of(str(effect.get("runId")))
        if effect.get("status") in ("applying", "pending", "ambiguous") and not (
            track is not None and track.stuck
        ):
            ctx.violation(
                "effectUnsettled",
                f"effect {effect.get('effectKey')} of node {effect.get('nodeId')} is "
                f"{effect.get('status')} at the end",
                str(effect.get("runId")),
            )


def _witnesses(ctx: SeedContext) -> None:
    witnesses = ctx.witnesses
    witnesses.refresh()
    bodies = [witnesses.bodies[n] for n in witnesses.order]
    for body in bodies:
        if body.overlapped:
            ctx.violation(
                "overlap",
                f"two bodies of effect {body.key} ({body.node} visit {body.visit}) ran at once",
                body.run,
            )
    applied = [b for b in bodies if b.applied]
    manual = [b for b in applied if b.kind == "manual"]
    for key, count in Counter(b.key for b in manual).items():
        if count > 1:
            ctx.violation("doubleApply", f"manual effect {key} applied {count} times", None)
    for (run, node), count in Counter((b.run, b.node) for b in manual).items():
        if count > 1:
            ctx.violation(
                "doubleApply",
                f"manual node {node} applied {count} times (under different keys)",
                run,
            )
    idem = [b for b in applied if b.kind == "idempotent"]
    for (run, node, visit), count in Counter((b.run, b.node, b.visit) for b in idem).items():
        if count > 1:
            ctx.violation(
                "keyNotStable",
                f"idempotent node {node} visit {visit} applied {count} times: its key changed",
                run,
            )
    for track in ctx.tracks:
        for resolution in track.resolutions:
            if not resolution.accepted or resolution.decision == "applied":
                continue
            for body in witnesses.for_key(resolution.key):
                before = resolution.applied_at_decision.get(body.nonce)
                if before is False and body.applied:
                    ctx.violation(
                        "appliedAfterResolution",
                        f"a body of {resolution.key} applied after the operator resolved it "
                        f"{resolution.decision} from witnesses that showed no application",
                        track.run_id,
                    )


def _output(ctx: SeedContext, track: RunTrack) -> None:
    view = track.view or {}
    output = view.get("output")
    workflow = track.planned.workflow
    run_input = track.planned.input
    x = int(run_input["x"])
    run_id = track.run_id
    wrong: list[str] = []
    if not isinstance(output, dict):
        ctx.violation("output", f"{workflow} completed with output {output!r}", run_id)
        return
    if workflow in ("chain", "nest"):
        expected = chain_output(x, int(run_input["n"]))
        shown = {key: output.get(key) for key in expected}
        if shown != expected:
            wrong.append(f"{workflow} output {output} is not {expected}")
    elif workflow == "tree":
        n = int(run_input["n"])
        found = (output.get("total"), output.get("children"))
        if found != (tree_total(x, n), n):
            wrong.append(f"total and children {found} are not {(tree_total(x, n), n)}")
    elif workflow.startswith("payment"):
        if output.get("amount") != 3 * x:
            wrong.append(f"amount {output.get('amount')} is not {3 * x}")
    elif workflow.startswith("deploy"):
        chat = ctx.telegram is not None and ctx.telegram.addresses(track)
        wrong += _decision(track, output, chat=chat)
    elif workflow.startswith("review"):
        wrong += _review(track, output, x)
    elif workflow.startswith("timer"):
        wrong += _timer(track, output, x)
    elif workflow == "mend":
        if (output.get("value"), output.get("tip")) != (17 * x, tip(x)):
            wrong.append(f"value and tip {output} are not {17 * x} and {tip(x)}")
    elif workflow == "sync":
        if output.get("fetched") != x * x:
            wrong.append(f"fetched {output.get('fetched')} is not {x * x}")
        if output.get("applied") and output.get("value") != x * x + 1:
            wrong.append(f"stored {output.get('value')} is not {x * x + 1}")
    if workflow in MANUAL_NODES and output.get("choice", "ship") == "ship":
        wrong += _manual_output(ctx, track, output, MANUAL_NODES[workflow])
    for problem in wrong:
        ctx.violation("output", f"{workflow}: {problem}", run_id)


def _timer(track: RunTrack, output: dict[str, Any], x: int) -> list[str]:
    """The flaky call's value, and the operator's valid event, or the wait's timeout (only
    in `timer-t`, and only when no valid event was taken)."""
    problems = []
    if output.get("value") != 11 * x:
        problems.append(f"the call's value {output.get('value')} is not {11 * x}")
    if output.get("timedOut"):
        if not track.planned.workflow.endswith("-t"):
            problems.append("an event wait without a timeout timed out")
    elif output.get("event") != x:
        problems.append(f"the event's x {output.get('event')} is not {x}")
    elif not track.event_valid_sent:
        problems.append("the run took an event, but no valid event was accepted from us")
    if not output.get("timedOut") and not isinstance(output.get("lateMs"), int):
        problems.append(f"the sleep's lateness is {output.get('lateMs')!r}")
    return problems


def _review(track: RunTrack, output: dict[str, Any], x: int) -> list[str]:
    """An agent step ends with the operator's valid score, or by its deadline (``-t``)."""
    if output.get("timedOut"):
        if not track.planned.workflow.endswith("-t"):
            return ["an agent step without a deadline timed out"]
        if track.submitted_valid:
            return ["the step timed out although the operator's valid submission was accepted"]
        return []
    if output.get("score") != 2 * x:
        return [f"score {output.get('score')} is not {2 * x}"]
    if not track.submitted_valid and not track.valid_sent:
        return ["the step completed, but no valid submission was sent"]
    return []


def _decision(track: RunTrack, output: dict[str, Any], *, chat: bool = False) -> list[str]:
    """The deployment's choice and who made it. With a Telegram seat (`chat`) a person in
    the chat may have won instead of the operator: `telegram_oracle.check` proves who did."""
    choice, by = output.get("choice"), output.get("decidedBy")
    if by == "person":
        if track.decision != choice and not (chat and track.decision is None):
            return [
                f"decided {choice!r} by a person, but the operator's accepted answer was "
                f"{track.decision!r}"
            ]
        return []
    if by == "timeout":
        if not track.planned.workflow.endswith("-t"):
            return ["a decision without a timeout was decided by timeout"]
        if choice != "hold":
            return [f"the timeout default is 'hold', not {choice!r}"]
        if track.decision is not None:
            return [f"decided by timeout although the operator's {track.decision!r} was accepted"]
        return []
    return [f"decidedBy is {by!r}"]


def _manual_output(
    ctx: SeedContext, track: RunTrack, output: dict[str, Any], node: str
) -> list[str]:
    bodies = [b for b in ctx.witnesses.bodies.values() if b.run == track.run_id and b.node == node]
    applied = [b for b in bodies if b.applied]
    expected = manual_value(track.planned.workflow, track.planned.input)
    if output.get("applied"):
        if output.get("value") != expected:
            return [f"the applied value {output.get('value')} is not {expected}"]
        if len(applied) != 1:
            return [
                f"the output says {node} applied, the witnesses show {len(applied)} applications"
            ]
        if (applied[0].result or {}).get("value") != expected:
            return [f"the witness applied {(applied[0].result or {}).get('value')}, not {expected}"]
        return []
    if applied and not any(b.nonce in ctx.killed_shells for b in applied):
        return [f"the output says {node} did not apply, but body pid {applied[0].pid} applied it"]
    return []


def _starts(ctx: SeedContext) -> None:
    for track in ctx.tracks:
        if len(set(track.start_answers)) > 1:
            ctx.violation(
                "startDuplicated",
                f"one run start key made runs {sorted(set(track.start_answers))}",
            )
    code, out, _ = ctx.surfaces.cli("run", "list", "--json", "--limit", "1000")
    runs = out.get("runs", []) if isinstance(out, dict) else []
    started = {t.run_id for t in ctx.tracks if t.run_id}
    # The seed's schedule starts runs too: they carry it as provenance (checked in `scheduled`).
    extra = {str(r.get("runId")) for r in runs if not r.get("schedule")} - started
    if code == 0 and extra:
        ctx.violation("startDuplicated", f"runs nobody started: {sorted(extra)}")


def _list_and_show(ctx: SeedContext) -> None:
    code, out, err = ctx.surfaces.cli("run", "list", "--json", "--limit", "1000")
    if code != 0 or not isinstance(out, dict):
        ctx.violation("runList", f"run list exited {code}: {err}")
        return
    for summary in out.get("runs", []):
        run_id = str(summary.get("runId"))
        code, view, err = ctx.surfaces.cli("run", "show", run_id, "--json")
        if code != 0 or not isinstance(view, dict):
            ctx.violation("runShow", f"run show {run_id} exited {code}: {err}", run_id)
            continue
        track = ctx.track_of(run_id)
        if track is not None:
            track.view = view
        differ = [f for f in SUMMARY_FIELDS if summary.get(f) != view.get(f)]
        if differ:
            ctx.violation(
                "listShowDisagree",
                "run list and run show differ in "
                + ", ".join(f"{f} ({summary.get(f)!r} vs {view.get(f)!r})" for f in differ),
                run_id,
            )


def after_stop(ctx: SeedContext) -> None:
    """Nothing of ours is alive once `server stop` returned; modes still hold."""
    for entry in ctx.processes.survivors():
        ctx.violation(
            "processLeft", f"{entry.role} pid {entry.pid} is still alive after server stop"
        )
    seen = {e.pid for e in ctx.processes.survivors()}
    for pid, cmdline in ctx.processes.strays():
        if pid not in seen:
            ctx.violation("processLeft", f"pid {pid} ({cmdline}) is alive after server stop")
    check_modes(ctx, running=False)


def secrets(ctx: SeedContext) -> None:
    """No token or token hash anywhere but `leases.token_hash` (run after the server stopped)."""
    database = ctx.home / "state.sqlite"
    ctx.token_hashes |= token_hashes(database)
    for name in ("server.log", "channels.log"):
        log = ctx.home / "logs" / name
        if log.exists():
            ctx.leaks.feed(f"the log {name}", log.read_bytes())
    ctx.leaks.feed_database(database)
    for finding in ctx.leaks.findings(ctx.token_hashes) + ctx.leaks.secret_findings():
        ctx.violation("secretLeaked", finding)
    if not ctx.token_hashes:
        ctx.violation("secretLeaked", "no token hash was ever seen in leases (the check is blind)")


def attributed(ctx: SeedContext) -> None:
    """Every abnormal runner end, lost effect outcome and park has an injected cause; every
    message reached its session as it must (run after the last `server stop`)."""
    ledger = ledgers.read(ctx.home / "state.sqlite")
    if ledger.error is not None:
        ctx.violation("ledger", f"the state database could not be read: {ledger.error}")
        return
    workflows = {t.run_id: t.planned.workflow for t in ctx.tracks if t.run_id}
    exhausting = frozenset(
        t.run_id
        for t in ctx.tracks
        if t.run_id
        and t.planned.workflow.startswith("timer")
        and int(t.planned.input.get("fails", 0)) >= TIMER_ATTEMPTS
    )
    causes = causes_of(ctx.faults_done) + lapse.self_kill_causes(ctx.witnesses.self_kills)
    result = attribute(ledger, causes, workflows, exhausting)
    ctx.attributed = dict(sorted(result.explained.items()))
    for why, run_id in result.unexplained:
        ctx.violation("unexplained", why, run_id)
    deliveries(ctx, ledger)
    settings_seen(ctx, ledger)
    durable(ctx, ledger)
    scheduled(ctx, ledger)
    composition(ctx, ledger)
    messaging.check(ctx, ledger)


def telegram(ctx: SeedContext) -> None:
    """The Telegram seat's checks (`campaign/telegram_oracle.py`), after the last stop: each
    decision answered once, by the allowed user when from the chat; every stranger's press
    a refusal in the history; no update lost or handled twice; every settled decision's
    message edited with its outcome."""
    if ctx.telegram is None or not ctx.telegram.configured:
        return
    try:
        facts = ctx.telegram.facts(ctx)
    except sqlite3.Error as exc:
        ctx.violation("ledger", f"the state database could not be read: {exc}")
        return
    ctx.telegram_counts = {
        "presses": len(facts.presses),
        "updates": len(facts.pushed),
        "decisionMessages": len(facts.messages),
        "answeredFromChat": sum(
            1 for s in facts.seated if s.type == "interaction.answered" and s.client == "channels"
        ),
        "refusals": sum(1 for s in facts.seated if s.type == "decision.refused"),
    }
    for kind, message, run_id in check_telegram(facts):
        ctx.violation(kind, message, run_id)


def composition(ctx: SeedContext, ledger: ledgers.Ledger) -> None:
    """Child runs, from the database after the last stop and the children's witnesses: a
    run below an ended parent has ended too (cancelled with it, or finished before); a
    parent joined at most once per visit of its composition node, exactly once when it
    completed; no item of a join ran as two child runs; and no window of a rate-limited
    join's period holds more starts than its rate (the start times the database recorded,
    across every kill and restart of the seed)."""
    for wait_id, (parent_id, count, period, starts) in ledger.paced.items():
        crowded = [
            (starts[i], starts[i + count])
            for i in range(len(starts) - count)
            if starts[i + count] - starts[i] < period
        ]
        if crowded:
            ctx.violation(
                "rateExceeded",
                f"join {wait_id} started {count + 1} children within {period} ms (at"
                f" {crowded[0][0]} and {crowded[0][1]}): its rate allows {count}",
                parent_id,
            )
    below: dict[str, list[ledgers.RunRow]] = {}
    for row in ledger.runs.values():
        if row.parent_run_id is not None:
            below.setdefault(row.parent_run_id, []).append(row)
    ended = ("completed", "failed", "timed_out", "cancelled")
    for parent_id, rows in below.items():
        parent = ledger.runs.get(parent_id)
        if parent is not None and parent.status in ended:
            for child in rows:
                if child.status not in ended:
                    ctx.violation(
                        "childOutlivedParent",
                        f"child run {child.run_id} is {child.status} though its parent"
                        f" {parent_id} ended {parent.status}",
                        parent_id,
                    )
    for track in ctx.tracks:
        if track.run_id is None or track.planned.workflow not in COMPOSITION:
            continue
        joins = ledger.joins.get(track.run_id, 0)
        visits = len(
            {
                (a.round, a.visit)
                for a in ledger.attempts
                if a.run_id == track.run_id and a.node_id in ("spread", "inner")
            }
        )
        if joins > max(visits, 1) or (track.status == "completed" and joins < 1):
            ctx.violation(
                "joinCount",
                f"the parent joined its children {joins} times in {visits} visits",
                track.run_id,
            )
        if track.planned.workflow == "nest":
            # Two levels of subworkflow: each run's children at most one a visit.
            level = [track.run_id]
            while level:
                for run_id in level:
                    children = below.get(run_id, [])
                    visited = len(
                        {
                            (a.round, a.visit)
                            for a in ledger.attempts
                            if a.run_id == run_id and a.node_id == "inner"
                        }
                    )
                    if len(children) > max(visited, 1):
                        ctx.violation(
                            "childTwice",
                            f"{len(children)} child runs of {run_id} for {visited} visits of"
                            " its subworkflow node",
                            track.run_id,
                        )
                level = [child.run_id for r in level for child in below.get(r, [])]
            continue
        for item in range(int(track.planned.input["n"])):
            path = ctx.witness_dir / "children" / f"{track.run_id}-{item}"
            try:
                ran = set(path.read_text().split())
            except OSError:
                ran = set()
            if len(ran) > 1:
                ctx.violation(
                    "childTwice", f"item {item} ran as child runs {sorted(ran)}", track.run_id
                )
            if track.status == "completed" and not ran:
                ctx.violation(
                    "childLost", f"item {item} of a completed join never ran", track.run_id
                )


SCHEDULE_SLACK_MS = 3000
"""Fire times this close to the schedule's delete may be deleted before they fire."""


def scheduled(ctx: SeedContext, ledger: ledgers.Ledger) -> None:
    """The seed's schedule, from the database after the last stop."""
    if ctx.plan.schedule is None:
        return
    for (schedule_id, fire_at), count in Counter(
        (r.schedule_id, r.fire_at) for r in ledger.scheduled_runs
    ).items():
        if count > 1:
            ctx.violation("fireTwice", f"fire {fire_at} of {schedule_id} started {count} runs")
    runs = {r.run_id: r for r in ledger.scheduled_runs}
    for run in ledger.scheduled_runs:
        if run.status != "completed":
            ctx.violation("scheduledRunEnded", f"a run of the schedule is {run.status}", run.run_id)
    if not ledger.schedules:
        ctx.violation("scheduleLost", "the seed added a schedule the database does not have")
    for schedule in ledger.schedules:
        fires = [f for f in ledger.fires if f.schedule_id == schedule.schedule_id]
        for fire in fires:
            where = f"fire {fire.fire_at} of schedule {schedule.name}"
            fired = runs.get(str(fire.run_id)) if fire.run_id else None
            if fire.outcome == "started" and (fired is None or fired.fire_at != fire.fire_at):
                ctx.violation("fireWithoutRun", f"{where} started no run of its own")
            elif fire.outcome in ("failed", "queued"):
                ctx.violation("fireFailed", f"{where} is {fire.outcome}")
        missed = [f for f in fires if f.outcome == "missed"]
        if schedule.catchup == "all" and missed:
            ctx.violation("catchupIgnored", f"schedule {schedule.name} (catchup all) missed fires")
        if schedule.every_ms is not None and schedule.deleted_at is not None:
            recorded = {f.fire_at for f in fires if f.outcome != "missed"}
            end = schedule.deleted_at - SCHEDULE_SLACK_MS
            lost = [
                t
                for t in range(schedule.anchor_at + schedule.every_ms, end + 1, schedule.every_ms)
                if t not in recorded
                and not any(m.fire_at <= t <= (m.missed_until or m.fire_at) for m in missed)
            ]
            if lost:
                ctx.violation(
                    "fireLost",
                    f"schedule {schedule.name}: {len(lost)} fire time(s) never accounted for,"
                    f" the first {lost[0]}",
                )
        if schedule.overlap in ("skip", "queue"):
            mine = sorted(
                (r for r in ledger.scheduled_runs if r.schedule_id == schedule.schedule_id),
                key=lambda r: r.created_at,
            )
            for before, after in itertools.pairwise(mine):
                if before.finished_at is None or after.created_at < before.finished_at:
                    ctx.violation(
                        "overlapIgnored",
                        f"schedule {schedule.name} (overlap {schedule.overlap}) started"
                        f" {after.run_id} while {before.run_id} was active",
                        after.run_id,
                    )


def durable(ctx: SeedContext, ledger: ledgers.Ledger) -> None:
    """Durable waits, retry rounds and events, from the database and the witnesses."""
    counts: Counter[str] = Counter()
    counts.update(f"wait {w.kind} {w.status}" for w in ledger.waits)
    counts.update(f"event {s.status}" for s in ledger.signals)
    counts.update(
        f"attempt {a.status}" for a in ledger.attempts if a.status in ("retried", "exhausted")
    )
    counts.update(f"fire {f.outcome}" for f in ledger.fires)
    counts["scheduled runs"] += len(ledger.scheduled_runs)
    ctx.durable_counts = dict(counts)
    for wait in ledger.waits:
        if wait.status == "pending":
            track = ctx.track_of(wait.run_id)
            if track is None or not track.stuck:
                ctx.violation("waitLeft", f"{wait.kind} wait {wait.wait_id} is still pending",
                              wait.run_id)  # fmt: skip
        if (
            wait.status == "fired"
            and wait.due_at is not None
            and (wait.fired_at or 0) < wait.due_at
        ):
            ctx.violation(
                "firedEarly",
                f"{wait.kind} wait {wait.wait_id} fired at {wait.fired_at}, before {wait.due_at}",
                wait.run_id,
            )
    rounds: Counter[tuple[str, int, str, int, int]] = Counter()
    executions: Counter[tuple[str, str]] = Counter()
    epoch: dict[tuple[str, int, str, int], int] = {}
    for attempt in ledger.attempts:
        visit = (attempt.run_id, attempt.round, attempt.node_id, attempt.visit)
        retry_round = epoch.get(visit, 0)
        if attempt.status != "interrupted" and attempt.status not in ("running", "waiting"):
            rounds[(*visit, retry_round)] += 1
        if attempt.status == "exhausted":
            epoch[visit] = retry_round + 1
        executions[(attempt.run_id, attempt.node_id)] += 1
    timer_runs = {
        t.run_id: t for t in ctx.tracks if t.run_id and t.planned.workflow.startswith("timer")
    }
    for (run_id, round_no, node, visit_no, retry_round), tries in rounds.items():
        if run_id in timer_runs and node == "call" and tries > TIMER_ATTEMPTS:
            ctx.violation(
                "triedTooOften",
                f"node {node} visit {visit_no} (round {round_no}) was tried {tries} times in retry"
                f" round {retry_round + 1}; its policy allows {TIMER_ATTEMPTS}",
                run_id,
            )
    for run_id in timer_runs:
        lines = _tries(ctx, run_id, "call")
        if len(lines) != len(set(lines)):
            ctx.violation("bodyRanTwice", "one attempt of node call ran its body twice", run_id)
        if len(lines) > executions[(run_id, "call")]:
            ctx.violation(
                "bodyRanTwice",
                f"node call ran {len(lines)} times in {executions[(run_id, 'call')]} attempts",
                run_id,
            )
    consumed: Counter[str] = Counter()
    for signal in ledger.signals:
        track = timer_runs.get(signal.run_id)
        if track is None:
            continue  # events between runs: campaign/messaging.py
        x = int(track.planned.input["x"])
        value = signal.data.get("x") if isinstance(signal.data, dict) else None
        if signal.status == "consumed":
            consumed[signal.run_id] += 1
            if value != x:
                ctx.violation("invalidAccepted", f"event {signal.signal_id} with x={value} was"
                              " consumed", signal.run_id)  # fmt: skip
        if signal.status == "rejected" and value == x:
            ctx.violation("validRejected", f"valid event {signal.signal_id} was refused",
                          signal.run_id)  # fmt: skip
    for run_id, count in consumed.items():
        if count > 1:
            ctx.violation("eventTwice", f"the run consumed {count} events", run_id)
    keys = Counter((s.run_id, s.idempotency_key) for s in ledger.signals if s.idempotency_key)
    for (run_id, key), count in keys.items():
        if count > 1:
            ctx.violation("eventDuplicated", f"event key {key} stored {count} times", run_id)


def _tries(ctx: SeedContext, run_id: str, node: str) -> list[str]:
    path = ctx.witness_dir / "tries" / f"{run_id}-{node}"
    try:
        return path.read_text().split()
    except OSError:
        return []


def settings_seen(ctx: SeedContext, ledger: ledgers.Ledger) -> None:
    """Each completed `chain` run's `done` node saw the settings of exactly the change its
    attempt recorded (`settingsSeen`): the `boost` of its output is that change's document,
    and the `change` it reports is the attempt's; no attempt records a change the run never
    had (`settingsChange`)."""
    done: dict[str, ledgers.AttemptRow] = {}
    for attempt in ledger.attempts:
        change = attempt.settings_change
        known = (attempt.run_id, change) in ledger.settings
        if change is not None and ledger.has_settings(attempt.run_id) and not known:
            ctx.violation(
                "settingsChange",
                f"attempt {attempt.attempt_id} records settings change {attempt.settings_change},"
                " which the run never had",
                attempt.run_id,
            )
        if attempt.node_id == "done" and attempt.status == "completed":
            done[attempt.run_id] = attempt
    for track in ctx.tracks:
        output = (track.view or {}).get("output")
        run_id = track.run_id
        if track.planned.workflow != "chain" or run_id is None or not isinstance(output, dict):
            continue
        finished = done.get(run_id)
        if finished is None or "change" not in output:
            continue
        document = ledger.settings.get((run_id, finished.settings_change or 0))
        seen = (output.get("change"), output.get("boost"))
        recorded = (finished.settings_change, (document or {}).get("boost"))
        if seen != recorded:
            ctx.violation(
                "settingsSeen",
                f"chain run {run_id}'s done node saw (change, boost) {seen}; its attempt"
                f" recorded {recorded}",
                run_id,
            )


def deliveries(ctx: SeedContext, ledger: ledgers.Ledger) -> None:
    """What the session clients and headless agents hold agrees with `workflow_messages`.

    A notification or a result of a run with an origin session (not detached) is `sent`
    with the entry id of the one branch entry that holds it; no message of any run is in
    its session's branch twice, or marked `sent` without being there.
    """
    records = ctx.sessions.records() if ctx.sessions is not None else {}
    records.update(agent_records(ctx.home))
    branches: dict[str, dict[str, list[str]]] = {}
    for session, lines in records.items():
        branch = branches.setdefault(session, {})
        for line in lines:
            if line.get("e") == "present":
                branch.setdefault(str(line["msg"]), []).append(str(line["entry"]))
            elif line.get("e") == "problem":
                ctx.violation("sessionClient", f"{session}: {line.get('message')}")
    for message in ledger.messages:
        if message.session is None:
            continue
        entries = branches.get(message.session, {}).get(message.message_id, [])
        where = f"{message.kind} message {message.message_id} of session {message.session}"
        if len(entries) > 1:
            ctx.violation("deliveredTwice", f"{where} is in the session {len(entries)} times",
                          message.run_id)  # fmt: skip
        if message.status == "sent" and message.entry_id not in entries:
            ctx.violation(
                "sentNotPresented",
                f"{where} is sent as entry {message.entry_id}, which the session does not hold",
                message.run_id,
            )
        if (
            message.kind in ("notification", "terminal", "followUp")
            and not message.detached
            and message.session in branches
            and (message.status != "sent" or not entries)
        ):
            ctx.violation(
                "neverDelivered",
                f"{where} is {message.status} with {len(entries)} entries in the session",
                message.run_id,
            )
    _follow_ups(ctx, ledger, records)


def _follow_ups(
    ctx: SeedContext, ledger: ledgers.Ledger, records: dict[str, list[dict[str, Any]]]
) -> None:
    """Every follow-up of a completed run whose result reached its session was sent, after
    that result and in queue order (by the order the session added them); one of a run that
    ended otherwise was cancelled, unless an earlier completed round sent it."""
    order: dict[str, int] = {}
    for lines in records.values():
        for position, line in enumerate(lines):
            if line.get("e") == "present":
                order.setdefault(str(line["msg"]), position)
    terminals: dict[str, list[ledgers.Message]] = {}
    for message in ledger.messages:  # oldest first: the last is the latest round's result
        if message.kind == "terminal":
            terminals.setdefault(message.run_id, []).append(message)
    by_run: dict[str, list[ledgers.FollowUpRow]] = {}
    for follow_up in ledger.follow_ups:
        by_run.setdefault(follow_up.run_id, []).append(follow_up)
    for run_id, listed in by_run.items():
        run = ledger.runs.get(run_id)
        status = None if run is None else run.status
        for follow_up in listed:
            where = f"follow-up #{follow_up.seq} ({follow_up.follow_up_id}) of run {run_id}"
            delivered = bool(terminals.get(run_id)) and terminals[run_id][-1].status == "sent"
            if status == "completed" and delivered and follow_up.status != "sent":
                ctx.violation(
                    "followUpNotSent",
                    f"{where} is {follow_up.status} although the run completed and its result"
                    " was delivered",
                    run_id,
                )
            if status in ("failed", "timed_out", "cancelled") and follow_up.status in (
                "queued",
                "ready",
            ):
                ctx.violation("followUpNotCancelled", f"{where} is {follow_up.status}", run_id)
        shown = [
            order[f.message_id]
            for f in listed
            if f.status == "sent" and f.message_id is not None and f.message_id in order
        ]
        results = [
            order[m.message_id]
            for m in terminals.get(run_id, [])
            if m.status == "sent" and m.message_id in order
        ]
        first_result = min(results, default=None)
        if shown != sorted(shown) or (shown and (first_result is None or first_result >= shown[0])):
            ctx.violation(
                "followUpOutOfOrder",
                f"the follow-ups of run {run_id} reached the session out of order or before"
                " its result",
                run_id,
            )


def _agents_submitted(ctx: SeedContext, records: dict[str, list[dict[str, Any]]]) -> None:
    """A detached run's valid output is submitted by its headless agent, not the operator:
    it counts once an agent sent it (a stopped agent may not live to hear it accepted; the
    next server validates it); the output's score says which one was accepted."""
    for track in ctx.tracks:
        if track.run_id is None or track.planned.mode is not Mode.DETACHED:
            continue
        for line in records.get(f"detached-{track.run_id}", []):
            if not str(line.get("name", "")).startswith("valid"):
                continue
            if line.get("e") == "sending":
                track.valid_sent = True
            elif line.get("e") == "submit" and line.get("status") == "accepted":
                track.submitted_valid = True
