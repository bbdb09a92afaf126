"""Firing durable schedules: the server, never workflow code, starts a schedule's runs.

Runs in the server. ``ScheduleFirer.tick`` is called from the scheduler's tick and never
blocks it: for each active schedule whose next fire time has come it applies the catch-up
rule (``store.schedules.catch_up``, a short transaction) and then fires in a task of its
own, because a fire that starts a run first describes the workflow (the description cache,
else a resolver child). At most one fire (or queued start) is in flight per schedule and at
most ``MAX_IN_FLIGHT`` in all; the rest wait for the next tick, still due.

A fire's run, its fire row and the schedule's next fire time commit in one transaction
(``store.schedules.fire``), so a server killed anywhere in a fire fires that time again, with
the same key, or never again. A workflow that no longer resolves (file deleted, source
broken, input no longer valid) is recorded as a ``failed`` fire with its one-line error and
the schedule goes on to its next time. ``next_due_ms`` tells the scheduler's loop when to wake
for the next fire, so fires are on time to well under a second.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Final

from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import ResolveError
from pi_workflows.server.handlers.runs import describe
from pi_workflows.store import faults, schedules
from pi_workflows.store.reservations import NewRun
from pi_workflows.store.schedules import FireOutcome, FireResult, ScheduleRow

log = logging.getLogger(__name__)

MAX_IN_FLIGHT: Final = 8
"""Most fires (and queued starts) being described or committed at once."""
DUE_BATCH: Final = 64
"""Most due schedules one tick looks at (the rest stay due for the next tick)."""
FIRE_DUE_SECONDS: Final = 10.0
"""How long a pause or delete waits for the fires that were due before it."""
FAULT_SLOW_FIRE_SECONDS: Final = 1.5
"""How long the ``schedules.slow_fire`` fault point holds each fire (tests only)."""
RETRY_MS: Final = 1_000
"""How long a schedule whose fire raised unexpectedly waits before it is tried again."""


class ScheduleFirer:
    """Fires the due schedules of one server (``app.Server`` owns one)."""

    def __init__(self, server: ServerContext) -> None:
        self.server = server
        self._tasks: dict[str, asyncio.Task[None]] = {}  # schedule id -> its fire in flight
        self._retry_at: dict[str, int] = {}  # schedule id -> store ms it may be tried again
        # The first tick's time: fire times at or before it passed while no server ran.
        self._started_at: int | None = None

    @property
    def in_flight(self) -> int:
        """Fires being described or committed now."""
        return len(self._tasks)

    # --- called by the scheduler -------------------------------------------------------

    def tick(self, now: int) -> None:
        """Start a task for each due fire and each queued fire that may start now."""
        db = self.server.db
        if self._started_at is None:
            self._started_at = now
        self._retry_at = {key: at for key, at in self._retry_at.items() if at > now}
        for schedule_id, _ in schedules.due(db.conn, now, DUE_BATCH):
            if not self._may_start(schedule_id):
                continue
            try:
                fire_at = schedules.catch_up(db, schedule_id, now, down_until=self._started_at)
            except Exception:
                log.exception("schedule %s: applying the catch-up rule failed", schedule_id)
                self._retry_at[schedule_id] = now + RETRY_MS
                continue
            if fire_at is not None:
                self._spawn(schedule_id, self._fire(schedule_id, fire_at))
        for schedule_id, _ in schedules.queued_heads(db.conn, DUE_BATCH):
            if not self._may_start(schedule_id):
                continue
            fire_at = schedules.queue_ready(db.conn, schedule_id)
            if fire_at is not None:
                self._spawn(schedule_id, self._start_queued(schedule_id, fire_at))

    async def fire_due(self, schedule_id: str, as_of: int) -> None:
        """Fire what was due of ``schedule_id`` at ``as_of``, by its catch-up rule, and wait
        until it is committed (at most ``FIRE_DUE_SECONDS``): a person's pause or delete
        takes effect from the moment the server handles it, so the fire times that came
        before it, while the server was frozen or busy, are fired as the server would have
        fired them, not dropped. A fire already in flight for it is waited for first. Past
        the time limit, or on a failure (logged), the caller makes its change anyway: a fire
        still in flight is then fenced by the schedule's status, and what it left unfired
        is recorded ``missed`` by the change."""
        loop = asyncio.get_running_loop()
        until = loop.time() + FIRE_DUE_SECONDS
        while not self.server.stop_requested:
            busy = self._tasks.get(schedule_id)
            if busy is None:
                task = self._spawn(schedule_id, self._fire_due(schedule_id, as_of))
                await asyncio.wait([task], timeout=max(0.0, until - loop.time()))
                return
            await asyncio.wait([busy], timeout=max(0.0, until - loop.time()))
            if loop.time() >= until:
                return

    async def _fire_due(self, schedule_id: str, as_of: int) -> None:
        db = self.server.db
        if self._started_at is None:  # before the first tick: this server starts now
            self._started_at = db.clock.now_ms()
        for _ in range(schedules.MAX_CATCHUP + 1):  # each fire moves the next time past it
            if self.server.stop_requested:
                return
            fire_at = schedules.catch_up(db, schedule_id, as_of, down_until=self._started_at)
            if fire_at is None:
                return
            await self._fire(schedule_id, fire_at)

    def next_due_ms(self) -> int | None:
        """When the scheduler must look next for a fire (None: no schedule is due to fire
        before its next ordinary tick, or every slot is busy and a finishing fire wakes it)."""
        if len(self._tasks) >= MAX_IN_FLIGHT:
            return None
        due = schedules.next_due(self.server.db.conn, {*self._tasks, *self._retry_at})
        return min([at for at in (due, *self._retry_at.values()) if at is not None], default=None)

    def any_active(self) -> bool:
        """Whether a schedule is active: the server then never exits idle."""
        return schedules.any_active(self.server.db.conn)

    async def stop(self, grace_seconds: float) -> None:
        """Let fires in flight finish for ``grace_seconds``, then cancel the rest (a fire
        cancelled before its commit fires again at the next server's start)."""
        tasks = list(self._tasks.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_seconds)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    # --- the fires ---------------------------------------------------------------------

    def _may_start(self, schedule_id: str) -> bool:
        return (
            schedule_id not in self._tasks
            and schedule_id not in self._retry_at
            and len(self._tasks) < MAX_IN_FLIGHT
        )

    def _spawn(self, schedule_id: str, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        assert schedule_id not in self._tasks, "one fire in flight per schedule"
        task = asyncio.create_task(work, name=f"schedule-fire-{schedule_id}")
        self._tasks[schedule_id] = task

        def done(finished: asyncio.Task[None]) -> None:
            self._tasks.pop(schedule_id, None)
            if not finished.cancelled() and finished.exception() is not None:
                log.error(
                    "schedule %s: a fire failed: %s", schedule_id, finished.exception(),
                    exc_info=finished.exception(),
                )  # fmt: skip
                self._retry_at[schedule_id] = self.server.db.clock.now_ms() + RETRY_MS
            self.server.wake()  # the scheduler launches the run, and looks for the next fire

        task.add_done_callback(done)
        return task

    async def _describe(self, row: ScheduleRow) -> tuple[NewRun | None, str | None]:
        """The run a fire of ``row`` starts, or the one-line reason it cannot."""
        try:
            return await describe(self.server, row.workflow_spec, row.project_dir, row.input), None
        except ResolveError as exc:
            return None, f"{exc.code}: {exc}"

    async def _fire(self, schedule_id: str, fire_at: int) -> None:
        db = self.server.db
        if faults.flagged("schedules.slow_fire"):
            # Tests: a busy server whose fires fall behind their schedule.
            await asyncio.sleep(FAULT_SLOW_FIRE_SECONDS)
        row = schedules.read(db.conn, schedule_id)
        new_run: NewRun | None = None
        error: str | None = None
        outcome, _ = schedules.verdict(db.conn, row)
        if outcome is FireOutcome.STARTED:
            new_run, error = await self._describe(row)
        result = schedules.fire(db, schedule_id, fire_at, new_run=new_run, error=error)
        if result.needs_run:  # the previous run ended while we looked: describe, fire again
            new_run, error = await self._describe(row)
            result = schedules.fire(db, schedule_id, fire_at, new_run=new_run, error=error)
        _log(row, fire_at, result)

    async def _start_queued(self, schedule_id: str, fire_at: int) -> None:
        db = self.server.db
        row = schedules.read(db.conn, schedule_id)
        new_run, error = await self._describe(row)
        result = schedules.start_queued(db, schedule_id, fire_at, new_run=new_run, error=error)
        _log(row, fire_at, result)


def _log(row: ScheduleRow, fire_at: int, result: FireResult) -> None:
    if result.outcome is not None:
        what = result.run_id or result.detail or ""
        log.info("schedule %s, fire at %d: %s %s", row.name, fire_at, result.outcome, what)
