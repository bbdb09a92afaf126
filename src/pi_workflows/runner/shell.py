"""Running one shell node's command: own process group, bounded capture, SIGTERM then SIGKILL.

Runs in the runner child; never opens the database. ``run_command`` spawns the argument
list (never a shell string of the author's) in a new session, so it leads its own process
group, held at a gate until the server has recorded the group (pid and start time), with
stdin from ``/dev/null`` and stdout/stderr on pipes that the main thread drains with a
selector, keeping the first ``SHELL_CAPTURE_BYTES`` of each and counting the rest, and
feeding both to the attempt's logs (``logs.capture``, which keeps their tail). When the
node deadline passes it sends SIGTERM to the group, then SIGKILL after
``SHELL_KILL_GRACE_SECONDS``; when the command exits, what it left in its group is killed.
``ProcessGroups`` remembers live commands so a SIGTERM to the runner stops them the same
way, and the server stops recorded groups itself when the runner dies. Only called after
the effect reservation said ``applying``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec

from pi_workflows.authoring import JsonObject
from pi_workflows.protocol.process_start import process_start
from pi_workflows.runner.callbacks import Deadline
from pi_workflows.runner.errors import RunnerError
from pi_workflows.runner.limits import (
    SHELL_CAPTURE_BYTES,
    SHELL_DRAIN_SECONDS,
    SHELL_KILL_GRACE_SECONDS,
    SHELL_TEXT_BYTES,
)
from pi_workflows.runner.logs import capture
from pi_workflows.runner.termination import Termination

_CHUNK: Final = 64 * 1024
_GATE: Final = 'IFS= read -r go || exit 125; exec "$@" </dev/null'
"""The ``/bin/sh -c`` script that holds a command until the runner opens its gate."""
_POLL_SECONDS: Final = 0.05  # only where the platform has no pidfd to wait on
_ENCODER: Final = msgspec.json.Encoder()


@dataclass
class _Stream:
    """The captured head of one pipe and the count of everything the command wrote."""

    data: bytearray = field(default_factory=bytearray)
    total: int = 0
    dropped: bool = False

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = SHELL_CAPTURE_BYTES - len(self.data)
        if len(chunk) > room:
            self.dropped = True
        if room > 0:
            self.data += chunk[:room]


@dataclass(frozen=True)
class ShellRun:
    """What one command did. ``returncode`` is negative for a signal, ``None`` if it never
    started (then ``spawn_error`` says why)."""

    command: tuple[str, ...]
    returncode: int | None
    spawn_error: str | None
    stdout: bytes
    stderr: bytes
    stdout_bytes: int
    stderr_bytes: int
    dropped: bool
    duration_ms: int
    timed_out: bool

    def texts(self) -> tuple[str, str, bool]:
        """Decoded stdout and stderr cut to fit a node output, and whether anything was cut."""
        out, out_cut = fit_text(self.stdout)
        err, err_cut = fit_text(self.stderr)
        return out, err, self.dropped or out_cut or err_cut

    def receipt(self) -> JsonObject:
        """``{command, exitCode, signal, durationMs, stdoutBytes, stderrBytes, truncated}``."""
        code = self.returncode
        return {
            "command": list(self.command),
            "exitCode": code if code is not None and code >= 0 else None,
            "signal": -code if code is not None and code < 0 else None,
            "durationMs": self.duration_ms,
            "stdoutBytes": self.stdout_bytes,
            "stderrBytes": self.stderr_bytes,
            "truncated": self.texts()[2],
        }


def fit_text(data: bytes, budget: int = SHELL_TEXT_BYTES) -> tuple[str, bool]:
    """``data`` as text whose JSON encoding is at most ``budget`` bytes (head kept)."""
    text = data[:budget].decode("utf-8", errors="replace")
    cut = len(data) > budget
    while len(_ENCODER.encode(text)) > budget:
        text = text[: len(text) * 3 // 4]
        cut = True
    return text, cut


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the command exited, without reaping it (its pid and group stay reserved)."""
    if proc.returncode is not None:
        return True
    try:
        status = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return status is not None


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Send ``signum`` to the command's process group (it leads it; pgid == pid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def _pidfd(proc: subprocess.Popen[bytes]) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(proc.pid)
    except OSError:
        return None
    return fd


def _wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for the command to exit, without reaping it."""
    end = time.monotonic() + timeout
    fd = _pidfd(proc)
    try:
        while not _exited(proc):
            left = end - time.monotonic()
            if left <= 0:
                return False
            if fd is not None:
                select.select([fd], [], [], left)
            else:
                select.select([], [], [], min(left, _POLL_SECONDS))
        return True
    finally:
        if fd is not None:
            os.close(fd)


def _stop_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the group, wait up to ``grace`` for the leader, SIGKILL the group, reap."""
    _signal_group(proc, signal.SIGTERM)
    _wait_exit(proc, grace)
    _signal_group(proc, signal.SIGKILL)  # stragglers too; the unreaped leader keeps the pgid
    proc.wait()


class ProcessGroups:
    """The shell commands running right now, so a terminating runner can stop them."""

    def __init__(self) -> None:
        self._live: list[subprocess.Popen[bytes]] = []

    def add(self, proc: subprocess.Popen[bytes]) -> None:
        """Remember a freshly spawned command."""
        self._live.append(proc)

    def discard(self, proc: subprocess.Popen[bytes]) -> None:
        """Forget a command that has been reaped."""
        if proc in self._live:
            self._live.remove(proc)

    def stop_all(self, grace: float = SHELL_KILL_GRACE_SECONDS) -> None:
        """SIGTERM every live group, give them ``grace`` seconds together, then SIGKILL."""
        live, self._live = self._live, []
        for proc in live:
            _signal_group(proc, signal.SIGTERM)
        end = time.monotonic() + grace
        for proc in live:
            _wait_exit(proc, max(0.0, end - time.monotonic()))
        for proc in live:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


class _Pump:
    """Drains both pipes while enforcing the deadline (main thread only)."""

    def __init__(self, proc: subprocess.Popen[bytes], deadline: Deadline) -> None:
        self.proc = proc
        self.deadline = deadline
        self.streams: dict[int, _Stream] = {}
        self.names: dict[int, str] = {}  # fd -> "stdout" | "stderr", for the attempt's logs
        self.logs_failed = False  # a periodic node.logs failed: the final one will tell
        self.selector = selectors.DefaultSelector()
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            assert pipe is not None
            os.set_blocking(pipe.fileno(), False)
            self.streams[pipe.fileno()] = _Stream()
            self.names[pipe.fileno()] = name
            self.selector.register(pipe.fileno(), selectors.EVENT_READ)
        self.pidfd = _pidfd(proc)
        if self.pidfd is not None:
            self.selector.register(self.pidfd, selectors.EVENT_READ)
        self.timed_out = False

    def _pipes_open(self) -> bool:
        return any(fd in self.selector.get_map() for fd in self.streams)

    def run(self) -> None:
        """Read until the command exited and its pipes closed (or drained for a moment)."""
        kill_at: float | None = None
        drain_until: float | None = None
        while True:
            now = time.monotonic()
            if drain_until is None and _exited(self.proc):
                drain_until = now + SHELL_DRAIN_SECONDS
                if self.pidfd is not None:
                    self.selector.unregister(self.pidfd)
            if drain_until is not None and (not self._pipes_open() or now >= drain_until):
                return
            if drain_until is None and not self.timed_out and self.deadline.expired:
                self.timed_out = True
                _signal_group(self.proc, signal.SIGTERM)
                kill_at = now + SHELL_KILL_GRACE_SECONDS
            if drain_until is None and kill_at is not None and now >= kill_at:
                _signal_group(self.proc, signal.SIGKILL)
                kill_at = None
            self._flush_logs()
            self._wait(self._next_wake(now, kill_at, drain_until))

    def _flush_logs(self) -> None:
        """Send the command's output so far as the attempt's logs, when a flush is due; a
        failure here never stops the pump (the attempt's final flush reports it)."""
        if self.logs_failed:
            return
        try:
            capture.flush_if_due()
        except RunnerError:
            self.logs_failed = True

    def _next_wake(
        self, now: float, kill_at: float | None, drain_until: float | None
    ) -> float | None:
        wakes = [at - now for at in (kill_at, drain_until) if at is not None]
        if not self.timed_out and drain_until is None:
            remaining = self.deadline.remaining()
            if remaining is not None:
                wakes.append(remaining)
        if self.pidfd is None and drain_until is None:
            wakes.append(_POLL_SECONDS)
        flush_in = None if self.logs_failed else capture.due_in()
        if flush_in is not None:
            wakes.append(flush_in)
        return max(0.0, min(wakes)) if wakes else None

    def _wait(self, timeout: float | None) -> None:
        if not self.selector.get_map():
            select.select([], [], [], _POLL_SECONDS if timeout is None else timeout)
            return
        for key, _ in self.selector.select(timeout):
            stream = self.streams.get(int(key.fd))
            if stream is None:
                continue  # the pidfd: the loop notices the exit
            try:
                chunk = os.read(int(key.fd), _CHUNK)
            except BlockingIOError:
                continue
            if chunk:
                stream.add(chunk)
                capture.shell_output(self.names[int(key.fd)], chunk)
            else:
                self.selector.unregister(key.fd)

    def close(self) -> None:
        self.selector.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def _not_runnable(program: str, env: Mapping[str, str] | None) -> str | None:
    """Why ``program`` cannot be executed (as ``execvp`` would find it on the ``PATH`` of
    ``env``, default the runner's), or None."""
    if "/" in program:
        if not os.path.exists(program):
            return os.strerror(errno.ENOENT)
        if os.path.isdir(program) or not os.access(program, os.X_OK):
            return os.strerror(errno.EACCES)
        return None
    path = (os.environ if env is None else env).get("PATH", os.defpath)
    return None if shutil.which(program, path=path) is not None else os.strerror(errno.ENOENT)


def _failed_to_start(argv: tuple[str, ...], reason: str, started: float) -> ShellRun:
    return ShellRun(
        argv, None, f"cannot run {argv[0]!r}: {reason}", b"", b"", 0, 0, False,
        _elapsed_ms(started), False,
    )  # fmt: skip


def run_command(
    command: Sequence[str],
    *,
    deadline: Deadline,
    groups: ProcessGroups,
    termination: Termination,
    register: Callable[[int, float], None],
    ended: Callable[[int], None],
    env: Mapping[str, str] | None = None,
) -> ShellRun:
    """Run ``command`` to completion or to ``deadline`` and report what it did.

    It runs with ``env`` (default: the runner's environment, which is the run's) in the
    runner's working directory (the run's).

    The command's process is spawned held at a gate (a ``/bin/sh`` that waits for one line
    on its stdin, then ``exec``s the command with stdin from ``/dev/null``, keeping its pid,
    session and start time). ``register(pid, start_time)`` records the group with the server
    while it is held; only then is the gate opened. If registering raises (the claim is
    lost), the gate closes unopened and the command never runs. When the command has
    exited, whatever it left in its group is killed before it is reaped (the zombie leader
    keeps the group id ours), then ``ended(pid)`` is reported.
    """
    argv = tuple(command)
    started = time.monotonic()
    problem = _not_runnable(argv[0], env)
    if problem is not None:
        return _failed_to_start(argv, problem, started)
    gate_read, gate_write = os.pipe()
    try:
        with termination.deferred():
            proc = subprocess.Popen(
                ("/bin/sh", "-c", _GATE, "pi-workflows-gate", *argv),
                stdin=gate_read,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                env=env,
            )
            groups.add(proc)
    except OSError as exc:
        os.close(gate_write)
        return _failed_to_start(argv, exc.strerror or str(exc), started)
    finally:
        os.close(gate_read)
    try:
        start = process_start(proc.pid)  # an unreaped child always has one
        if start is None:
            raise RuntimeError(f"the command {proc.pid} has no start time to record")
        register(proc.pid, start)
    except BaseException:
        os.close(gate_write)  # the held shell reads end-of-file and exits: nothing ran
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
        groups.discard(proc)
        raise
    with contextlib.suppress(BrokenPipeError):
        os.write(gate_write, b"go\n")
    os.close(gate_write)
    pump = _Pump(proc, deadline)
    try:
        pump.run()
    finally:
        pump.close()
    _signal_group(proc, signal.SIGKILL)  # stragglers; the unreaped leader keeps the pgid ours
    returncode = proc.wait()
    groups.discard(proc)
    ended(proc.pid)
    out, err = pump.streams.values()
    return ShellRun(
        argv,
        returncode,
        None,
        bytes(out.data),
        bytes(err.data),
        out.total,
        err.total,
        out.dropped or err.dropped,
        _elapsed_ms(started),
        pump.timed_out,
    )


def _elapsed_ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
