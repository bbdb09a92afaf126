"""The schedule operations: ``schedule.add``, ``schedule.list``, ``schedule.get``,
``schedule.pause``, ``schedule.resume``, ``schedule.delete``, and a person's own fires,
``schedule.trigger`` and ``schedule.backfill`` (``store/schedule_manual.py``).

Runs in the server. Every field is checked here, before anything is stored: the name (like a
workflow name), the cadence (``--every`` grammar or a five-field cron expression), the time
zone (an IANA name; default this machine's zone, stored explicitly), the policies and the
input size; then the workflow is resolved once in a resolver child with the input, so a
workflow that does not load or an input it refuses is refused at ``add`` with the resolver's
one line, and nothing is stored. Firing is ``server/schedules.py``'s.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pi_workflows.protocol import Request
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import ResolveError
from pi_workflows.server.handlers.registry import (
    MAX_PATH_CHARS,
    bad,
    operation,
    receipted,
    stored_receipt,
    text,
)
from pi_workflows.server.handlers.runs import describe, run_environment
from pi_workflows.store import schedule_manual, schedule_times, schedules
from pi_workflows.store.errors import InvalidScheduleError, ScheduleNotFoundError
from pi_workflows.store.reservations import NewRun
from pi_workflows.store.schedules import (
    Catchup,
    Overlap,
    ScheduleAction,
    ScheduleDraft,
    ScheduleStatus,
)

MAX_MS = 253_402_300_799_999
"""The last millisecond of 9999-12-31 UTC: the latest moment a backfill window may name."""

NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
"""A schedule's name: like a workflow's, a letter then letters, digits, ``_`` or ``-``
(at most 64 characters)."""
MAX_FIRES_SHOWN = 100
"""Most fires ``schedule.get`` lists (the newest; 20 unless ``fires`` asks)."""


def _name(payload: dict[str, Any]) -> str:
    name = text(payload, "name")
    assert name is not None
    if not NAME_PATTERN.fullmatch(name):
        raise InvalidScheduleError(
            "name",
            f"schedule name {name[:64]!r} is not valid: use a letter, then letters, digits,"
            " '_' or '-' (at most 64 characters), e.g. nightly-report",
        )
    return name


def _choice(payload: dict[str, Any], field: str, kind: type[Overlap] | type[Catchup]) -> Any:
    value = payload.get(field, next(iter(kind)).value)
    allowed = [member.value for member in kind]
    if value not in allowed:
        shown = repr(value)[:40]  # any JSON value, bounded
        raise InvalidScheduleError(field, f"--{field} {shown} is not one of {', '.join(allowed)}")
    return kind(value)


def _cadence(payload: dict[str, Any], timezone: str, now: int) -> tuple[int | None, str | None]:
    every, cron = payload.get("every"), payload.get("cron")
    if (every is None) == (cron is None):
        raise bad("give exactly one of 'every' (a duration such as 5m) and 'cron' (an expression)")
    if every is not None:
        if not isinstance(every, str):
            raise bad("payload field 'every' must be a duration string such as 30s, 5m or 1h30m")
        return schedule_times.parse_every(every), None
    if not isinstance(cron, str):
        raise bad("payload field 'cron' must be a cron expression string such as '0 9 * * 1-5'")
    return None, schedule_times.check_cron(cron, timezone, now)


def _project(payload: dict[str, Any]) -> str | None:
    project = text(payload, "projectDir", required=False, limit=MAX_PATH_CHARS)
    if project is not None and not Path(project).is_absolute():
        raise bad("payload field 'projectDir' must be an absolute path")
    return project


@operation("schedule.add", command=True)
async def schedule_add(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{name, workflow, every | cron, input?, timezone?, overlap?, catchup?, projectDir?,
    environment?, workingDirectory?}``: check every field, resolve the workflow once with the
    input, then store the schedule, with the environment its runs get (recorded like
    ``run.start``'s), and its receipt. The receipt is ``{schedule: Schedule, serverPid}``."""
    stored = stored_receipt(server, request)
    if stored is not None:
        return stored
    payload = request.payload
    name = _name(payload)
    spec = text(payload, "workflow", limit=MAX_PATH_CHARS)
    assert spec is not None
    timezone = text(payload, "timezone", required=False) or schedule_times.local_zone_name()
    schedule_times.zone(timezone)
    every_ms, cron = _cadence(payload, timezone, server.db.clock.now_ms())
    overlap = _choice(payload, "overlap", Overlap)
    catchup = _choice(payload, "catchup", Catchup)
    run_input = payload.get("input", {})
    schedules.check_input(run_input)
    project = _project(payload)
    recorded = run_environment(payload, project)
    new_run = await describe(server, spec, project, run_input)
    draft = ScheduleDraft(
        name=name,
        workflow_spec=spec,
        workflow_name=new_run.workflow_name,
        project_dir=project,
        input=run_input,
        every_ms=every_ms,
        cron=cron,
        timezone=timezone,
        overlap=overlap,
        catchup=catchup,
        environment=recorded,
        origin=f"client:{request.client_id}",
    )

    def change() -> tuple[str | None, dict[str, Any]]:
        row = schedules.add(server.db, draft)
        return None, {"schedule": schedules.view(server.db.conn, row), "serverPid": os.getpid()}

    return receipted(server, request, change)


@operation("schedule.list")
async def schedule_list(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{includeDeleted?}``: ``{schedules: [Schedule]}`` by name (at most 1,000)."""
    include = request.payload.get("includeDeleted", False)
    if not isinstance(include, bool):
        raise bad("payload field 'includeDeleted' must be true or false")
    with server.db.read() as conn:
        rows = schedules.listed(conn, include_deleted=include)
        return {"schedules": [schedules.view(conn, row) for row in rows]}


@operation("schedule.get")
async def schedule_get(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{name, fires?}`` (a name, or the id of any schedule, deleted too; a name that no
    schedule has now gives the newest deleted one of that name; ``fires`` 1-100, default
    20): ``{schedule: Schedule with its input, fires: [ScheduleFire]}``, newest fire
    first."""
    name = text(request.payload, "name")
    assert name is not None
    limit = request.payload.get("fires", 20)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_FIRES_SHOWN:
        raise bad(f"payload field 'fires' must be an integer from 1 to {MAX_FIRES_SHOWN}")
    with server.db.read() as conn:
        try:
            row = schedules.find(conn, name)
        except ScheduleNotFoundError:
            deleted = [schedules.read(conn, found) for found in schedules.ids_named(conn, name)]
            if not deleted:
                raise
            row = max(deleted, key=lambda found: (found.created_at, found.schedule_id))
        return {
            "schedule": schedules.view(conn, row, with_input=True),
            "fires": schedules.fires(conn, row.schedule_id, limit),
        }


async def _change(
    server: ServerContext, request: Request, action: ScheduleAction
) -> dict[str, Any]:
    name = text(request.payload, "name")
    assert name is not None
    stored = stored_receipt(server, request)
    if stored is not None:
        return stored  # done before: nothing is fired again
    as_of = server.db.clock.now_ms()  # the moment the person's change is handled
    if action is not ScheduleAction.RESUME:
        # Fire times that came before this pause or delete (a frozen or busy server had not
        # fired them yet) are fired by the catch-up rule first: they were the schedule's.
        try:
            found = schedules.find(server.db.conn, name)
        except ScheduleNotFoundError:
            found = None  # the change answers it
        if found is not None:
            await server.fire_due_schedule(found.schedule_id, as_of)

    def change() -> tuple[str | None, dict[str, Any]]:
        row = schedules.change(server.db, name, action, as_of=as_of)
        return None, {"schedule": schedules.view(server.db.conn, row)}

    return receipted(server, request, change)


@operation("schedule.pause", command=True)
async def schedule_pause(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{name}``: the schedule fires nothing until resumed (its runs go on; its queued
    fires wait). ``{schedule: Schedule}``."""
    return await _change(server, request, ScheduleAction.PAUSE)


@operation("schedule.resume", command=True)
async def schedule_resume(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{name}``: fire again from the next fire time after now (times that passed while it
    was paused are not caught up). ``{schedule: Schedule}``."""
    return await _change(server, request, ScheduleAction.RESUME)


@operation("schedule.delete", command=True)
async def schedule_delete(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{name}``: the schedule never fires again and its name is free; its runs go on and
    keep showing it; its queued fires are skipped. ``{schedule: Schedule}``."""
    return await _change(server, request, ScheduleAction.DELETE)


async def _described(server: ServerContext, name: str) -> tuple[NewRun | None, str | None]:
    """The run a person's fire of schedule ``name`` starts (its workflow as it is now, with
    its input), or the one-line reason it cannot: the fire is then recorded ``failed``."""
    with server.db.read() as conn:
        row = schedules.find(conn, name)
    if row.status is ScheduleStatus.DELETED:
        raise ScheduleNotFoundError(name)
    try:
        return await describe(server, row.workflow_spec, row.project_dir, row.input), None
    except ResolveError as exc:
        return None, f"{exc.code}: {exc}"


@operation("schedule.trigger", command=True)
async def schedule_trigger(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{name, key?}``: fire the schedule now, once, by its overlap rule (its cadence goes
    on as before). ``key`` is the schedule's own trigger key: a fire of the schedule with it
    is returned instead (``adopted``), whoever sent it. ``{scheduleId, name, fire:
    ManualFire}``."""
    stored = stored_receipt(server, request)
    if stored is not None:
        return stored
    name = text(request.payload, "name")
    assert name is not None
    key = text(request.payload, "key", required=False)
    new_run, error = await _described(server, name)

    def change() -> tuple[str | None, dict[str, Any]]:
        fire = schedule_manual.trigger(server.db, name, key=key, new_run=new_run, error=error)
        row = schedules.find(server.db.conn, name)
        body = {"scheduleId": row.schedule_id, "name": row.name, "fire": fire.to_json()}
        return fire.run_id, body

    body = receipted(server, request, change)
    if body["fire"].get("adopted"):  # the key named an earlier trigger: nothing new
        body["_adopted"] = True
    return body


def _moment(payload: dict[str, Any], field: str) -> int:
    value = payload.get(field)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_MS:
        raise bad(f"payload field {field!r} must be epoch milliseconds from 0 to {MAX_MS}")
    return value


@operation("schedule.backfill", command=True)
async def schedule_backfill(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{name, from, to}`` (epoch ms, both included): one fire per fire time of the
    schedule's cadence in the window that has no fire or run yet, oldest first, each by the
    overlap rule; at most ``MAX_BACKFILL`` fire times, all in the past and before the
    schedule's next fire time. ``{scheduleId, name, total, fires: [ManualFire], already}``
    (``already``: the fire times left alone)."""
    stored = stored_receipt(server, request)
    if stored is not None:
        return stored
    name = text(request.payload, "name")
    assert name is not None
    start, end = _moment(request.payload, "from"), _moment(request.payload, "to")
    schedule_manual.check_window(server.db, name, start, end)  # refused before describing
    new_run, error = await _described(server, name)

    def change() -> tuple[str | None, dict[str, Any]]:
        times = schedule_manual.check_window(server.db, name, start, end)
        done = schedule_manual.backfill(server.db, name, times, new_run=new_run, error=error)
        row = schedules.find(server.db.conn, name)
        return None, {
            "scheduleId": row.schedule_id,
            "name": row.name,
            "total": done.total,
            "fires": [fire.to_json() for fire in done.fires],
            "already": done.already,
        }

    return receipted(server, request, change)
