"""The runner child's lifecycle: take the channel, handshake, load, run the loop, exit.

Runs in the runner child (``python -m pi_workflows.runner``); never opens the database and
never knows its path. Phases, in order:

1. **channel**: read ``PI_WORKFLOWS_RUNNER_FD``, scrub every ``PI_WORKFLOWS_*`` variable,
   make the fd non-inheritable, install the SIGTERM handler;
2. **handshake**: read ``launch`` (the ``LaunchEnvelope``), send ``ready {pid}``, read its
   reply, read exactly one command (``start``, ``resume`` or ``restart``);
3. **environment**: replace the process environment with the run's recorded variables
   (plus the server's ``OTEL_*`` settings, which the run's own values override) and enter
   its working directory (``/`` when none was recorded); a working directory that
   no longer exists parks the run;
4. **load**: verify and load the recorded sources before any workflow code runs; a changed
   or broken source sends ``run.park`` and ends the child;
5. **run**: ``state.get`` once, then the execution loop (``loop.py``).

Exit codes: 0 when the child ended on its own terms (run finished, waiting, parked,
``claimLost``, a ``cancel``/``stop`` command); 70 when it could not continue (protocol
violation, unexpected reply outcome, channel closed, internal error: one line on stderr);
75 when an action body outlived its deadline and its effect was left applying; 143 after
SIGTERM (shell process groups are stopped first; nothing is sent).
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import Any

from pi_workflows.protocol import PROTOCOL_VERSION, RunnerCommandKind
from pi_workflows.runner import tracing
from pi_workflows.runner.blobs import resolve
from pi_workflows.runner.channel import (
    Channel,
    Connection,
    open_socket,
    receive_command,
    take_channel_fd,
)
from pi_workflows.runner.envelope import LaunchEnvelope, StateView, convert
from pi_workflows.runner.errors import (
    ClaimLostError,
    EffectOutcomeUnknownError,
    ProtocolViolationError,
    RunnerError,
    RunnerTerminated,
    StopCommandError,
    one_line,
)
from pi_workflows.runner.limits import EFFECT_UNKNOWN_EXIT, RUNNER_FAILURE_EXIT, TERMINATED_EXIT
from pi_workflows.runner.load import LOAD_FAILED, Park, load_recorded
from pi_workflows.runner.loop import Loop
from pi_workflows.runner.runtime import Runtime
from pi_workflows.runner.scheduling import become_batch
from pi_workflows.runner.shell import ProcessGroups
from pi_workflows.runner.termination import Termination

_RUN_COMMANDS = frozenset(
    {RunnerCommandKind.START, RunnerCommandKind.RESUME, RunnerCommandKind.RESTART}
)


def _warn(line: str) -> None:
    sys.stderr.write(f"pi-workflows runner: {line}\n")
    sys.stderr.flush()


def _handshake(connection: Connection) -> tuple[LaunchEnvelope, Channel, dict[str, Any] | None]:
    """Phase 2: launch, ready, the one run command. Returns the envelope, the channel and the
    run state the command carries (None when it did not fit a frame: ask ``state.get``)."""
    launch = receive_command(connection, "the launch command")
    if launch.command is not RunnerCommandKind.LAUNCH:
        raise ProtocolViolationError("launch", f"first command is {launch.command.value!r}")
    envelope = convert(launch.payload, LaunchEnvelope, "launch")
    if envelope.protocol_version != PROTOCOL_VERSION:
        raise ProtocolViolationError("launch", f"protocol version {envelope.protocol_version}")
    channel = Channel(
        connection,
        run_id=envelope.run_id,
        generation=envelope.generation,
        runner_epoch=envelope.runner_epoch,
    )
    channel.request("ready", {"pid": os.getpid()})
    command = receive_command(connection, "the run command")
    if command.command not in _RUN_COMMANDS:
        raise ProtocolViolationError(
            "command", f"expected start, resume or restart, got {command.command.value!r}"
        )
    state = command.payload.get("state")
    return envelope, channel, state if isinstance(state, dict) else None


TELEMETRY_PREFIX = "OTEL_"
"""Variables of the server's environment a runner keeps beside the run's recorded ones."""


def _enter_environment(envelope: LaunchEnvelope) -> Park | None:
    """Phase 3: workflow code, its shell commands and every process it starts see exactly
    the run's recorded variables, in its working directory (``/`` when none was recorded).
    Why the run cannot continue when that directory is gone."""
    if envelope.environment is not None:
        # The server's OpenTelemetry settings are the operator's, not the run's: spans the
        # workflow code makes go where the server sends the run's own (the run's value of
        # one wins, as for a headless agent's PI_* settings).
        telemetry = {k: v for k, v in os.environ.items() if k.startswith(TELEMETRY_PREFIX)}
        os.environ.clear()
        os.environ.update({**telemetry, **envelope.environment})
    directory = envelope.working_directory or "/"
    try:
        os.chdir(directory)
    except OSError as exc:
        return Park(
            LOAD_FAILED,
            one_line(
                f"the run's working directory {directory} cannot be entered"
                f" ({exc.strerror or exc}); create it again, then 'pi-workflows run resume"
                f" {envelope.run_id}'"
            ),
        )
    return None


def _run(connection: Connection, termination: Termination, groups: ProcessGroups) -> None:
    """Phases 2 to 5."""
    envelope, channel, state = _handshake(connection)
    loaded = _enter_environment(envelope) or load_recorded(envelope)
    if isinstance(loaded, Park):
        channel.request("run.park", loaded.payload())
        return
    if state is None:
        state = channel.request("state.get", {})
    view = resolve(channel, convert(state, StateView, "state.get"))
    runtime = Runtime(
        channel=channel,
        workflow=loaded.workflow,
        run_id=envelope.run_id,
        round=view.round,
        input=view.input,
        termination=termination,
        groups=groups,
        validate_seconds=None if envelope.validate_ms is None else envelope.validate_ms / 1000,
        child_specs=dict(loaded.child_specs),
        project_dir=envelope.project_dir,
        depth=view.depth,
        fire_at=view.fire_at,
        trace_id=tracing.trace_id_for(envelope.trace_id, envelope.run_id),
        evidence_dir=envelope.evidence_dir,
    )
    Loop(runtime, view).run()


def _guarded(termination: Termination, groups: ProcessGroups) -> int:
    """Phases 1 to 5, with every ending but SIGTERM turned into an exit code."""
    try:
        fd = take_channel_fd()
        termination.install()
        connection = Connection(open_socket(fd))
        _run(connection, termination, groups)
    except (ClaimLostError, StopCommandError):
        return 0
    except EffectOutcomeUnknownError as exc:
        _warn(str(exc))
        return EFFECT_UNKNOWN_EXIT
    except RunnerError as exc:
        _warn(str(exc))
        return RUNNER_FAILURE_EXIT
    except Exception as exc:  # a runner bug: say so, with the traceback, and stop
        _warn(f"internal error: {type(exc).__name__}: {exc}")
        traceback.print_exc(file=sys.stderr)
        return RUNNER_FAILURE_EXIT
    return 0


def main() -> int:
    """Run one generation and return the exit code (see the module docstring).

    A SIGTERM at any point (even while another ending is handled) lands here: set the
    running attempt's cancellation signal, stop the shell process groups, exit 143.
    """
    termination = Termination()
    groups = ProcessGroups()
    try:
        return _guarded(termination, groups)
    except RunnerTerminated:
        termination.cancel_current()
        groups.stop_all()
        return TERMINATED_EXIT


def run_process() -> None:
    """The ``python -m pi_workflows.runner`` entry: run, flush, exit without waiting for
    threads that workflow code may have left running."""
    become_batch()  # a spawned runner; one forked from the template already is
    code = main()
    tracing.flush()  # spans the workflow code made (only if trace export is on)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
