"""Injecting the planned faults of a seed: kills, freezes, stops and restarts.

Runs in the campaign driver. `FaultRunner.tick` fires the next planned fault once it is due
and, when the plan asks for it, once an effect body is inside the chosen window (before or
after it applied); it gives up waiting for the window after `WINDOW_WAIT` seconds and picks
any target. Targets are chosen from the candidates sorted in a stable order by the plan's
`pick`. Signals go only to processes whose start identity still matches (`processes.py`).

Every fault that fired is recorded with what attribution (`attribution.py`) needs: its
wall-clock start and end (milliseconds, comparable with the server's clock), the run it
targeted, the pids it hit and the epoch of the server it hit.
"""

from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import dataclass
from typing import Any, Final

import psutil

from campaign import operator
from campaign.context import TERMINAL, SeedContext
from campaign.plan import Fault, PlannedFault, Restart
from campaign.sessions import agents
from campaign.witness import Body
from campaign.workflows import COMPOSITION

WINDOW_WAIT: Final = 6.0
"""Seconds a fault waits for a body inside its window before it takes any target."""

TARGET_WAIT: Final = 10.0
"""Seconds a fault waits for any target (a live runner, a shell) before it is skipped."""

EXIT_WAIT: Final = 60.0

PROCESS_FAULTS: Final = frozenset(
    {
        Fault.KILL_SHELL,
        Fault.KILL_RUNNER,
        Fault.KILL_RUNNER_GROUP,
        Fault.STOP_RUNNER,
        Fault.KILL_SESSION,
        Fault.KILL_AGENT,
    }
)

CLI_PROBE_AFTER: Final = 1.5
"""Seconds an armed CLI kill waits for an operator command before it kills a CLI read."""


@dataclass
class Target:
    """What a fault hits."""

    pid: int | None = None
    run_id: str | None = None
    body: Body | None = None
    session: str | None = None


def now_ms() -> int:
    """Wall-clock milliseconds (the server's clock reads the wall clock too)."""
    return round(time.time() * 1000)


class FaultRunner:
    """Fires the faults of one plan, in order."""

    def __init__(self, ctx: SeedContext) -> None:
        self.ctx = ctx
        self.index = 0
        self.due_at = ctx.began + (ctx.plan.faults[0].at + 1.0 if ctx.plan.faults else 0.0)
        self.waiting_since: float | None = None
        self.cli_armed: tuple[float, int, PlannedFault] | None = None  # (when, kills, fault)

    @property
    def finished(self) -> bool:
        """Every planned fault fired (or was skipped)."""
        return self.index >= len(self.ctx.plan.faults)

    def tick(self) -> None:
        """Resume stopped runners whose time is up; fire the next fault when due."""
        self._continue_stopped(time.monotonic())
        if self.cli_armed is not None and not self._cli_killed():
            return
        if self.finished or time.monotonic() < self.due_at:
            return
        fault = self.ctx.plan.faults[self.index]
        if self.waiting_since is None:
            self.waiting_since = time.monotonic()
        waited = time.monotonic() - self.waiting_since
        target = self._target(fault, in_window=fault.window is not None and waited < WINDOW_WAIT)
        if target is None and fault.window is not None and waited < WINDOW_WAIT:
            return
        if target is None and _needs_target(fault.kind):
            if waited < TARGET_WAIT and not self._all_done():
                return
            self._record(fault, "skipped: no target", None)
        else:
            self._fire(fault, target or Target())
            if self.cli_armed is not None:
                return  # it advances once the armed CLI command was killed
        self._advance()

    def _advance(self) -> None:
        self.index += 1
        self.waiting_since = None
        if not self.finished:
            self.due_at = time.monotonic() + self.ctx.plan.faults[self.index].at

    def _all_done(self) -> bool:
        """Every run started and settled: waiting for a target is pointless."""
        return all(t.run_id is not None and t.settled for t in self.ctx.tracks)

    def finish(self) -> None:
        """Resume every runner still stopped and disarm a CLI kill (the end of a seed)."""
        self._continue_stopped(float("inf"))
        self.ctx.surfaces.kill_next_cli = None

    def _cli_killed(self) -> bool:
        """An armed CLI kill: True once it happened (the fault is then recorded)."""
        assert self.cli_armed is not None
        armed_at, kills, fault = self.cli_armed
        surfaces = self.ctx.surfaces
        if surfaces.cli_kills == kills and time.monotonic() - armed_at > CLI_PROBE_AFTER:
            # The operator had nothing to say by the CLI: a read it would retry instead.
            track = next((t for t in self.ctx.tracks if t.run_id), None)
            if track is not None and track.run_id is not None:
                surfaces.cli("run", "show", track.run_id, "--json")
            else:
                surfaces.cli("run", "list", "--json")
        if surfaces.cli_kills == kills:
            if time.monotonic() - armed_at < TARGET_WAIT:
                return False
            surfaces.kill_next_cli = None
            self.cli_armed = None
            self._record(fault, "skipped: every CLI command finished first", None)
            self._advance()
            return True
        self.cli_armed = None
        self._record(fault, f"killed a CLI command after {fault.hold:.2f} s", None)
        self._advance()
        return True

    # --- targets ------------------------------------------------------------------------

    def _target(self, fault: PlannedFault, *, in_window: bool) -> Target | None:
        ctx = self.ctx
        bodies = [b for b in ctx.witnesses.unfinished() if _alive(b.pid)]
        if in_window:
            bodies = [b for b in bodies if b.window == fault.window]
        kind = fault.kind
        if kind is Fault.KILL_SHELL:
            shells = sorted((b for b in bodies if b.form == "shell"), key=lambda b: (b.run, b.pid))
            return (
                Target(pid=_pick(shells, fault).pid, body=_pick(shells, fault)) if shells else None
            )
        if kind in (Fault.KILL_RUNNER, Fault.KILL_RUNNER_GROUP, Fault.STOP_RUNNER):
            if in_window:
                found = sorted(
                    (Target(pid=_runner_of(b), run_id=b.run, body=b) for b in bodies),
                    key=lambda t: (t.run_id or "", t.pid or 0),
                )
                found = [t for t in found if t.pid]
            else:
                found = [Target(pid=p, run_id=r) for p, r in sorted(ctx.runner_pids.items())]
                found = [t for t in found if t.pid and _alive(t.pid)]
            return _pick(found, fault) if found else None
        if kind is Fault.PAUSE_RUN:
            if in_window:
                runs = sorted({b.run for b in bodies})
            else:
                # A running run, or a parent that waits on its tree (the pause must reach
                # every run below it, at any depth).
                runs = sorted(
                    t.run_id
                    for t in ctx.tracks
                    if t.run_id
                    and (
                        t.status == "running"
                        or (t.status == "waiting" and t.planned.workflow in COMPOSITION)
                    )
                )
            return Target(run_id=_pick(runs, fault)) if runs else None
        if kind is Fault.CANCEL_RUN:
            runs = sorted(t.run_id for t in ctx.tracks if t.run_id and t.status not in TERMINAL)
            return Target(run_id=_pick(runs, fault)) if runs else None
        if kind is Fault.KILL_CLI:
            return Target()
        if kind is Fault.KILL_SESSION:
            live = ctx.sessions.live() if ctx.sessions is not None else []
            client = _pick(live, fault) if live else None
            if client is None or client.proc is None:
                return None
            return Target(pid=client.proc.pid, session=client.session)
        if kind is Fault.KILL_AGENT:
            live_agents = agents(ctx.pi_wrapper) if ctx.pi_wrapper is not None else []
            if not live_agents:
                return None
            pid, run_id = _pick(live_agents, fault)
            ctx.processes.note(pid, "agent")
            return Target(pid=pid, run_id=run_id)
        # Server faults: the server, optionally once some body is in the window.
        if in_window and not bodies:
            return None
        if ctx.server_pid is None or not ctx.server_up:
            return None
        body = sorted(bodies, key=lambda b: (b.run, b.pid))[0] if bodies and in_window else None
        return Target(pid=ctx.server_pid, body=body)

    # --- firing -------------------------------------------------------------------------

    def _fire(self, fault: PlannedFault, target: Target) -> None:
        ctx = self.ctx
        kind = fault.kind
        hit = target.body.window if target.body is not None else None
        detail: str
        start = now_ms()
        extra: dict[str, Any] = {"runId": target.run_id, "epoch": ctx.server_epoch}
        pids = [target.pid] if target.pid is not None else []
        end: int | None = None
        if kind is Fault.KILL_CLI:
            ctx.surfaces.kill_next_cli = fault.hold
            self.cli_armed = (time.monotonic(), ctx.surfaces.cli_kills, fault)
            return
        if kind in PROCESS_FAULTS:
            detail = self._hit_process(fault, target, extra)
            if kind is Fault.STOP_RUNNER:
                end = start + round(fault.hold * 1000)
        elif kind is Fault.STOP_SERVER:
            assert target.pid is not None
            ctx.processes.send(target.pid, signal.SIGSTOP)
            time.sleep(fault.hold)  # the fault itself: the server frozen past the lease
            ctx.processes.send(target.pid, signal.SIGCONT)
            detail = f"server pid {target.pid} stopped for {fault.hold:.1f} s"
        elif kind in (Fault.KILL_SERVER, Fault.KILL_SERVER_ALL, Fault.GRACEFUL_STOP):
            assert target.pid is not None
            detail, killed = self._server_down(fault, target.pid)
            pids += killed
            extra["forced"] = fault.forced
        elif kind is Fault.PAUSE_RUN:
            track = ctx.track_of(target.run_id or "")
            ok = track is not None and operator.pause(ctx, track, 1.0 + fault.hold * 2)
            detail = f"paused {target.run_id}: {ok}"
        elif kind is Fault.CANCEL_RUN:
            track = ctx.track_of(target.run_id or "")
            ok = track is not None and operator.cancel(ctx, track)
            detail = f"cancelled {target.run_id}: {ok}"
        else:  # pragma: no cover - a new kind without a branch
            raise ValueError(kind)
        extra.update(startMs=start, endMs=end if end is not None else now_ms(), pids=pids)
        self._record(fault, detail, hit, extra)

    def _hit_process(self, fault: PlannedFault, target: Target, extra: dict[str, Any]) -> str:
        """A signal to one process: a shell, a runner, a session client, a headless agent."""
        ctx = self.ctx
        kind = fault.kind
        assert target.pid is not None
        if kind is Fault.KILL_SHELL:
            assert target.body is not None
            sent = ctx.processes.send(target.pid, signal.SIGKILL)
            if sent:
                ctx.killed_shells.add(target.body.nonce)
            extra["runId"] = target.body.run
            return f"shell pid {target.pid} ({target.body.node}, {target.body.window}) sent={sent}"
        if kind in (Fault.KILL_RUNNER, Fault.KILL_RUNNER_GROUP):
            ctx.processes.note(target.pid, "runner")
            sent = ctx.processes.send(
                target.pid, signal.SIGKILL, group=kind is Fault.KILL_RUNNER_GROUP
            )
            return f"runner pid {target.pid} of {target.run_id} sent={sent}"
        if kind is Fault.STOP_RUNNER:
            ctx.processes.note(target.pid, "runner")
            if ctx.processes.send(target.pid, signal.SIGSTOP):
                ctx.pending_cont.append((time.monotonic() + fault.hold, target.pid))
            return f"runner pid {target.pid} stopped for {fault.hold:.1f} s"
        if kind is Fault.KILL_SESSION:
            assert ctx.sessions is not None
            killed = ctx.sessions.kill(ctx.sessions.clients[target.session or ""], fault.hold)
            extra["session"] = target.session
            return (
                f"session client pid {killed} of {target.session} killed; it attaches again "
                f"after {fault.hold:.1f} s"
            )
        sent = ctx.processes.send(target.pid, signal.SIGKILL)  # KILL_AGENT
        return f"headless agent pid {target.pid} of {target.run_id} sent={sent}"

    def _server_down(self, fault: PlannedFault, pid: int) -> tuple[str, list[int]]:
        ctx = self.ctx
        kind = fault.kind
        seen = ctx.processes.note(pid, "server")
        ctx.server_up = False
        ctx.server_pid = None
        killed: list[int] = []
        if kind is Fault.GRACEFUL_STOP and fault.forced:
            how = self._forced_stop(fault, pid)
        elif kind is Fault.GRACEFUL_STOP:
            if fault.sigterm:
                ctx.processes.send(pid, signal.SIGTERM)
                how = "SIGTERM"
            elif fault.pick < 0.5:
                code, _, err = ctx.surfaces.cli("server", "stop", "--json")
                how = f"`server stop` (exit {code})"
                if code != 0:
                    ctx.violation("stopFailed", f"server stop exited {code}: {err}")
            else:
                answer = ctx.surfaces.call("stop")
                how = f"client stop ({answer.status})"
        else:
            ctx.processes.send(pid, signal.SIGKILL)
            how = "SIGKILL"
            if kind is Fault.KILL_SERVER_ALL:
                killed = self._kill_children()
                how += f" with {len(killed)} runner/shell group(s)"
        ctx.surfaces.close()
        deadline = time.monotonic() + EXIT_WAIT
        while seen is not None and ctx.processes.alive(seen):
            if time.monotonic() > deadline:
                ctx.violation("serverDidNotExit", f"the server did not exit after {how}")
                ctx.processes.send(pid, signal.SIGKILL)
                break
            time.sleep(0.05)
        time.sleep(fault.hold)  # the fault itself: nobody around while the server is down
        self._restart(fault.restart)
        return f"server pid {pid} down by {how}; restarted by {fault.restart}", killed

    def _forced_stop(self, fault: PlannedFault, pid: int) -> str:
        """A stop that does not drain: SIGINT, or a second stop while the first drains."""
        ctx = self.ctx
        if fault.sigterm:
            ctx.processes.send(pid, signal.SIGINT)
            return "SIGINT"
        ctx.processes.send(pid, signal.SIGTERM)
        time.sleep(0.2)
        ctx.processes.send(pid, signal.SIGTERM)
        return "SIGTERM twice (the second during the drain)"

    def _kill_children(self) -> list[int]:
        """SIGKILL every runner group and shell command (a power cut, as near as we get)."""
        ctx = self.ctx
        runners = [e.pid for e in ctx.processes.seen.values() if e.role == "runner"]
        killed = [pid for pid in runners if ctx.processes.send(pid, signal.SIGKILL, group=True)]
        for body in ctx.witnesses.unfinished():
            if body.form == "shell" and ctx.processes.send(body.pid, signal.SIGKILL, group=True):
                ctx.killed_shells.add(body.nonce)
                killed.append(body.pid)
        return killed

    def _restart(self, mode: Restart) -> None:
        ctx = self.ctx
        if mode is Restart.SERVER_START:
            code, _, err = ctx.surfaces.cli("server", "start", "--json")
            ok = code == 0
        elif mode is Restart.AUTO_CLI:
            code, _, err = ctx.surfaces.cli("run", "list", "--json")
            ok = code == 0
        else:
            ok = ctx.surfaces.read("list_runs") is not None
            err = "the client's auto-start failed"
        if not ok:
            ctx.violation("restartFailed", f"restart by {mode} failed: {err}")
        ctx.server_up = ok

    def _continue_stopped(self, now: float) -> None:
        ctx = self.ctx
        keep = []
        for when, pid in ctx.pending_cont:
            if when <= now:
                ctx.processes.send(pid, signal.SIGCONT)
            else:
                keep.append((when, pid))
        ctx.pending_cont = keep

    def _record(
        self,
        fault: PlannedFault,
        detail: str,
        window: str | None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        ctx = self.ctx
        entry: dict[str, Any] = {
            "index": fault.index,
            "kind": str(fault.kind),
            "at": round(ctx.elapsed(), 2),
            "window": window,
            "detail": detail,
            "skipped": detail.startswith("skipped"),
            **(extra or {}),
        }
        ctx.faults_done.append(entry)
        ctx.note(f"fault {fault.kind}: {detail}")


def _needs_target(kind: Fault) -> bool:
    return kind is not Fault.KILL_CLI


def _pick(items: list[Any], fault: PlannedFault) -> Any:
    return items[min(len(items) - 1, int(fault.pick * len(items)))]


def _alive(pid: int) -> bool:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    return False


def _runner_of(body: Body) -> int | None:
    """The runner executing a body: the body's own process for an action, its parent for a
    shell command (None once the runner is gone and the command was reparented)."""
    if body.form == "action":
        return body.pid
    with contextlib.suppress(psutil.Error):
        parent = psutil.Process(body.pid).ppid()
        if parent > 1 and "pi_workflows.runner" in " ".join(psutil.Process(parent).cmdline()):
            return parent
    return None
