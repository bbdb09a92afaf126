"""Client methods for durable schedules, blocking (`ScheduleMethods`, mixed into `Client`)
and asyncio (`AsyncScheduleMethods`, mixed into `AsyncClient`) side by side.

A schedule is server state: the server starts a run of its workflow at each fire time, but
only while a server runs (no operating-system service is installed; any client starts the
server on demand, and a server with an active schedule never exits idle). Every method is a
program of `operations`, so both flavours send the same requests and return the same shapes;
the workflow path and the project are resolved from the caller's directory as for `start`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pi_workflows.client import operations as ops
from pi_workflows.client.payloads import environment_fields
from pi_workflows.client.projects import resolve_project, workflow_spec

if TYPE_CHECKING:
    from pi_workflows.client.operations import JsonObject, Program, Receipt, T

__all__ = ["AsyncScheduleMethods", "ScheduleMethods", "schedule_payload"]


def _every(every: str | dt.timedelta) -> str:
    """A `timedelta` in the server's duration grammar (whole seconds), a string as it is."""
    if isinstance(every, dt.timedelta):
        return f"{int(every.total_seconds())}s"
    return every


def schedule_payload(
    name: str,
    workflow: str,
    every: str | dt.timedelta | None,
    cron: str | None,
    run_input: Any,
    timezone: str | None,
    overlap: str,
    catchup: str,
    project: Path | str | None,
    env: Mapping[str, str] | None = None,
) -> JsonObject:
    """The `schedule.add` payload (the server checks every field), with the environment
    every run of the schedule gets (`payloads.environment_fields`)."""
    payload: JsonObject = {
        "name": name,
        "workflow": workflow_spec(workflow),
        "input": {} if run_input is None else run_input,
        "overlap": overlap,
        "catchup": catchup,
        **environment_fields(env),
    }
    if every is not None:
        payload["every"] = _every(every)
    if cron is not None:
        payload["cron"] = cron
    if timezone is not None:
        payload["timezone"] = timezone
    found = resolve_project(project)
    if found is not None:
        payload["projectDir"] = str(found)
    return payload


def _list(include_deleted: bool) -> Program[list[JsonObject]]:
    payload = {"includeDeleted": True} if include_deleted else {}
    return list((yield from ops.call("schedule.list", payload)).body.get("schedules", []))


def _named(operation: str, name: str, key: str | None) -> Program[Receipt]:
    return (yield from ops.call(operation, {"name": name}, None, key))


def _ms(moment: dt.datetime | int) -> int:
    """Epoch milliseconds of an aware `datetime` (a naive one is this machine's local
    time), or the integer as it is."""
    if isinstance(moment, dt.datetime):
        return int(moment.timestamp() * 1000)
    return int(moment)


def _trigger(name: str, key: str | None, idempotency_key: str | None) -> Program[Receipt]:
    payload: JsonObject = {"name": name} if key is None else {"name": name, "key": key}
    return (yield from ops.call("schedule.trigger", payload, None, idempotency_key))


def _backfill(
    name: str, start: dt.datetime | int, end: dt.datetime | int, idempotency_key: str | None
) -> Program[Receipt]:
    payload: JsonObject = {"name": name, "from": _ms(start), "to": _ms(end)}
    return (yield from ops.call("schedule.backfill", payload, None, idempotency_key))


class ScheduleMethods:
    """`schedule.*` operations; needs `_run`."""

    if TYPE_CHECKING:

        def _run(self, program: Program[T]) -> T: ...

    def add_schedule(
        self,
        name: str,
        workflow: str,
        *,
        every: str | dt.timedelta | None = None,
        cron: str | None = None,
        input: Any = None,
        timezone: str | None = None,
        overlap: str = "skip",
        catchup: str = "latest",
        project: Path | str | None = None,
        idempotency_key: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Receipt:
        """`schedule.add`: start `workflow` with `input` at every fire time, while a server
        runs. Exactly one of `every` (`"30s"`, `"1h30m"`, or a `timedelta`) and `cron` (five
        fields, read in `timezone`, default this machine's zone). `overlap` (`skip`, `queue`,
        `allow`) says what a fire does while the previous run is active, `catchup` (`latest`,
        `all`, `none`) what happens to fire times missed while no server ran. Every run it
        starts gets the environment recorded now, as `start_run` records one (`env` adds
        variables). The receipt holds `schedule` (the `Schedule`) and `serverPid`."""
        payload = schedule_payload(
            name, workflow, every, cron, input, timezone, overlap, catchup, project, env
        )
        return self._run(ops.call("schedule.add", payload, None, idempotency_key))

    def list_schedules(self, *, include_deleted: bool = False) -> list[JsonObject]:
        """`schedule.list`: every schedule (`Schedule`s) by name, deleted ones on request."""
        return self._run(_list(include_deleted))

    def get_schedule(self, name: str, *, fires: int = 20) -> JsonObject:
        """`schedule.get`: `{schedule, fires}`, the schedule (by name, or any id) with its
        input and its newest `fires` fires (`ScheduleFire`s, newest first)."""
        return self._run(ops.body("schedule.get", {"name": name, "fires": fires}))

    def pause_schedule(self, name: str, *, idempotency_key: str | None = None) -> Receipt:
        """`schedule.pause`: fire nothing until resumed; receipt `{schedule}`."""
        return self._run(_named("schedule.pause", name, idempotency_key))

    def resume_schedule(self, name: str, *, idempotency_key: str | None = None) -> Receipt:
        """`schedule.resume`: fire again from the next time after now (no catch-up)."""
        return self._run(_named("schedule.resume", name, idempotency_key))

    def delete_schedule(self, name: str, *, idempotency_key: str | None = None) -> Receipt:
        """`schedule.delete`: never fire again; its runs go on and keep showing it."""
        return self._run(_named("schedule.delete", name, idempotency_key))

    def trigger_schedule(
        self, name: str, *, key: str | None = None, idempotency_key: str | None = None
    ) -> Receipt:
        """`schedule.trigger`: fire the schedule now, once, by its overlap rule; receipt
        `{scheduleId, name, fire: {fireAt, outcome, runId, detail, adopted}}`. `key` is the
        schedule's own trigger key: a trigger of the schedule with the same key (from any
        client) returns that fire instead (`adopted`)."""
        return self._run(_trigger(name, key, idempotency_key))

    def backfill_schedule(
        self,
        name: str,
        start: dt.datetime | int,
        end: dt.datetime | int,
        *,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """`schedule.backfill`: one fire per fire time of the schedule in `[start, end]`
        (datetimes or epoch ms, in the past) that has no fire yet, each by the overlap rule;
        receipt `{scheduleId, name, total, fires, already}`. At most 100 fire times."""
        return self._run(_backfill(name, start, end, idempotency_key))


class AsyncScheduleMethods:
    """`ScheduleMethods` for asyncio: the same names, arguments and results, awaitable."""

    if TYPE_CHECKING:

        async def _run(self, program: Program[T]) -> T: ...

    async def add_schedule(
        self,
        name: str,
        workflow: str,
        *,
        every: str | dt.timedelta | None = None,
        cron: str | None = None,
        input: Any = None,
        timezone: str | None = None,
        overlap: str = "skip",
        catchup: str = "latest",
        project: Path | str | None = None,
        idempotency_key: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Receipt:
        """`schedule.add` (see `Client.add_schedule`)."""
        payload = schedule_payload(
            name, workflow, every, cron, input, timezone, overlap, catchup, project, env
        )
        return await self._run(ops.call("schedule.add", payload, None, idempotency_key))

    async def list_schedules(self, *, include_deleted: bool = False) -> list[JsonObject]:
        """`schedule.list` (see `Client.list_schedules`)."""
        return await self._run(_list(include_deleted))

    async def get_schedule(self, name: str, *, fires: int = 20) -> JsonObject:
        """`schedule.get` (see `Client.get_schedule`)."""
        return await self._run(ops.body("schedule.get", {"name": name, "fires": fires}))

    async def pause_schedule(self, name: str, *, idempotency_key: str | None = None) -> Receipt:
        """`schedule.pause` (see `Client.pause_schedule`)."""
        return await self._run(_named("schedule.pause", name, idempotency_key))

    async def resume_schedule(self, name: str, *, idempotency_key: str | None = None) -> Receipt:
        """`schedule.resume` (see `Client.resume_schedule`)."""
        return await self._run(_named("schedule.resume", name, idempotency_key))

    async def delete_schedule(self, name: str, *, idempotency_key: str | None = None) -> Receipt:
        """`schedule.delete` (see `Client.delete_schedule`)."""
        return await self._run(_named("schedule.delete", name, idempotency_key))

    async def trigger_schedule(
        self, name: str, *, key: str | None = None, idempotency_key: str | None = None
    ) -> Receipt:
        """`schedule.trigger` (see `Client.trigger_schedule`)."""
        return await self._run(_trigger(name, key, idempotency_key))

    async def backfill_schedule(
        self,
        name: str,
        start: dt.datetime | int,
        end: dt.datetime | int,
        *,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """`schedule.backfill` (see `Client.backfill_schedule`)."""
        return await self._run(_backfill(name, start, end, idempotency_key))
