"""``python -m pi_workflows.runner.template``: the pre-imported process children fork from.

Runs in the template child of the server; never opens the database and never loads
workflow code. It imports the runner and resolver code once, then serves the server over a
``SOCK_SEQPACKET`` control channel (one request per datagram, file descriptors attached):

- ``{"op": "fork", "module": "runner" | "resolve"}`` with three descriptors (the new
  child's channel end, and the write ends of its stdout and stderr pipes): fork; the child
  starts its own session (so it leads its own process group), puts the pipes on fd 1 and 2
  and ``/dev/null`` on fd 0, and runs that module's main as a fresh ``python -m`` child
  would, minus the interpreter start and the imports. The answer ``{"pid": N}`` is sent
  only after the child is in its own session, so the server can signal its group at once.
- ``{"op": "reap", "pid": N}``: the server saw the child exit and has killed what was left
  of its group; reap it and answer ``{"pid": N, "code": C}`` (minus the signal number for
  a child killed by a signal). Children are never reaped before that: while an exited
  child is an unreaped zombie its pid, and so its group id, cannot be reused.

The template is single-threaded, so forking it is safe. It exits when the server closes
the channel (the server is gone: its children are orphans that recovery stops).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

import msgspec

from pi_workflows.protocol import runner as protocol_runner
from pi_workflows.runner import envelope, tracing
from pi_workflows.runner import main as runner_main
from pi_workflows.runner import resolve as resolver_main
from pi_workflows.runner.channel import take_channel_fd
from pi_workflows.runner.limits import CHANNEL_FD_ENV, RUNNER_FAILURE_EXIT
from pi_workflows.runner.scheduling import become_batch

MAX_REQUEST_BYTES = 4096
_ARGV0 = {
    "runner": os.path.join(os.path.dirname(runner_main.__file__), "__main__.py"),
    "resolve": resolver_main.__file__,
}


def _child(control: socket.socket, module: str, fds: list[int], ready: int) -> None:
    """Runs in the forked child: become a fresh runner or resolver, then exit."""
    try:
        control.close()
        os.setsid()
        channel, stdout, stderr = fds
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        for fd in (null, stdout, stderr):
            os.close(fd)
        os.write(ready, b"x")
        os.close(ready)
        os.environ[CHANNEL_FD_ENV] = str(channel)
        sys.argv = [_ARGV0[module]]  # what ``python -m`` would have set
        if module == "runner":
            runner_main.run_process()  # exits
        code = resolver_main.main()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)
    except BaseException:
        os._exit(RUNNER_FAILURE_EXIT)


def _fork(control: socket.socket, module: str, fds: list[int]) -> dict[str, Any]:
    if module not in ("runner", "resolve") or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return {"error": f"cannot fork {module!r} with {len(fds)} descriptors"}
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_read)
        _child(control, module, fds, ready_write)
    os.close(ready_write)
    for fd in fds:
        os.close(fd)
    os.read(ready_read, 1)  # the child is in its own session (or it died trying)
    os.close(ready_read)
    return {"pid": pid}


def _reap(pid: object) -> dict[str, Any]:
    if not isinstance(pid, int):
        return {"error": "reap needs a pid"}
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return {"pid": pid, "code": None}
    return {"pid": pid, "code": os.waitstatus_to_exitcode(status)}


def serve(control: socket.socket) -> int:
    """Say ready (the imports are done), then answer requests until the server closes the
    channel."""
    control.send(json.dumps({"ready": True}).encode())
    while True:
        data, fds, _, _ = socket.recv_fds(control, MAX_REQUEST_BYTES, 3)
        if not data:
            return 0
        try:
            request = json.loads(data)
            op = request.get("op") if isinstance(request, dict) else None
            if op == "fork":
                answer = _fork(control, str(request.get("module")), list(fds))
            elif op == "reap":
                answer = _reap(request.get("pid"))
            else:
                answer = {"error": f"unknown op {op!r}"}
        except (ValueError, OSError) as exc:
            answer = {"error": str(exc)}
        control.send(json.dumps(answer).encode())


def _warm_decoders() -> None:
    """Build msgspec's type information for every wire struct a runner converts, once here
    rather than in every forked child (it evaluates each struct's annotations: about a
    millisecond per child otherwise)."""
    for module in (envelope, protocol_runner):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, msgspec.Struct):
                msgspec.json.Decoder(value)


def main() -> int:
    """The template's entry: warm up, take the control channel and serve it."""
    _warm_decoders()
    tracing.preload()  # the trace modules, only when trace export is on
    become_batch()  # every child forked from here inherits it
    control = socket.socket(fileno=take_channel_fd())
    control.setblocking(True)
    return serve(control)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
