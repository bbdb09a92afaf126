"""The server's OpenTelemetry exporter: a task that turns committed events into spans and
metrics and sends them to the collector (docs/observability.md).

Runs in the server process, imported only when export is on (``otel.settings``); it
imports the SDK (``otel.sdk``). Each pass runs in a daemon worker thread on its own reader
connection: read the events after the durable cursor in one snapshot, build spans and
metric points from the committed rows (``trace_builder``), export the spans. Then, back on
the event loop, the cursor is saved in its own short transaction (never inside another
write, never on a run's path) and the points are counted. So the server's hot path only
ever pays for one small cursor commit per batch.

Delivery: a span is built only from what committed, and sent at least once: a failed export
keeps the cursor, and the same batch, with the same deterministic ids, is sent again after
a backoff (events are kept until their run is pruned). A crash between an accepted export
and its cursor commit sends that one batch again; nothing else is ever sent twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from typing import TypeVar

from pi_workflows.otel.records import Batch
from pi_workflows.otel.sdk import Exporter
from pi_workflows.otel.settings import Settings
from pi_workflows.server.trace_builder import Builder
from pi_workflows.store import telemetry
from pi_workflows.store.database import Database
from pi_workflows.store.errors import StoreError

log = logging.getLogger(__name__)

CURSOR = "otlp"
"""The name of the exporter's row in ``telemetry_cursors``."""
MAX_BACKOFF_SECONDS = 60.0
STOP_SECONDS = 3.0
"""How long a stopping server gives the last pass and the meters' flush."""

_T = TypeVar("_T")


async def in_thread(work: Callable[[], _T], name: str) -> _T:
    """Run ``work`` in a new daemon thread and await its result. A daemon thread, unlike
    the loop's executor, never holds the process's exit when a collector does not answer."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[_T] = loop.create_future()

    def settle(value: _T | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)  # type: ignore[arg-type]

    def target() -> None:
        try:
            value = work()
        except BaseException as exc:  # reported to the awaiting task
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle, None, exc)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, value, None)

    threading.Thread(target=target, name=name, daemon=True).start()
    return await done


class TelemetryExporter:
    """Reads committed events after its cursor and exports them, until stopped."""

    def __init__(self, db: Database, settings: Settings, version: str) -> None:
        self.db = db
        self.settings = settings
        self.sdk = Exporter(settings, version)
        self.cursor = 0
        self._reader: sqlite3.Connection | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self.exported_spans = 0

    def begin(self) -> None:
        """On the loop at start-up: the cursor, or (first time) the newest event: export
        starts with what happens from now on, not with the whole history."""
        found = telemetry.read_cursor(self.db.conn, CURSOR)
        if found is None:
            found = telemetry.last_event_id(self.db.conn)
            telemetry.save_cursor(self.db, CURSOR, found)
        self.cursor = found
        self._reader = self.db.reader()
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "the per-signal endpoints")
        signals = [name for name, on in (("traces", self.settings.traces),
                                         ("metrics", self.settings.metrics)) if on]  # fmt: skip
        log.info("exporting OpenTelemetry %s to %s", " and ".join(signals), endpoint)

    def _collect(self, after: int) -> tuple[Batch, int, bool]:
        """In the worker thread: one snapshot's batch, how many events it read, and whether
        the collector took its spans."""
        conn = self._reader
        assert conn is not None
        conn.execute("BEGIN")
        try:
            events = telemetry.events_after(conn, after, self.settings.batch)
            last = events[-1].event_id if events else after
            batch = Builder(conn, payloads=self.settings.payloads).build(events, last)
        finally:
            conn.execute("COMMIT")
        return batch, len(events), self.sdk.export(batch.spans)

    async def one_pass(self) -> bool:
        """Export one batch; True when it was full (more events are likely waiting)."""
        batch, read, taken = await in_thread(lambda: self._collect(self.cursor), "otel export")
        if not taken:
            raise ExportRefused(len(batch.spans))
        if batch.last_event_id > self.cursor:
            telemetry.save_cursor(self.db, CURSOR, batch.last_event_id)
        self.cursor = batch.last_event_id
        self.exported_spans += len(batch.spans)
        self.sdk.record(batch)
        if self._failing:
            log.info("OpenTelemetry export works again")
            self._failing = False
        return read >= self.settings.batch

    def start(self) -> None:
        """Start the passes in a task of the running loop."""
        self._task = asyncio.create_task(self.run(), name="telemetry")

    async def run(self) -> None:
        """Pass after pass, every ``OTEL_BSP_SCHEDULE_DELAY`` (at once while behind), with a
        doubling backoff while the collector refuses; ends when ``stop`` is called."""
        delay = self.settings.delay_ms / 1000
        backoff: float | None = None
        while not self._stop.is_set():
            wait = backoff if backoff is not None else delay
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._stop.wait()
            if self._stop.is_set():
                return
            try:
                behind = await self.one_pass()
                backoff = 0.0 if behind else None  # behind: the next batch at once
            except (ExportRefused, sqlite3.Error, StoreError, OSError) as exc:
                backoff = min(MAX_BACKOFF_SECONDS, max(delay, (backoff or delay) * 2))
                if not self._failing:
                    log.warning(
                        "OpenTelemetry export failed (%s); retrying every %.0f s at most,"
                        " nothing is lost while the events are kept", exc, MAX_BACKOFF_SECONDS,
                    )  # fmt: skip
                self._failing = True
            except Exception:
                log.exception("OpenTelemetry export pass failed")
                backoff = MAX_BACKOFF_SECONDS

    async def stop(self) -> None:
        """Let a pass in flight end, make a last pass (what the shutdown committed), flush
        the meters; each step bounded. A pass still in flight after the bound is left to
        die with the process, and no last pass follows it (it could send its batch twice)."""
        self._stop.set()
        finished = True
        if self._task is not None:
            done, _ = await asyncio.wait({self._task}, timeout=STOP_SECONDS)
            finished = bool(done)
        if finished:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(STOP_SECONDS):
                    await self.one_pass()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(STOP_SECONDS):
                await in_thread(self.sdk.shutdown, "otel shutdown")
        if self._reader is not None:
            with contextlib.suppress(sqlite3.Error):
                self._reader.close()


class ExportRefused(Exception):  # noqa: N818 - a refusal, retried; not a program error
    """The collector did not take a batch of spans (down, or it answered an error)."""

    def __init__(self, spans: int) -> None:
        super().__init__(f"the collector did not take {spans} span(s)")
        self.spans = spans
