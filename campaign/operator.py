"""The operator model: what a careful person does with the runs of a seed.

Runs in the campaign driver, once per tick, after observation. It starts the planned runs,
answers checkpoints and human decisions, sends the events `timer` runs wait for through
`run signal` (sometimes before the run waits, sometimes a wrong one first, which must come
back with the validation's message, sometimes the same event twice under one key, which
must adopt), submits agent steps through `interaction submit`
(sometimes a wrong output first, which must come back with the validation's message, and
again when a fault killed the validating runner), resolves ambiguous effects from the witnesses
(applied when a body's witness shows it applied, with the result it applied; otherwise
rejected, or sometimes `--retry`), resumes parked runs, and resumes the runs a fault paused.
Each command goes through the CLI or the Python client (a seeded choice per command) with one
idempotency key per logical command, so a killed CLI or a lost connection is retried safely.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any, Final

from campaign import lineage, messaging, retrying
from campaign.context import TERMINAL, Resolution, RunTrack, ScheduleTrack, SeedContext
from campaign.observe import dump_run
from campaign.plan import Mode, rng_for
from campaign.surfaces import Answer
from campaign.workflows import COMPOSITION, SHELL_NODES

MAX_RESUMES: Final = 6
"""Parks the operator resumes per run before it gives up (the run then stays parked)."""

DEADLINE_PASSED: Final = "the step's deadline passed before the submission was validated"
"""How a submission is refused when its step timed out while it was validating (`-t`)."""

MAX_RETRIES_PER_KEY: Final = 2
"""`effect resolve --retry` at most this often per effect key."""

EVENT_REJECTED: Final = "x must be the run's"
"""How a `timer` run's validate refuses a wrong event."""


SCHEDULE_REFRESH_SECONDS: Final = 1.0
"""How often the operator lists the runs the seed's schedule started."""


def act(ctx: SeedContext, *, stuck_seconds: float) -> None:
    """One pass over the seed's schedule and every run."""
    schedule(ctx)
    for track in ctx.tracks:
        if track.run_id is None:
            if track.skipped:
                continue
            if track.planned.fork is not None:
                lineage.fork_when_ready(ctx, track, functools.partial(_command, ctx, track))
            elif track.planned.retry_of is not None:
                retrying.retry_when_ready(ctx, track)
            elif ctx.elapsed() >= track.planned.start_at:
                _start(ctx, track)
            continue
        if track.stuck:
            continue
        status = track.status
        if track.planned.workflow.startswith("timer") and not track.early_decided:
            _early_event(ctx, track)
        if track.planned.upgrade and lineage.mend(
            ctx, track, functools.partial(_command, ctx, track)
        ):
            pass  # its code changes and it is upgraded before anything answers it
        elif status == "waiting" and (track.view or {}).get("wait"):
            _durable(ctx, track)
        elif status == "waiting":
            _answer(ctx, track)
        elif status == "ambiguous":
            _resolve_all(ctx, track)
        elif status == "paused":
            _parked(ctx, track)
        elif (
            status in TERMINAL
            and not track.effects_checked_after_end
            # A cancelled run may leave effects ambiguous for the operator.
            and _resolve_all(ctx, track, resume=False)
        ):
            track.effects_checked_after_end = True
        if track.planned.workflow in COMPOSITION and status not in TERMINAL:
            _below(ctx, track)
        send = functools.partial(_command, ctx, track)
        messaging.tend(ctx, track, send, max_resumes=MAX_RESUMES)
        retrying.refuse_completed(ctx, track)
        _stuck(ctx, track, stuck_seconds)


def _below(ctx: SeedContext, track: RunTrack) -> None:
    """A parent's children that a fault parked (a runner crashed too often, an effect left
    ambiguous, ...): a person resolves their effects from the witnesses and resumes them, as
    the parent's `run show` says (its `needsPerson`); a pause of the parent's tree is
    resumed with the parent, and a stopped server resumes its runs."""
    for below in (track.view or {}).get("needsPerson") or []:
        reason = below.get("parkReason")
        child = str(below.get("runId"))
        status = below.get("status")
        if status not in ("paused", "ambiguous") or reason in ("userPaused", "serverStopped"):
            continue
        if track.child_resumes.get(child, 0) >= MAX_RESUMES:
            continue
        if status == "ambiguous" and not _resolve_effects_of(ctx, track, child, terminal=False):
            continue
        track.child_resumes[child] = track.child_resumes.get(child, 0) + 1
        track.parks.append(f"child {child} {reason}: {below.get('parkDetail')}")
        _command(ctx, track, "resume", target=child)


def runs_below(track: RunTrack) -> list[str]:
    """The child runs the track's view lists in its joins (a tree of the campaign has at
    most a handful, so the view lists them all)."""
    found: list[str] = []
    for join in (track.view or {}).get("joins") or []:
        for child in join.get("children") or []:
            if child.get("runId"):
                found.append(str(child["runId"]))
    return found


def _command(
    ctx: SeedContext, track: RunTrack, what: str, *args: Any, target: str | None = None
) -> Answer:
    """Send one logical command by the CLI or the client (a seeded choice per command), to
    the track's run or to `target` (a run below it)."""
    assert track.run_id is not None or (what == "fork" and target is not None)
    number = track.commands
    track.commands += 1
    key = f"campaign-{ctx.seed}-{track.planned.index}-{what}-{number}"
    via_cli = rng_for(ctx.seed, "surface", track.planned.index, number).random() < 0.5
    run_id = target or track.run_id  # a fork's command names its source as `target`
    assert run_id is not None
    surfaces = ctx.surfaces
    if what == "resume":
        answer = (
            surfaces.cli_command("run", "resume", run_id, "--idempotency-key", key)
            if via_cli
            else surfaces.call("resume", run_id, idempotency_key=key)
        )
    elif what == "pause":
        answer = (
            surfaces.cli_command("run", "pause", run_id, "--idempotency-key", key)
            if via_cli
            else surfaces.call("pause", run_id, idempotency_key=key)
        )
    elif what == "cancel":
        answer = (
            surfaces.cli_command("run", "cancel", run_id, "--idempotency-key", key)
            if via_cli
            else surfaces.call("cancel", run_id, "campaign", idempotency_key=key)
        )
    elif what == "checkpoint":
        (value,) = args
        answer = (
            surfaces.cli_command(
                "checkpoint",
                "answer",
                run_id,
                "--value",
                json.dumps(value),
                "--idempotency-key",
                key,
            )
            if via_cli
            else surfaces.call("answer_checkpoint", run_id, value, idempotency_key=key)
        )
    elif what == "decision":
        (choice,) = args
        answer = (
            surfaces.cli_command(
                "decision", "answer", run_id, "--choice", choice, "--idempotency-key", key
            )
            if via_cli
            else surfaces.call("answer_decision", run_id, choice, idempotency_key=key)
        )
    elif what == "submit":
        request_id, output = args
        answer = (
            surfaces.cli_command(
                "interaction",
                "submit",
                run_id,
                "--request-id",
                request_id,
                "--output",
                json.dumps(output),
                "--idempotency-key",
                key,
            )
            if via_cli
            else surfaces.call("submit", request_id, output, run_id=run_id, idempotency_key=key)
        )
    elif what == "signal":
        data, event_key = args
        answer = (
            surfaces.cli_command(
                "run",
                "signal",
                run_id,
                "go",
                "--data",
                json.dumps(data),
                "--idempotency-key",
                event_key,
            )
            if via_cli
            else surfaces.call("signal", run_id, "go", data, idempotency_key=event_key)
        )
    elif what in ("fork", "upgrade"):
        answer = lineage.command(surfaces, what, run_id, key, via_cli, *args)
    elif what == "resolve":
        effect_id, resolution, result, reason = args
        if via_cli:
            flags = [f"--{resolution}"]
            if result is not None:
                flags += ["--result", json.dumps(result)]
            if reason is not None:
                flags += ["--reason", reason]
            answer = surfaces.cli_command(
                "effect", "resolve", effect_id, *flags, "--idempotency-key", key
            )
        else:
            answer = surfaces.call(
                "resolve_effect",
                effect_id,
                resolution,
                result=result,
                reason=reason,
                idempotency_key=key,
            )
    else:  # pragma: no cover - a typo in this module
        raise ValueError(what)
    ctx.note(
        f"{what} {run_id} via {'cli' if via_cli else 'client'}: {answer.status} "
        f"{answer.message[:160]}"
    )
    if answer.status == "lost":
        ctx.violation("commandLost", f"{what} of {run_id} got no answer: {answer.message}", run_id)
    return answer


def _start(ctx: SeedContext, track: RunTrack) -> None:
    planned = track.planned
    run_input = messaging.start_input(ctx, planned)  # a `relay` run names its receiver
    if run_input is None:
        return  # its receiver has not started yet
    if planned.via_cli:
        where: list[str] = []
        if planned.session is not None:
            where = ["--session", planned.session]
        elif planned.mode is Mode.DETACHED:
            where = ["--detached"]
        answer = ctx.surfaces.cli_command(
            "run",
            "start",
            planned.workflow,
            "--input",
            json.dumps(run_input),
            "--project",
            str(ctx.project),
            *where,
            "--idempotency-key",
            planned.key,
        )
    else:
        answer = ctx.surfaces.call(
            "start_run",
            planned.workflow,
            run_input,
            ctx.project,
            idempotency_key=planned.key,
            origin_session=planned.session,
            detached=planned.mode is Mode.DETACHED,
        )
    if not answer.ok:
        ctx.violation(
            "startFailed", f"run start of {planned.workflow} ({planned.key}): {answer.message}"
        )
        return
    track.run_id = str(answer.body["runId"])
    track.start_answers.append(track.run_id)
    track.changed_at = time.monotonic()
    ctx.note(
        f"started {planned.workflow} #{planned.index} = {track.run_id} ({planned.mode}"
        f"{' ' + planned.session if planned.session else ''}, tries {answer.tries}, "
        f"killed {answer.killed})"
    )
    _queue_follow_ups(ctx, track)
    _change_settings(ctx, track)


SETTINGS_CHANCE: Final = 0.5
"""How often a `chain` run has its live settings changed as it starts, drawn from a stream
of their own (`settings`); the oracle checks its `done` node saw the change it recorded."""


def _change_settings(ctx: SeedContext, track: RunTrack) -> None:
    """Change a `chain` run's `boost` once or twice (the second with `expect_change`, which
    the first change may have moved: a `settingsConflict` is then the documented answer)."""
    planned = track.planned
    rng = rng_for(ctx.seed, "settings", planned.index)
    if planned.workflow != "chain" or track.run_id is None or rng.random() >= SETTINGS_CHANCE:
        return
    for number in range(1, rng.randint(1, 2) + 1):
        patch = [{"op": "replace", "path": "/boost", "value": rng.randint(1, 9)}]
        answer = ctx.surfaces.call(
            "change_settings",
            track.run_id,
            patch,
            expect_change=number - 1,
            idempotency_key=f"{planned.key}-settings-{number}",
        )
        ctx.note(f"settings {number} of {track.run_id}: {answer.status} {answer.message[:120]}")
        if not answer.ok and answer.code != "settingsConflict":
            ctx.violation(
                "settingsRefused", f"settings of {track.run_id}: {answer.message}", track.run_id
            )


FOLLOW_UP_CHANCE: Final = 0.5
"""How often a run of a session gets follow-up prompts, drawn from a stream of their own
(`followUp`), so adding them left every other decision of a seed as it was."""


def _queue_follow_ups(ctx: SeedContext, track: RunTrack) -> None:
    """Queue one or two follow-ups on a run with an origin session (the oracle checks they
    reach it after its result, in order, once, or are cancelled when it does not complete).
    A run that ended already refuses them: that is its documented answer, not a fault."""
    planned = track.planned
    rng = rng_for(ctx.seed, "followUp", planned.index)
    if planned.session is None or track.run_id is None or rng.random() >= FOLLOW_UP_CHANCE:
        return
    for number in range(1, rng.randint(1, 2) + 1):
        answer = ctx.surfaces.call(
            "follow_up",
            track.run_id,
            f"campaign follow-up {number} of run #{planned.index}",
            idempotency_key=f"{planned.key}-follow-up-{number}",
        )
        ctx.note(f"follow-up {number} of {track.run_id}: {answer.status} {answer.message[:120]}")
        if not answer.ok and "has ended" not in answer.message:
            ctx.violation(
                "followUpRefused", f"follow-up of {track.run_id}: {answer.message}", track.run_id
            )


def _answer(ctx: SeedContext, track: RunTrack) -> None:
    view = track.view or {}
    waiting = view.get("waitingOn") or {}
    request_id = str(waiting.get("requestId"))
    if not request_id or request_id in track.answered:
        return
    kind = waiting.get("kind")
    first_seen = track.waiting_since.setdefault(request_id, time.monotonic())
    if kind == "checkpoint":
        answer = _command(ctx, track, "checkpoint", lineage.checkpoint_answer(track))
    elif kind == "decision":
        seat = ctx.telegram
        if seat is not None and seat.addresses(track) and seat.leaves_to_chat(ctx, track):
            # Left to the Telegram chat, or raced with it (campaign/telegram.py).
            chosen = seat.operator_choice(ctx, track, first_seen)
            if chosen is None:
                return
            choice = chosen
        else:
            rng = rng_for(ctx.seed, "decision", track.planned.index)
            delay = rng.uniform(0.0, 5.0)
            choice = "ship" if rng.random() < 0.65 else "hold"
            if time.monotonic() - first_seen < delay:
                return
        answer = _command(ctx, track, "decision", choice)
        if answer.ok:
            track.decision = choice
        else:
            track.decision_refused = True
    elif kind == "agent" and track.planned.mode is Mode.DETACHED:
        return  # its headless agent submits (the stuck detector watches it)
    elif kind == "agent":
        if not _submit(ctx, track, request_id, first_seen):
            return
        answer = Answer("ok") if track.submitted_valid else Answer("refused")
    else:
        ctx.violation("unexpectedWait", f"the run waits on a {kind!r}", track.run_id)
        track.answered[request_id] = "refused"
        return
    track.answered[request_id] = "ok" if answer.ok else "refused"


def schedule(ctx: SeedContext) -> None:
    """Add the seed's schedule when its time comes, delete it later (each one logical
    command with one key, by the CLI or the client), and follow the runs it starts."""
    planned = ctx.plan.schedule
    track = ctx.schedule
    if planned is None:
        return
    now = ctx.elapsed()
    key = f"campaign-{ctx.seed}-schedule"
    if not track.added and now >= planned.add_at:
        if planned.via_cli:
            answer = ctx.surfaces.cli_command(
                "schedule", "add", planned.name, "chain", "--every", f"{planned.every}s",
                "--input", json.dumps(planned.input), "--overlap", planned.overlap,
                "--catchup", planned.catchup, "--project", str(ctx.project),
                "--idempotency-key", f"{key}-add",
            )  # fmt: skip
        else:
            answer = ctx.surfaces.call(
                "add_schedule", planned.name, "chain", every=f"{planned.every}s",
                input=planned.input, overlap=planned.overlap, catchup=planned.catchup,
                project=ctx.project, idempotency_key=f"{key}-add",
            )  # fmt: skip
        ctx.note(f"schedule add {planned.name}: {answer.status} {answer.message[:160]}")
        if not answer.ok:
            ctx.violation("scheduleFailed", f"schedule add was {answer.status}: {answer.message}")
            track.added = track.deleted = True  # nothing more to do with it
            return
        track.added = True
        track.added_at_ms = round(time.time() * 1000)
        track.schedule_id = str((answer.body.get("schedule") or {}).get("scheduleId"))
    elif track.added and not track.deleted and now >= planned.delete_at:
        track.deleted_at_ms = round(time.time() * 1000)
        if planned.via_cli:
            answer = ctx.surfaces.cli_command(
                "schedule", "delete", planned.name, "--idempotency-key", f"{key}-delete"
            )
        else:
            answer = ctx.surfaces.call(
                "delete_schedule", planned.name, idempotency_key=f"{key}-delete"
            )
        ctx.note(f"schedule delete {planned.name}: {answer.status} {answer.message[:160]}")
        if not answer.ok:
            ctx.violation(
                "scheduleFailed", f"schedule delete was {answer.status}: {answer.message}"
            )
        track.deleted = True
        track.refresh_at = 0.0
    if track.added and not track.quiet and time.monotonic() >= track.refresh_at:
        track.refresh_at = time.monotonic() + SCHEDULE_REFRESH_SECONDS
        code, out, _ = ctx.surfaces.cli(
            "run", "list", "--schedule", planned.name, "--json", "--limit", "1000"
        )
        if code == 0 and isinstance(out, dict):
            for summary in out.get("runs", []):
                track.runs[str(summary.get("runId"))] = summary
            track.listed_after_delete = track.deleted
    for run_id, summary in track.runs.items():
        _resume_scheduled(ctx, track, run_id, summary)


def _resume_scheduled(
    ctx: SeedContext, track: ScheduleTrack, run_id: str, summary: dict[str, Any]
) -> None:
    """A paused run of the schedule (any park but a person's pause or a server stop, e.g.
    a runner killed before it committed anything) is resumed as a person would, at most
    `MAX_RESUMES` times; whether a fault explains the park is the oracle's question, as
    for every other run."""
    if summary.get("status") != "paused" or summary.get("parkReason") in (
        "userPaused",
        "serverStopped",  # the next server start resumes it by itself
    ):
        return
    done = track.resumes.get(run_id, 0)
    if done >= MAX_RESUMES:
        return
    track.resumes[run_id] = done + 1
    key = f"campaign-{ctx.seed}-scheduled-{run_id}-resume-{done}"
    answer = ctx.surfaces.call("resume", run_id, idempotency_key=key)
    ctx.note(f"resume scheduled {run_id} ({summary.get('parkReason')}): {answer.status}")
    summary["status"] = "queued"  # until the next listing says otherwise


def _event_key(ctx: SeedContext, track: RunTrack, what: str) -> str:
    return f"campaign-{ctx.seed}-{track.planned.index}-event-{what}"


def _early_event(ctx: SeedContext, track: RunTrack) -> None:
    """Once per `timer` run, sometimes: send its valid event before it waits for it (the
    event is kept, and the wait takes it without ever waiting)."""
    track.early_decided = True
    if rng_for(ctx.seed, "early", track.planned.index).random() >= 0.3:
        return
    _send_valid(ctx, track)


def _durable(ctx: SeedContext, track: RunTrack) -> None:
    """A run that waits with no runner: a sleep or a retry delay needs nothing from us; an
    event wait gets its event (after a while; sometimes a wrong one first)."""
    wait = (track.view or {}).get("wait") or {}
    if wait.get("kind") != "event" or track.event_done:
        return
    if not track.planned.workflow.startswith("timer"):
        return  # a `hark` run's events come from its `relay` run (campaign/messaging.py)
    first_seen = track.waiting_since.setdefault(str(wait.get("waitId")), time.monotonic())
    rng = rng_for(ctx.seed, "event", track.planned.index, track.event_sends)
    delay = rng.uniform(0.0, 5.0 if track.planned.workflow.endswith("-t") else 2.0)
    if time.monotonic() - first_seen < delay:
        return
    if not track.event_wrong_sent and rng.random() < 0.35:
        track.event_wrong_sent = True
        x = int(track.planned.input["x"])
        wrong = _signal(ctx, track, {"x": x + 1}, _event_key(ctx, track, "wrong"))
        if wrong.ok and wrong.body.get("status") == "consumed":
            ctx.violation("invalidAccepted", "a wrong event was consumed", track.run_id)
        message = wrong.message.removeprefix(f"{wrong.code}: ")
        if wrong.code == "validationRejected" and message != EVENT_REJECTED:
            ctx.violation(
                "rejectionMessage",
                f"a refused event came back as {wrong.message!r}, not the validation's",
                track.run_id,
            )
        return
    _send_valid(ctx, track)


def _signal(ctx: SeedContext, track: RunTrack, data: Any, event_key: str) -> Answer:
    track.event_sends += 1
    return _command(ctx, track, "signal", data, event_key)


def _send_valid(ctx: SeedContext, track: RunTrack) -> None:
    """The run's valid event, under one key; sometimes sent again, which must adopt."""
    key = _event_key(ctx, track, "valid")
    x = int(track.planned.input["x"])
    answer = _signal(ctx, track, {"x": x}, key)
    if answer.ok:
        track.event_valid_sent = track.event_done = True
        track.event_signal_id = str(answer.body.get("signalId"))
        if rng_for(ctx.seed, "dup", track.planned.index).random() < 0.3:
            again = _signal(ctx, track, {"x": x}, key)
            if again.ok and str(again.body.get("signalId")) != track.event_signal_id:
                ctx.violation(
                    "eventDuplicated",
                    f"the same event key made signals {track.event_signal_id} and"
                    f" {again.body.get('signalId')}",
                    track.run_id,
                )
        return
    if answer.code == "validationRejected":
        ctx.violation("validRejected", f"a valid event was refused: {answer.message}", track.run_id)
    track.event_done = True  # refused otherwise: the run ended (its wait timed out)


def _submit(ctx: SeedContext, track: RunTrack, request_id: str, first_seen: float) -> bool:
    """Hand in an agent step's output, sometimes a wrong one first; True once the request
    is done with (accepted, or closed by its deadline), False to come back next tick."""
    x = int(track.planned.input["x"])
    rng = rng_for(ctx.seed, "agent", track.planned.index, len(track.answered))
    delay = rng.uniform(0.0, 6.0 if track.planned.workflow.endswith("-t") else 2.0)
    if time.monotonic() - first_seen < delay:
        return False
    if request_id not in track.wrong_sent and rng.random() < 0.4:
        track.wrong_sent.add(request_id)
        wrong = _command(ctx, track, "submit", request_id, {"score": 2 * x + 1})
        if wrong.ok:
            ctx.violation(
                "invalidAccepted", f"a wrong output of request {request_id} was accepted",
                track.run_id,
            )  # fmt: skip
            return True
        # The CLI's JSON error reads "code: message"; the client's is the message alone.
        message = wrong.message.removeprefix(f"{wrong.code}: ")
        if (
            wrong.code == "validationRejected"
            and message not in ("score must be twice the item", DEADLINE_PASSED)
            and not message.startswith("validation did not finish")
        ):
            ctx.violation(
                "rejectionMessage",
                f"a rejected output came back as {wrong.message!r}, not the validation's",
                track.run_id,
            )
        return False  # the valid output follows next tick (or the request closed meanwhile)
    answer = _command(ctx, track, "submit", request_id, {"score": 2 * x})
    if answer.ok:
        track.submitted_valid = True
        return True
    message = answer.message.removeprefix(f"{answer.code}: ")
    if answer.code == "validationRejected":
        if message.startswith("validation did not finish"):
            return False  # a fault killed the validating runner: submit again
        if message != DEADLINE_PASSED:
            ctx.violation("validRejected", f"a valid output was rejected: {message}", track.run_id)
    return True  # refused: the request closed (its deadline passed, or the run ended)


def _resolve_all(ctx: SeedContext, track: RunTrack, *, resume: bool = True) -> bool:
    """Resolve every ambiguous effect of the run (and, once it ended, of the runs below it:
    a cancelled tree may leave its children's effects ambiguous); then resume it. True when
    none is left."""
    assert track.run_id is not None
    below = [] if resume else runs_below(track)
    for run_id in (track.run_id, *below):
        if not _resolve_effects_of(ctx, track, run_id, terminal=not resume):
            return False
    if resume and track.status == "ambiguous":
        _resume(ctx, track)
    return True


def _resolve_effects_of(ctx: SeedContext, track: RunTrack, run_id: str, *, terminal: bool) -> bool:
    """Resolve every ambiguous effect of `run_id` (the track's run or one below it). Not
    done while a run that ended still has an effect applying (its runner is being stopped:
    the effect settles when it is gone)."""
    effects = ctx.surfaces.read("list_effects", run_id)
    if effects is None:
        return False
    if terminal and any(e.get("status") == "applying" for e in effects):
        return False
    for effect in [e for e in effects if e.get("status") == "ambiguous"]:
        if not _resolve(ctx, track, effect, terminal=terminal):
            return False
    return True


def _resolve(ctx: SeedContext, track: RunTrack, effect: dict[str, Any], *, terminal: bool) -> bool:
    key = str(effect["effectKey"])
    holders = ctx.witnesses.lock_holders(key)
    if holders:
        ctx.violation(
            "bodyAliveWhileAmbiguous",
            f"effect {key} ({effect.get('nodeId')}) is ambiguous while pid(s) {holders} still "
            "run its body",
            track.run_id,
        )
        return False
    ctx.witnesses.refresh()
    bodies = ctx.witnesses.for_key(key)
    applied = [b for b in bodies if b.applied]
    # The outside system's record is the truth: the key's marker file for an idempotent
    # effect, the `applied` witness line for a manual one.
    if effect.get("kind") == "idempotent":
        applied_result = _idempotent_marker(ctx, key)
    else:
        applied_result = applied[0].result if applied else None
    shell = effect.get("nodeId") in SHELL_NODES
    result: Any = None
    reason = None
    if applied_result is not None:
        decision = "applied"
        result = (
            {"exitCode": 0, "stdout": json.dumps(applied_result) + "\n", "stderr": ""}
            if shell
            else applied_result
        )
    else:
        retries = sum(1 for r in track.resolutions if r.key == key and r.decision == "retry")
        rng = rng_for(ctx.seed, "resolve", track.planned.index, key[-8:], len(track.resolutions))
        if not terminal and retries < MAX_RETRIES_PER_KEY and rng.random() < 0.3:
            decision = "retry"
        else:
            decision = "rejected"
            reason = "the witness shows it was not applied"
    record = Resolution(
        str(effect["effectId"]), key, decision, {b.nonce: b.applied for b in bodies}
    )
    answer = _command(ctx, track, "resolve", record.effect_id, decision, result, reason)
    record.accepted = answer.ok
    track.resolutions.append(record)
    return answer.ok


def _idempotent_marker(ctx: SeedContext, key: str) -> Any:
    path = ctx.witness_dir / "applied" / key
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _resume(ctx: SeedContext, track: RunTrack) -> None:
    track.resumes += 1
    _command(ctx, track, "resume")


def _parked(ctx: SeedContext, track: RunTrack) -> None:
    view = track.view or {}
    reason = view.get("parkReason")
    if reason == "serverStopped":
        return  # the next server start resumes it; the stuck detector watches it
    if reason == "userPaused" and track.resume_at is not None:
        if time.monotonic() >= track.resume_at:
            track.resume_at = None
            _resume(ctx, track)
        return
    if track.resumes >= MAX_RESUMES:
        return
    track.parks.append(f"{reason}: {view.get('parkDetail')}")
    _resume(ctx, track)


def _stuck(ctx: SeedContext, track: RunTrack, stuck_seconds: float) -> None:
    if track.settled or track.run_id is None:
        return
    if track.status == "paused" and track.resumes >= MAX_RESUMES:
        return  # given up on: reported as parked by the oracle
    if track.status == "waiting" and track.gave_up_below:
        return  # waits on a run below that was given up on: reported by the oracle
    if track.resume_at is not None:
        return
    idle = time.monotonic() - track.changed_at
    if idle > stuck_seconds:
        track.stuck = True
        path = dump_run(ctx, track.run_id, f"no progress for {idle:.0f} s")
        found = ctx.violation(
            "stuck",
            f"{track.planned.workflow} run made no progress for {idle:.0f} s "
            f"(status {track.status}, node {(track.view or {}).get('currentNode')})",
            track.run_id,
        )
        found.dump = path


def pause(ctx: SeedContext, track: RunTrack, hold: float) -> bool:
    """A `pauseRun` fault: pause a running run and resume it after `hold` seconds."""
    answer = _command(ctx, track, "pause")
    if answer.ok:
        track.resume_at = time.monotonic() + hold
    return answer.ok


def cancel(ctx: SeedContext, track: RunTrack) -> bool:
    """A `cancelRun` fault."""
    answer = _command(ctx, track, "cancel")
    track.cancel_sent = track.cancel_sent or answer.ok
    return answer.ok
