"""``python -m pi_workflows.runner.resolve``: the short-lived resolver child.

Runs in the resolver child; never opens the database. Takes the channel descriptor from
``PI_WORKFLOWS_RUNNER_FD`` (and scrubs every ``PI_WORKFLOWS_*`` variable) exactly like the
runner, reads one plain JSON frame, writes one plain JSON frame (``describe.answer``) and
exits 0. A frame that does not decode is answered ``badRequest``. Exit code 70 only when
there is no usable channel or the answer cannot be written.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import msgspec

from pi_workflows.protocol import FrameTooLarge, ProtocolError
from pi_workflows.runner.channel import Connection, open_socket, take_channel_fd
from pi_workflows.runner.describe import answer, refusal
from pi_workflows.runner.errors import RunnerError
from pi_workflows.runner.limits import RUNNER_FAILURE_EXIT
from pi_workflows.runner.scheduling import become_batch


def _answer_frame(frame: bytes) -> dict[str, Any]:
    try:
        request = msgspec.json.decode(frame)
    except msgspec.DecodeError as exc:
        return refusal("badRequest", f"the request is not JSON: {exc}")
    return answer(request)


def main() -> int:
    """Answer one request; the exit code (0, or 70 without a usable channel)."""
    become_batch()  # a spawned resolver; one forked from the template already is
    try:
        connection = Connection(open_socket(take_channel_fd()))
        try:
            frame = connection.receive("the resolver request")
        except RunnerError as exc:
            connection.send(refusal("badRequest", str(exc)))
            return 0
        reply = _answer_frame(frame)
        try:
            connection.send(reply)
        except FrameTooLarge:
            connection.send(refusal("workflowInvalid", "the workflow description is too large"))
        connection.close()
    except (RunnerError, ProtocolError, OSError) as exc:
        sys.stderr.write(f"pi-workflows resolver: {exc}\n")
        return RUNNER_FAILURE_EXIT
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
