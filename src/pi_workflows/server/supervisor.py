"""Runner supervision: launch, talk to, renew, time out, stop and settle runner children.

Runs in the server. A runner's launch (claim + envelope) commits before the child is
spawned; the child gets a startup deadline, one explicit command, and its node deadlines;
stopping is SIGTERM to its process group, a bounded grace, then SIGKILL. When a child ends,
everything it started is stopped first, then ``settlement`` decides what happens to its run
from committed state, never from the exit alone. The launch envelope is built in
``envelope``; what is known of one runner is a ``runner_handle.RunnerHandle``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from pi_workflows.protocol import (
    RUNNER_SCHEMA,
    ErrorInfo,
    FrameTooLarge,
    Outcome,
    RunnerCommand,
    RunnerCommandKind,
    RunnerReply,
    decode_runner_message,
    encode_frame,
    read_frame,
)
from pi_workflows.protocol.errors import ProtocolError
from pi_workflows.protocol.process_start import process_start
from pi_workflows.server import children, processes, settlement
from pi_workflows.server.children import Child
from pi_workflows.server.config import ServerConfig
from pi_workflows.server.envelope import envelope_builder, environment
from pi_workflows.server.processes import Identity
from pi_workflows.server.runner_handle import Drain, RunnerHandle
from pi_workflows.server.runner_messages import RunnerIdentity, answer, in_place
from pi_workflows.server.template import RunnerTemplate
from pi_workflows.store import children as child_runs
from pi_workflows.store import (
    deadlines,
    effects,
    faults,
    interactions,
    lifecycle,
    runners,
    takeover,
    views,
)
from pi_workflows.store.claims import Claim, read_lease, renew
from pi_workflows.store.database import Database
from pi_workflows.store.errors import ClaimLostError, LeaseHeldError, StoreError
from pi_workflows.store.runs import read_run
from pi_workflows.store.states import ParkReason, RunStatus

log = logging.getLogger(__name__)

RUNNER_MODULE = "pi_workflows.runner"
# How long the ``supervisor.delay_reply_after.KIND`` fault point holds a reply (tests only).
FAULT_REPLY_DELAY_SECONDS = 3.0
# How long the ``supervisor.stall_before_launch`` fault point blocks the loop (tests only).
FAULT_STALL_SECONDS = 2.5
# After a child exited, how long a frame it sent just before may take to be read.
EXITED_READ_GRACE_SECONDS = 0.1
# The node boundaries a drain parks at: right after the runner committed one of these, no
# callback of the run is executing (the next node's attempt, if opened, has not started).
DRAIN_BOUNDARIES = frozenset({"node.start", "node.finish", "node.retry"})


class Supervisor:
    """Owns every runner child of this server and the claims held for them."""

    def __init__(
        self,
        db: Database,
        config: ServerConfig,
        server_epoch: int,
        on_change: Callable[..., None],
        template: RunnerTemplate | None = None,
    ) -> None:
        self.db = db
        self.config = config
        self.server_epoch = server_epoch
        self.on_change = on_change
        self.template: RunnerTemplate | None = template
        self.handles: dict[str, RunnerHandle] = {}
        self._escalations: set[asyncio.Task[None]] = set()
        self._recovering: set[str] = set()

    @property
    def count(self) -> int:
        """Starting and live runners (what capacity counts)."""
        return len(self.handles)

    def handle_of(self, run_id: str) -> RunnerHandle | None:
        """The live runner of ``run_id``, if this server has one."""
        return self.handles.get(run_id)

    def launch(self, run_id: str) -> RunnerHandle:
        """Claim ``run_id``, record the launch, and start its runner task."""
        launch = runners.launch(
            self.db, run_id, self.server_epoch, envelope_builder(self.config, self.server_epoch)
        )
        root = self.db.conn.execute(
            "SELECT COALESCE(root_run_id, run_id) FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        handle = RunnerHandle(
            identity=RunnerIdentity(run_id, launch.runner_epoch, launch.claim),
            command=launch.command.value,
            envelope={**launch.envelope, **environment(self.db, run_id)},
            root_id=str(root[0]) if root else run_id,
        )
        if interactions.validating_of(self.db.conn, run_id) is not None:
            handle.validating_until = self.db.clock.now_ms() + int(
                self.config.validate_seconds * 1000
            )
        self.handles[run_id] = handle
        handle.task = asyncio.create_task(self._supervise(handle), name=f"runner-{run_id}")
        return handle

    async def _supervise(self, handle: RunnerHandle) -> None:
        try:
            await self._converse(handle)
        except Exception:
            log.exception("runner %s of run %s failed", handle.identity.runner_epoch, handle.run_id)
            handle.kill_reason = handle.kill_reason or "crashed"
        finally:
            await self._finish(handle)

    async def _converse(self, handle: RunnerHandle) -> None:
        child = await children.spawn(
            RUNNER_MODULE, tail_bytes=self.config.runner_output_tail_bytes, template=self.template
        )
        handle.child = child
        if handle.kill_reason is not None:
            return  # stopped while it was being spawned: ``_finish`` stops it now
        ending = asyncio.create_task(self._end_when_exited(child), name=f"exit-{handle.run_id}")
        try:
            await self._talk(handle, child)
        finally:
            ending.cancel()

    async def _talk(self, handle: RunnerHandle, child: Child) -> None:
        """The conversation with a spawned child: launch, ready, then its messages."""
        if faults.flagged("supervisor.stall_before_launch"):
            # Crash tests: the whole server stalls (as frozen) before the runner is ready.
            time.sleep(FAULT_STALL_SECONDS)  # noqa: ASYNC251 - blocking the loop is the fault
        started = process_start(child.pid)
        if started is not None:
            runners.mark_spawned(self.db, handle.identity.runner_epoch, child.pid, started)
        await self._send(
            child,
            RunnerCommand(
                schema=RUNNER_SCHEMA, command=RunnerCommandKind.LAUNCH, payload=handle.envelope
            ),
        )
        loop = asyncio.get_running_loop()
        ready_by = loop.time() + self.config.runner_startup_seconds
        while True:
            timeout = None if handle.ready else max(0.0, ready_by - loop.time())
            try:
                async with asyncio.timeout(timeout):  # None once ready: no deadline
                    frame = await read_frame(child.reader)
            except TimeoutError:
                log.warning("runner of run %s missed its startup deadline", handle.run_id)
                handle.kill_reason = "timedOut"
                return
            except (ProtocolError, ConnectionError) as exc:
                log.warning("runner of run %s broke its channel: %s", handle.run_id, exc)
                handle.kill_reason = handle.kill_reason or "crashed"
                return
            if frame is None:
                return
            try:
                message = decode_runner_message(frame)
            except ProtocolError as exc:
                log.warning("runner of run %s sent a bad frame: %s", handle.run_id, exc)
                handle.kill_reason = handle.kill_reason or "crashed"
                return
            if handle.kill_reason is not None:
                return  # being stopped: its claim is already gone or about to be
            if message.kind == "ready" and not handle.ready:
                await self._on_ready(handle, child, message.message_id)
                continue
            reply = answer(self.db, handle.identity, message)
            if (
                handle.drain is not None
                and reply.outcome.ok
                and message.kind in DRAIN_BOUNDARIES
                and self._park_drained(handle)
            ):
                return  # parked at this boundary: the runner is stopped, not answered
            if faults.flagged(f"supervisor.kill_runner_after.{message.kind}"):
                # Crash tests: the runner dies after the commit, before it hears the reply.
                children.signal_group(child.pid, signal.SIGKILL)
            if faults.flagged(f"supervisor.delay_reply_after.{message.kind}"):
                # Race tests: hold the committed reply, so the runner outlives its commit.
                await asyncio.sleep(FAULT_REPLY_DELAY_SECONDS)
            if reply.outcome is Outcome.CLAIM_LOST:
                handle.claim_lost = True
            elif not reply.outcome.ok and handle.refused is None:
                code = reply.error.code if reply.error is not None else None
                handle.refused_code = code
                handle.refused = f"{message.kind} was answered {reply.outcome.value}" + (
                    f" ({code}: {reply.error.message})" if reply.error is not None else ""
                )
                log.warning("run %s: refused its runner's %s", handle.run_id, handle.refused)
            await self._send(child, reply)
            # A proposal that only moved its own run forward wakes no scheduler tick (about
            # ten reads a node, with nothing new for it to find); the rest of the server
            # (held answers, watched views) hears of every change.
            # A ``signal.send`` changed another run too (ctx.signal): everyone looks.
            changed = None if message.kind == "signal.send" else handle.run_id
            self.on_change(changed, scheduler=not in_place(message, reply))
            if reply.outcome is Outcome.CLAIM_LOST:
                return

    @staticmethod
    async def _end_when_exited(child: Child) -> None:
        """End the conversation once the child has exited, even if its channel stays open:
        a process that workflow code forked (``os.fork``, a ``multiprocessing`` fork) can
        hold a copy of the channel after its runner exited, and must not keep the runner's
        slot and its run hostage. Frames the child sent before it exited are read first (a
        short grace); closing the channel then ends the read loop."""
        await child.exited.wait()
        await asyncio.sleep(EXITED_READ_GRACE_SECONDS)
        child.writer.close()

    def _park_drained(self, handle: RunnerHandle) -> bool:
        """The runner just committed a node boundary while a drain waits: park the run now
        under its claim, unless something of it is still in flight (an applying effect, a
        live command group) or it no longer runs. True when it parked (the caller stops
        the runner without sending it the reply: the next node must not begin)."""
        drain = handle.drain
        assert drain is not None
        run = read_run(self.db.conn, handle.run_id)
        if (
            run.status is not RunStatus.RUNNING
            or effects.applying(self.db.conn, handle.run_id)
            or runners.live_processes(self.db.conn, handle.identity.runner_epoch)
        ):
            return False
        handle.drain = None
        try:
            answered = drain.park(handle.identity.claim)
        except Exception as exc:  # the asker answers the failure; the runner goes on
            if not drain.done.done():
                drain.done.set_exception(exc)
            return False
        if not drain.done.done():
            drain.done.set_result(answered)
        handle.kill_reason = drain.kill_reason
        self.on_change(handle.run_id)
        return True

    async def drain(
        self,
        handle: RunnerHandle,
        park: Callable[[Claim], object],
        seconds: float,
        *,
        kill_reason: str,
        abort: asyncio.Event | None = None,
    ) -> tuple[bool, object]:
        """Park ``handle``'s run at its runner's next node boundary, waiting at most
        ``seconds`` (or until ``abort`` is set, or the runner ends by itself).

        Returns ``(True, what park returned)`` when it parked there, else ``(False, None)``:
        the caller then acts at once (an effect still applying is settled by the one rule).
        ``park`` raising makes this raise. A second drain of the same runner only waits.
        """
        if handle.kill_reason is not None or not handle.ready:
            return False, None
        loop = asyncio.get_running_loop()
        mine = handle.drain is None
        if mine:
            handle.drain = Drain(park, loop.create_future(), kill_reason)
        drain = handle.drain
        assert drain is not None
        log.info(
            "run %s: waiting up to %g s for its runner's next node boundary (%s)",
            handle.run_id, seconds, kill_reason,
        )  # fmt: skip
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(handle.stopped.wait())]
        if abort is not None:
            waiters.append(asyncio.ensure_future(abort.wait()))
        try:
            await asyncio.wait(
                [drain.done, *waiters], timeout=seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiter in waiters:
                waiter.cancel()
            if mine and handle.drain is drain:
                handle.drain = None
        if not mine:
            return False, None  # the first drain of this runner answers for itself
        if not drain.done.done():
            drain.done.cancel()
            return False, None
        return True, drain.done.result()

    async def drain_all(self, seconds: float, abort: asyncio.Event) -> int:
        """Server stop: park every ready runner's run at its next node boundary (at most
        ``seconds``, or until ``abort``). Returns how many parked there."""

        def park(claim: Claim) -> object:
            return lifecycle.park(self.db, claim, ParkReason.SERVER_STOPPED)

        drains = [
            self.drain(handle, park, seconds, kill_reason="stopping", abort=abort)
            for handle in list(self.handles.values())
        ]
        if not drains:
            return 0
        results = await asyncio.gather(*drains, return_exceptions=True)
        return sum(1 for result in results if isinstance(result, tuple) and result[0])

    async def _on_ready(self, handle: RunnerHandle, child: Child, message_id: str) -> None:
        """Answer ``ready`` and send the run command in one write; the command carries the
        run's state (what ``state.get`` answers), so the runner needs no round trip for it."""
        with self.db.read() as conn:
            state = views.runner_state(conn, handle.run_id)
        revision = int(state["revision"])
        runners.mark_ready(self.db, handle.identity.runner_epoch, revision)
        handle.ready = True
        handle.ready_revision = revision
        reply = RunnerReply(
            schema=RUNNER_SCHEMA,
            message_id=message_id,
            outcome=Outcome.ACCEPTED,
            revision=revision,
            payload={},
        )
        kind = RunnerCommandKind(handle.command)
        try:
            command = encode_frame(
                RunnerCommand(schema=RUNNER_SCHEMA, command=kind, payload={"state": state})
            )
        except FrameTooLarge:  # the runner asks state.get, which refuses it loudly
            command = encode_frame(RunnerCommand(schema=RUNNER_SCHEMA, command=kind))
        child.writer.write(encode_frame(reply) + command)
        await child.writer.drain()

    async def _send(self, child: Child, message: object) -> None:
        try:
            frame = encode_frame(message)
        except FrameTooLarge:
            if not isinstance(message, RunnerReply):
                raise
            # A reply that cannot be framed is refused, never dropped: the runner hears why.
            log.error(
                "a reply to a runner (message %s) is over the frame limit", message.message_id
            )
            frame = encode_frame(
                RunnerReply(
                    schema=RUNNER_SCHEMA,
                    message_id=message.message_id,
                    outcome=Outcome.REJECTED,
                    error=ErrorInfo(
                        code="responseTooLarge",
                        message="the reply is larger than a protocol frame",
                    ),
                )
            )
        child.writer.write(frame)
        await child.writer.drain()

    async def _finish(self, handle: RunnerHandle) -> None:
        """The runner's conversation ended: stop everything it started, then settle.

        In order: 1. the child and its process group (a polite grace first when nobody
        asked it to stop); 2. every process group it recorded (shell commands), while their
        leaders are still ours; 3. record the exit; 4. decide the run's fate from committed
        state. Nothing of the runner can still apply an effect when step 4 settles it.
        """
        child = handle.child
        code: int | None = None
        grace = self.config.kill_grace_seconds
        try:
            if child is not None:
                if handle.kill_reason is None:
                    await children.wait_exited(child, grace)
                code = await children.stop(child, grace)
            await self._stop_recorded(handle.identity.runner_epoch)
            outcome = settlement.outcome(handle, code)
            runners.mark_exited(
                self.db,
                handle.identity.runner_epoch,
                outcome,
                exit_code=code if code is not None and code >= 0 else None,
                exit_signal=-code if code is not None and code < 0 else None,
                output_tail=child.output_tail()[-4000:] if child else None,
            )
            settlement.settle(self.db, self.config, handle, code)
        except Exception:
            # A failure here (a disk error, a lock timeout) must not end supervision: the
            # periodic sweep recovers the run once its claim has expired.
            log.exception("could not settle run %s after its runner ended", handle.run_id)
        finally:
            self.handles.pop(handle.run_id, None)
            handle.stopped.set()
            self.on_change(handle.run_id)

    async def _stop_recorded(self, runner_epoch: int) -> None:
        records = runners.live_processes(self.db.conn, runner_epoch)
        if records:
            identities = [Identity(r.pid, r.process_start) for r in records]
            stopped = await processes.stop_groups(identities, self.config.kill_grace_seconds)
            if stopped:
                log.warning(
                    "stopped %d process group(s) runner %d left running", len(stopped), runner_epoch
                )

    def tree_handles(self, run_id: str) -> list[RunnerHandle]:
        """The live runners of ``run_id`` and of every run below it in its tree."""
        below = child_runs.descendants(self.db.conn, run_id)
        found = [self.handles.get(r) for r in (run_id, *below)]
        return [handle for handle in found if handle is not None]

    def cancel_failing_joins(self) -> int:
        """A ``fail_fast`` join saw a failure: cancel its children still active (each with
        its tree, under their runners' claims) and stop their runners; the join completes
        as they end. Returns how many children were cancelled."""
        cancelled = 0
        for join in child_runs.failing(self.db.conn):
            for child_id in child_runs.active_children(self.db.conn, join.wait_id):
                handles = self.tree_handles(child_id)
                claims = {h.run_id: h.identity.claim for h in handles}
                why = f"a sibling in the fan_out of run {join.parent_run_id} failed (fail_fast)"
                try:
                    lifecycle.cancel(
                        self.db, child_id, claim=claims.get(child_id), reason=why, claims=claims
                    )
                except StoreError as exc:
                    log.warning("could not cancel child run %s: %s", child_id, exc)
                    continue
                for handle in handles:
                    self.terminate(handle, "cancelled")
                cancelled += 1
                self.on_change(child_id)
        return cancelled

    def expire_deadlines(self, now: int) -> int:
        """End every unfinished run whose run deadline passed at ``now`` (``timed_out``, its
        tree cancelled, under its runners' claims: ``lifecycle.expire``), then stop the
        runners of those trees. A run whose tree cannot be ended now (a runner of it still
        starting holds its claim) is tried again on the next tick. Returns how many ended."""
        ended = 0
        for run_id in deadlines.due(self.db.conn, now):
            handles = self.tree_handles(run_id)
            claims = {h.run_id: h.identity.claim for h in handles}
            try:
                result = lifecycle.expire(self.db, run_id, claim=claims.get(run_id), claims=claims)
            except (StoreError, LeaseHeldError) as exc:
                log.warning("could not end run %s at its deadline: %s", run_id, exc)
                continue
            if result is None:
                continue
            log.info("run %s: its run deadline passed; ended timed_out", run_id)
            for handle in handles:
                self.terminate(handle, "cancelled")
            ended += 1
            self.on_change(run_id)
        return ended

    def terminate(self, handle: RunnerHandle, reason: str) -> None:
        """Stop a runner whose run has already been changed under its claim (or must be).

        SIGTERM (and SIGCONT, so a stopped group can act on it) to its process group now,
        SIGKILL after the grace period if it is still alive. Its conversation then ends at
        the closed channel and ``_finish`` settles the run (``settlement``).
        """
        if handle.kill_reason is not None:
            return
        handle.kill_reason = reason
        if handle.child is not None:
            task = asyncio.create_task(self._escalate(handle.child))
            self._escalations.add(task)
            task.add_done_callback(self._escalations.discard)
        # Still being spawned: its task is not cancelled (a fork cut short would leave a
        # child nobody watches); ``_converse`` sees ``kill_reason`` once the child exists
        # and ``_finish`` stops it.

    async def _escalate(self, child: Child) -> None:
        if child.exited.is_set():
            return  # exited already; ``_finish`` reaps it after the last group kill
        children.signal_group(child.pid, signal.SIGTERM)
        children.signal_group(child.pid, signal.SIGCONT)
        if not await children.wait_exited(child, self.config.kill_grace_seconds):
            children.signal_group(child.pid, signal.SIGKILL)

    def renew_all(self) -> None:
        """The backup timer: renew every claim this server holds for a live runner.

        A claim its own runner released (the runner's last commit made the run wait, park or
        end; the runner is about to exit by itself) is not a lost claim: it is left alone.
        """
        for handle in list(self.handles.values()):
            try:
                renew(self.db, handle.identity.claim)
            except ClaimLostError as exc:
                if self._released_by_its_runner(handle):
                    self._stop_if_lingering(handle)
                    continue
                log.warning("claim of run %s lost at renewal: %s", handle.run_id, exc.reason)
                handle.claim_lost = True
                self.terminate(handle, "claimLost")

    def _stop_if_lingering(self, handle: RunnerHandle) -> None:
        """A runner that committed its last proposal should exit at once; one still alive a
        lease (and twice the kill grace) later, frozen or stuck in the kernel, holds a slot
        for nothing: stop it (outcome ``timedOut``)."""
        now = asyncio.get_running_loop().time()
        patience = max(self.config.lease_seconds, 2 * self.config.kill_grace_seconds)
        if handle.released_seen is None:
            handle.released_seen = now
        elif now - handle.released_seen >= patience:
            log.warning("runner of run %s did not exit after its last commit; stopping it",
                        handle.run_id)  # fmt: skip
            self.terminate(handle, "lingered")

    def _released_by_its_runner(self, handle: RunnerHandle) -> bool:
        """Whether the run left ``running`` and the claim was released at the runner's own
        generation (so nobody else took the run): what a wait, park or end the runner
        committed leaves behind while the runner exits."""
        lease = read_lease(self.db.conn, handle.run_id)
        run = read_run(self.db.conn, handle.run_id)
        return (
            run.status is not RunStatus.RUNNING
            and lease is not None
            and lease.generation == handle.identity.claim.generation
            and not lease.held
        )

    def sweep_expired(self) -> int:
        """Recover every running run whose claim expired or was released behind our back.

        The backstop for a claim that expired under a live server (a frozen process, a
        suspended machine, a stalled loop): a run with a live runner handle has that runner
        stopped first (its ``_finish`` then recovers the run); a run without one is
        recovered at once through a control claim, after stopping any process group an
        earlier runner of it recorded. Returns how many runs it acted on.
        """
        acted = 0
        for run_id in takeover.expired_running(self.db):
            handle = self.handles.get(run_id)
            if handle is not None:
                if handle.kill_reason is None:
                    log.warning("run %s: claim expired under a live runner; stopping it", run_id)
                    handle.claim_lost = True
                    self.terminate(handle, "claimLost")
                    acted += 1
                continue
            task = asyncio.create_task(self._recover_stranded(run_id))
            self._escalations.add(task)
            task.add_done_callback(self._escalations.discard)
            acted += 1
        return acted

    async def _recover_stranded(self, run_id: str) -> None:
        if run_id in self._recovering:
            return
        self._recovering.add(run_id)
        try:
            for record in runners.live_records(self.db.conn):
                if record.run_id == run_id and record.run_id not in self.handles:
                    await self._stop_recorded(record.runner_epoch)
                    runners.mark_exited(self.db, record.runner_epoch, "claimLost")
            if run_id not in self.handles:
                takeover.recover(self.db, run_id)
                log.warning("run %s: recovered a running run whose claim had expired", run_id)
                self.on_change(run_id)
        except (StoreError, LeaseHeldError) as exc:
            log.warning("could not recover run %s: %s", run_id, exc)
        finally:
            self._recovering.discard(run_id)

    def enforce_deadlines(self, now: int) -> None:
        """Kill runners whose node ran past its deadline plus the grace period."""
        if not self.handles:
            return
        grace = int(self.config.node_grace_seconds * 1000)
        marks = ", ".join("?" for _ in self.handles)
        rows = self.db.conn.execute(
            f"SELECT run_id FROM node_attempts WHERE status = 'running' AND run_id IN ({marks})"
            " AND deadline_at IS NOT NULL AND deadline_at + ? <= ?",
            (*self.handles, grace, now),
        ).fetchall()
        for (run_id,) in rows:
            handle = self.handles.get(run_id)
            if handle is not None and handle.kill_reason is None:
                log.warning("run %s: node deadline passed, stopping its runner", run_id)
                self.terminate(handle, "nodeTimeout")
        for handle in list(self.handles.values()):
            if handle.validating_until is None or handle.kill_reason is not None:
                continue
            request = interactions.open_request_of(self.db.conn, handle.run_id)
            if request is None or request.status != "validating":
                handle.validating_until = None  # settled: the runner continues the graph
                continue
            if now >= handle.validating_until or (
                request.deadline_at is not None and now >= request.deadline_at
            ):
                log.warning(
                    "run %s: validation ran out of time, stopping its runner", handle.run_id
                )
                self.terminate(handle, "validationTimeout")

    async def stop_all(self) -> None:
        """Shutdown: park every running run at its last boundary, then stop the runners."""
        for handle in list(self.handles.values()):
            try:
                lifecycle.park(self.db, handle.identity.claim, ParkReason.SERVER_STOPPED)
            except StoreError:
                pass
            except sqlite3.Error as exc:  # a full disk: the next server recovers the run
                log.warning("could not park run %s while stopping: %s", handle.run_id, exc)
            self.terminate(handle, "stopping")
        tasks = [h.task for h in self.handles.values() if h.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=self.config.kill_grace_seconds + 5)
