"""The server process: start-up, serving, and an orderly shutdown, in named phases.

Runs in the server process only. It never imports or executes workflow code (resolver and
runner children do that). Its event loop holds only bounded IPC, short SQLite transactions,
timers and process supervision.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections import Counter
from importlib.metadata import version
from pathlib import Path
from typing import Any

from pi_workflows.otel import settings as otel_settings
from pi_workflows.protocol import MAX_FRAME_BYTES
from pi_workflows.server import recovery
from pi_workflows.server.agents import HeadlessAgents, remove_pruned_session_dirs
from pi_workflows.server.channel_process import ChannelProcess
from pi_workflows.server.config import ServerConfig
from pi_workflows.server.connections import serve_client
from pi_workflows.server.describe_cache import DescriptionCache
from pi_workflows.server.run_views import RunViews
from pi_workflows.server.schedules import ScheduleFirer
from pi_workflows.server.session_views import SessionViews
from pi_workflows.server.supervisor import Supervisor
from pi_workflows.server.template import RunnerTemplate
from pi_workflows.server.uploads import Uploads
from pi_workflows.store import (
    deadlines,
    delivery,
    faults,
    interactions,
    receipts,
    retention,
    runners,
    takeover,
    waits,
)
from pi_workflows.store.database import Database
from pi_workflows.store.errors import StoreError
from pi_workflows.store.paths import SOCKET_NAME

log = logging.getLogger(__name__)

TICK_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 10.0
EXIT_TASK_DIED = 70  # EX_SOFTWARE: a background task of the server ended unexpectedly
RECEIPT_PRUNE_BATCH = 1000
RECEIPT_PRUNE_EVERY_MS = 3_600_000
SWEEP_MS = 200  # at most this often: request and node deadlines, expired claims
LAUNCH_WINDOW = 16  # ready runs read per free runner slot, for the fairness rule


class Backoff:
    """The scheduler's delay after failed ticks: doubling from the tick to a maximum."""

    def __init__(self) -> None:
        self.delay: float | None = None  # None: no failure since the last good tick

    def fail(self) -> float:
        """Record a failure and return the delay before the next try."""
        self.delay = min(MAX_BACKOFF_SECONDS, (self.delay or TICK_SECONDS / 2) * 2)
        return self.delay

    def reset(self) -> None:
        """A tick succeeded."""
        self.delay = None


class Server:
    """One server for one state directory (the caller holds the directory's lock)."""

    def __init__(self, db: Database, config: ServerConfig) -> None:
        self.db = db
        self.config = config
        self.version = version("pi-workflows")
        self.socket_path: Path = config.home / SOCKET_NAME
        self.epoch = 0
        self.exit_code = 0
        self._next_prune_ms = 0
        self._next_run_prune_ms = 0
        self._next_sweep_ms = 0
        self._next_wait_ms: int | None = 0  # the earliest pending wait's due time (None: none)
        self._next_present_ms: int | None = 0  # the earliest step presentation due again
        self._next_deadline_ms: int | None = 0  # the earliest run deadline (None: none)
        self.stopping = False
        self.slow_clients_dropped = 0
        self.supervisor: Supervisor
        self.template: RunnerTemplate | None = None
        self.agents: HeadlessAgents
        self.views = SessionViews(db)
        self.run_views = RunViews(db)
        self.descriptions = DescriptionCache()
        self.uploads = Uploads()
        self.schedules = ScheduleFirer(self)
        self._stop = asyncio.Event()
        self._drain_abort = asyncio.Event()  # a second stop, or SIGINT: stop without draining
        self._drain_seconds = config.drain_seconds
        self._wake = asyncio.Event()
        self._run_changed: dict[str, asyncio.Event] = {}  # set and dropped on a change
        self._clients: set[asyncio.StreamWriter] = set()
        self._client_tasks: set[asyncio.Task[Any]] = set()  # each connection's serving task
        self._no_clients = asyncio.Event()
        self._no_clients.set()
        self._idle_since = asyncio.get_running_loop().time()
        # The OpenTelemetry exporter (server/telemetry.py), only while export is on.
        self.telemetry: Any = None

    # --- signals from handlers and children ------------------------------------------------

    async def fire_due_schedule(self, schedule_id: str, as_of: int) -> None:
        """Fire what was due of a schedule at ``as_of`` (``ScheduleFirer.fire_due``)."""
        await self.schedules.fire_due(schedule_id, as_of)

    def wake(self, run_id: str | None = None, *, scheduler: bool = True) -> None:
        """Something committed: the scheduler looks at the queue now, held answers look at
        their outcome, and watched session views are recomputed.

        ``run_id`` names the one run the commit changed: only answers held on that run look
        again (a runner's reply or a run's command concerns its own run alone). Without
        it, every held answer looks. ``scheduler=False``: the commit changed nothing the
        scheduler reads (a runner's in-place proposal, ``runner_messages.in_place``), so
        it is not woken; its next tick comes as it would have.
        """
        if scheduler:
            self._wake.set()
        if run_id is None:
            woken, self._run_changed = list(self._run_changed.values()), {}
        else:
            event = self._run_changed.pop(run_id, None)
            woken = [] if event is None else [event]
        for event in woken:
            event.set()
        self.views.mark_dirty()
        self.run_views.mark_dirty()

    async def changed(self, run_id: str, seconds: float) -> None:
        """Wait until the next committed change of run ``run_id`` (or ``seconds``)."""
        event = self._run_changed.setdefault(run_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await event.wait()

    def request_stop(self, *, drain_seconds: float | None = None, immediate: bool = False) -> None:
        """Begin shutdown (from ``server.stop``, SIGTERM or SIGINT).

        Running nodes first get ``drain_seconds`` (default ``PI_WORKFLOWS_DRAIN_SECONDS``)
        to reach their next node boundary; a request while already stopping, or
        ``immediate`` (SIGINT), ends that wait at once.
        """
        if self._stop.is_set() or immediate:
            self._drain_abort.set()
        elif drain_seconds is not None:
            self._drain_seconds = drain_seconds
        self._stop.set()
        self.wake()  # held answers look now, and end with ``serverStopping``

    def _interrupted(self) -> None:
        """SIGINT: stop without draining."""
        self.request_stop(immediate=True)

    @property
    def connection_count(self) -> int:
        """Open client connections."""
        return len(self._clients)

    @property
    def drain_seconds(self) -> float:
        """How long a stop lets running nodes reach their next boundary (0 once forced)."""
        return 0.0 if self._drain_abort.is_set() else self._drain_seconds

    @property
    def stop_requested(self) -> bool:
        """Shutdown has begun: held answers end (``unavailable``, code ``serverStopping``)."""
        return self._stop.is_set()

    def connection_opened(self, writer: asyncio.StreamWriter) -> None:
        """A client connected (called from the connection's serving task)."""
        self._clients.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._client_tasks.add(task)
        self._no_clients.clear()

    def connection_closed(self, writer: asyncio.StreamWriter) -> None:
        """A client disconnected."""
        self._clients.discard(writer)
        task = asyncio.current_task()
        if task is not None:
            self._client_tasks.discard(task)
        if not self._clients:
            self._no_clients.set()
        self._idle_since = asyncio.get_running_loop().time()

    # --- phases --------------------------------------------------------------------------

    async def serve(self) -> int:
        """startup -> serve -> shutdown. Returns the process exit code."""
        await self._startup()
        server = await asyncio.start_unix_server(
            lambda r, w: serve_client(self, r, w), path=str(self.socket_path), limit=MAX_FRAME_BYTES
        )
        os.chmod(self.socket_path, 0o600)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.request_stop)
        loop.add_signal_handler(signal.SIGINT, self._interrupted)
        log.info("serving on %s (epoch %d, pid %d)", self.socket_path, self.epoch, os.getpid())
        print(f"pi-workflows server ready: epoch {self.epoch}, pid {os.getpid()}", flush=True)
        tasks = [
            asyncio.create_task(self._schedule(), name="scheduler"),
            asyncio.create_task(self._renew(), name="renewal"),
            asyncio.create_task(self.views.run(), name="session views"),
            asyncio.create_task(self.run_views.run(), name="run views"),
        ]
        for task in tasks:
            task.add_done_callback(self._task_ended)
        # The channel process (docs/channels.md): never a reason to stop the server.
        channels = asyncio.create_task(self._channels(), name="channel process")
        if self.telemetry is not None:  # never stops the server: it logs its own failures
            self.telemetry.start()
        await self._stop.wait()
        await self._shutdown(server, tasks, channels)
        return self.exit_code

    async def _channels(self) -> None:
        """Supervise the channel process; a failure of the supervision itself is logged and
        it starts again (a channel never holds up a run, nor stops the server)."""
        while True:
            try:
                await ChannelProcess(
                    self.config.home, self.epoch, self.config.kill_grace_seconds
                ).run()
            except Exception:
                log.exception("the channel process's supervision failed; starting it again")
                await asyncio.sleep(5.0)

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        """A background task must never end while the server serves: stop loudly if it does.

        Clients then see no server and start a healthy one, instead of a server that keeps
        acknowledging commands it will never run.
        """
        if self.stopping or task.cancelled():
            return
        error = task.exception()
        if error is None and task.get_name() == "scheduler" and self._stop.is_set():
            return  # the scheduler returns after asking for an idle exit
        log.critical(
            "the %s task died (%s); stopping the server (exit code %d)",
            task.get_name(),
            f"{type(error).__name__}: {error}" if error else "it returned",
            EXIT_TASK_DIED,
            exc_info=error,
        )
        self.exit_code = EXIT_TASK_DIED
        self.request_stop(immediate=True)

    async def _startup(self) -> None:
        """1. new epoch before any work; 2. recovery; 3. a fresh socket path."""
        self.epoch = runners.bump_server_epoch(self.db, os.getpid())
        self.template = RunnerTemplate() if self.config.runner_template else None
        if self.template is not None:
            self.template.start()  # imports while recovery runs; the first fork finds it warm
        self.supervisor = Supervisor(
            self.db, self.config, self.epoch, self.wake, template=self.template
        )
        self.agents = HeadlessAgents(self.db, self.config, self.epoch, on_change=self.wake)
        self.views.begin_epoch(self.epoch)
        await recovery.recover(self.db, self.epoch, self.config.kill_grace_seconds)
        self._start_telemetry()  # after recovery: its commits are the next to export
        remove_pruned_session_dirs(self.config.home, self.db)  # a prune stopped half-way
        if self.template is not None:
            await self.template.wait_ready()  # so the first resumed node forks warm
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()  # we hold the lock: any socket file here is stale
        self.wake()  # recovered work starts at the scheduler's first pass, not a tick later

    def _start_telemetry(self) -> None:
        """Start the OpenTelemetry exporter when the environment asks for export; without
        that, nothing of OpenTelemetry is imported (docs/observability.md)."""
        wanted = otel_settings.from_environment()
        if wanted.refused:
            log.warning("OpenTelemetry export is off: %s", wanted.refused)
        if not wanted.enabled:
            return
        try:
            from pi_workflows.server.telemetry import TelemetryExporter  # noqa: PLC0415 - opt-in
        except ImportError as exc:
            log.warning(
                "OpenTelemetry export is off: the OTEL_EXPORTER_OTLP_* variables are set but"
                " the otel extra is not installed (%s); install 'pi-workflows[otel]'", exc,
            )  # fmt: skip
            return
        try:
            exporter = TelemetryExporter(self.db, wanted, self.version)
            exporter.begin()
        except Exception:
            log.exception("OpenTelemetry export is off: its set-up failed")
            return
        self.telemetry = exporter

    async def _shutdown(
        self,
        server: asyncio.Server,
        tasks: list[asyncio.Task[None]],
        channels: asyncio.Task[None],
    ) -> None:
        """Shutdown, in order, each step bounded."""
        self.stopping = True
        # 1. Drain: nothing new is launched (``_tick``); each running node gets the drain
        #    time to reach its next node boundary, where its run parks (serverStopped) and
        #    its runner stops, so a routine stop leaves no effect ambiguous. Connections are
        #    still accepted but answer only server.status and server.stop (every other
        #    operation is refused serverStopping, for the next server); a second stop or
        #    SIGINT ends the wait.
        if self._drain_seconds > 0 and not self._drain_abort.is_set():
            parked = await self.supervisor.drain_all(self._drain_seconds, self._drain_abort)
            if parked:
                log.info("drained: %d run(s) parked at a node boundary", parked)
        # 2. Stop accepting connections.
        server.close()
        # 3. Stop the timers; a schedule fire in flight gets a moment to commit (one cut
        #    before its commit fires again at the next start, with the same key).
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.schedules.stop(grace_seconds=2.0)
        # 4. Park what still runs at its last durable boundary and stop every runner, then
        #    every headless agent of detached runs.
        await self.supervisor.stop_all()
        await self.agents.stop_all()
        #    And the channel process (its supervision stops it when cancelled).
        channels.cancel()
        await asyncio.gather(channels, return_exceptions=True)
        if self.template is not None:
            self.template.close()
        #    Then the OpenTelemetry exporter's last pass (those parks), bounded.
        if self.telemetry is not None:
            await self.telemetry.stop()
        # 5. Close client connections (their last responses were already written).
        for writer in list(self._clients):
            writer.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._no_clients.wait(), 2.0)
        #    A connection still serving a request by now (a resolver child that never
        #    answered) is cancelled and awaited here, so nothing is left to the loop's end.
        stuck = list(self._client_tasks)
        for task in stuck:
            task.cancel()
        await asyncio.gather(*stuck, return_exceptions=True)
        # 6. Remove the socket so clients see at once that no server runs.
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        log.info("stopped")

    # --- timers --------------------------------------------------------------------------

    async def _schedule(self) -> None:
        """Launch queued runs within capacity; enforce deadlines; exit when idle.

        A failing tick (a disk error, a lock timeout) is logged and retried after a backoff
        that doubles up to ``MAX_BACKOFF_SECONDS``; it never ends the scheduler.
        """
        backoff = Backoff()
        while True:
            faults.hit("scheduler.loop")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff.delay or self._until_next_tick()):
                    await self._wake.wait()
            self._wake.clear()
            try:
                faults.hit("scheduler.tick")
                self._tick()
                if self._idle_too_long():
                    log.info("idle for %.0f s; exiting", self.config.idle_exit_seconds)
                    self.request_stop()
                    return
            except Exception:
                log.exception("scheduler tick failed; retrying in %.1f s", backoff.fail())
            else:
                backoff.reset()

    # Durable timers: the scheduler's wait ends at the earliest due time of any of them.
    def _next_due_ms(self) -> int | None:
        """The earliest due time (store ms) a durable timer needs the scheduler at: a run's
        durable wait (a sleep, a retry delay, an event wait's timeout) or the next schedule
        fire. None: nothing is due before the next ordinary tick (or the server is stopping:
        no schedule fires then; due waits are fired by the next server)."""
        if self.stopping:
            return None
        dues = [
            d
            for d in (
                self._next_wait_ms,
                self._next_present_ms,
                self._next_deadline_ms,
                self.schedules.next_due_ms(),
            )
            if d is not None
        ]
        return min(dues) if dues else None

    def _until_next_tick(self) -> float:
        """Seconds the scheduler may wait: ``TICK_SECONDS``, or less when a timer is due (so
        a timer fires on time, not a tick late)."""
        due = self._next_due_ms()
        if due is None:
            return TICK_SECONDS
        return min(TICK_SECONDS, max(0.0, (due - self.db.clock.now_ms()) / 1000))

    def _fire_waits(self, now: int) -> None:
        """Fire the durable waits that came due (sleeps, retry delays, event timeouts) and
        note when the next one is due. Not throttled like the sweeps: a timer's lateness is
        what the scheduler adds here."""
        if self._next_wait_ms is not None and now >= self._next_wait_ms:
            fired = takeover.fire_due_waits(self.db)
            for run_id in fired:
                self.wake(run_id)
        self._next_wait_ms = waits.next_due(self.db.conn)

    def _expire_deadlines(self, now: int) -> None:
        """End the runs whose run deadline passed (``Supervisor.expire_deadlines``) and note
        when the next one passes. A deadline that passed while no server ran is enforced
        at the first tick after recovery."""
        due = self._next_deadline_ms is not None and now >= self._next_deadline_ms
        if due and self.supervisor.expire_deadlines(now):
            self.wake()
        self._next_deadline_ms = deadlines.next_due(self.db.conn)

    def _present_due(self, now: int) -> None:
        """Present again the steps due to be (a model turn that ended with a provider
        error, after its backoff: ``store/delivery.py``), and note the next due time."""
        if self._next_present_ms is not None and now >= self._next_present_ms:
            for run_id in delivery.fire_due(self.db):
                self.wake(run_id)
        self._next_present_ms = delivery.next_due(self.db.conn)

    def _tick(self) -> None:
        now = self.db.clock.now_ms()
        self._fire_waits(now)
        self._expire_deadlines(now)
        self._present_due(now)
        if now >= self._next_prune_ms:
            self._prune_receipts(now)
        if now >= self._next_run_prune_ms:
            self._prune_runs(now)
        if now >= self._next_sweep_ms:
            # Deadlines and expired claims are swept at most every SWEEP_MS, not on every
            # committed change that wakes the scheduler (several per run), and on the
            # one-second tick when nothing happens.
            self._next_sweep_ms = now + SWEEP_MS
            if recovery.expire_due_requests(self.db):
                self.wake()  # answers held on an expired request hear it now
            self.supervisor.enforce_deadlines(now)
            self.supervisor.sweep_expired()
            if self.supervisor.cancel_failing_joins():
                self.wake()
        if not self.stopping:
            self.agents.reconcile()
            self.schedules.tick(now)  # fires run in tasks; their runs launch below, next tick
        free = self.config.max_runners - self.supervisor.count
        if free <= 0 or self.stopping:
            return  # full, or draining for a stop: queued runs wait for the next server
        for run_id in self._next_to_launch(now, free):
            if self.supervisor.handle_of(run_id) is None:
                try:
                    self.supervisor.launch(run_id)
                except StoreError as exc:
                    log.warning("could not launch run %s: %s", run_id, exc)

    def _next_to_launch(self, now: int, free: int) -> list[str]:
        """The ready runs to start now, at most ``free``: the fairness rule. Each slot goes to
        the ready run of the tree (a root run and every run below it) with the fewest runners
        live, the oldest first among equals; so a fan_out of a thousand children shares
        capacity with the runs started beside it instead of holding every slot until its
        queue is empty.

        Every read is bounded: the oldest ready runs (``LAUNCH_WINDOW`` per free slot), the
        oldest ``free`` ready runs of the trees with no runner live (a scan that steps past
        the busy trees' queued children), and the oldest ``free`` ready runs of each busy
        tree (at most one tree per live runner)."""
        load = Counter(handle.root_id for handle in self.supervisor.handles.values())
        busy = sorted(load)
        tree = "COALESCE(r.root_run_id, r.run_id)"
        ready = (
            f"SELECT q.run_id, {tree}, q.available_at, q.enqueued_at FROM run_queue q"
            " JOIN runs r USING (run_id) WHERE q.status = 'ready' AND q.available_at <= ?"
        )
        order = " ORDER BY q.available_at, q.enqueued_at LIMIT ?"
        conn = self.db.conn
        found = {row[0]: row for row in conn.execute(ready + order, (now, free * LAUNCH_WINDOW))}
        if busy:
            marks = ", ".join("?" for _ in busy)
            idle = f" AND {tree} NOT IN ({marks})"
            for row in conn.execute(ready + idle + order, (now, *busy, free)):
                found[row[0]] = row
            for root in busy:
                mine = " AND (r.run_id = ? OR r.root_run_id = ?)"
                for row in conn.execute(ready + mine + order, (now, root, root, free)):
                    found[row[0]] = row
        waiting = sorted(found.values(), key=lambda row: (row[2], row[3]))
        chosen: list[str] = []
        while waiting and len(chosen) < free:
            index = min(range(len(waiting)), key=lambda i: (load[waiting[i][1]], i))
            run_id, root, _available, _enqueued = waiting.pop(index)
            chosen.append(run_id)
            load[root] += 1
        return chosen

    def _prune_receipts(self, now: int) -> None:
        """Drop receipts of ended runs past their retention, a bounded batch per tick."""
        cutoff = now - int(self.config.receipt_days * 86_400_000)
        pruned = receipts.prune(self.db, cutoff, limit=RECEIPT_PRUNE_BATCH)
        if pruned:
            log.info(
                "pruned %d command receipts older than %g days", pruned, self.config.receipt_days
            )
        # A full batch means more are due: go on next tick; else look again in an hour.
        self._next_prune_ms = now + (0 if pruned == RECEIPT_PRUNE_BATCH else RECEIPT_PRUNE_EVERY_MS)

    def _prune_runs(self, now: int) -> None:
        """Remove ended runs past ``PI_WORKFLOWS_RETENTION_DAYS``, one batch per tick, every
        ``PI_WORKFLOWS_PRUNE_INTERVAL_SECONDS`` (and the next tick again while more are due)."""
        every = int(self.config.prune_interval_seconds * 1000)
        if self.config.retention_days <= 0:
            self._next_run_prune_ms = now + every
            return
        cutoff = now - int(self.config.retention_days * 86_400_000)
        report = retention.prune(self.db, cutoff)
        if report.runs:
            log.info(
                "pruned %d runs that ended more than %g days ago (%d events, %d blobs)",
                report.runs, self.config.retention_days, report.events, report.blobs,
            )  # fmt: skip
            remove_pruned_session_dirs(self.config.home, self.db)
            self.wake()
        self._next_run_prune_ms = now + (0 if report.more else every)

    def _idle_too_long(self) -> bool:
        if (
            self.config.idle_exit_seconds <= 0
            or self._clients
            or self.supervisor.count
            or self.agents.count
            or self.schedules.in_flight
            or self.schedules.any_active()  # schedules fire only while a server runs
        ):
            self._idle_since = asyncio.get_running_loop().time()
            return False
        busy = self.db.conn.execute(
            "SELECT COUNT(*) FROM run_queue WHERE status IN ('ready', 'claimed')"
        ).fetchone()[0]
        if (
            busy
            or interactions.next_deadline(self.db.conn) is not None
            or waits.next_due(self.db.conn) is not None
            or delivery.next_due(self.db.conn) is not None
            or deadlines.next_due(self.db.conn) is not None
        ):
            self._idle_since = asyncio.get_running_loop().time()
            return False
        idle = asyncio.get_running_loop().time() - self._idle_since
        return idle >= self.config.idle_exit_seconds

    async def _renew(self) -> None:
        """The backup renewal timer (a third of the lease); correctness never depends on it."""
        while True:
            await asyncio.sleep(self.config.lease_seconds / 3)
            try:
                self.supervisor.renew_all()
            except Exception:
                log.exception("claim renewal failed")
