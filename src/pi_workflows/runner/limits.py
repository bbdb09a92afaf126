"""The runner child's fixed bounds: value sizes that must fit a frame, output capture, grace.

Runs in the runner child; never opens the database. One runner-protocol frame is at most
1 MiB (``protocol.MAX_FRAME_BYTES``) and a ``node.finish`` may carry one output up to three
times (the node's output, the run's final output in ``next``, a notify message body), so
every value the runner proposes is bounded well below the frame cap.
"""

from __future__ import annotations

from typing import Final

from pi_workflows.protocol import CHANNEL_FD_ENV as PROTOCOL_CHANNEL_FD_ENV
from pi_workflows.protocol import MAX_RUN_STATE_BYTES as PROTOCOL_MAX_RUN_STATE_BYTES

ENV_PREFIX: Final = "PI_WORKFLOWS_"
"""Every variable with this prefix is removed before workflow code runs."""

CHANNEL_FD_ENV: Final = PROTOCOL_CHANNEL_FD_ENV
"""Names the inherited socket descriptor of the runner and resolver channels."""

MAX_VALUE_BYTES: Final = 256 * 1024
"""Largest canonical JSON of one output, request or effect result the runner proposes."""

MAX_RUN_STATE_BYTES: Final = PROTOCOL_MAX_RUN_STATE_BYTES
"""Largest total canonical JSON of a run's state: its input plus the latest output of every
node in the current round. A node whose output would exceed it fails instead."""

BLOB_CHUNK_BYTES: Final = 512 * 1024
"""Bytes asked for per ``blob.read`` when fetching a value sent by reference."""

MAX_UPDATE_BYTES: Final = 64 * 1024
"""Largest canonical JSON of one ``ctx.publish_update`` value."""

SHELL_CAPTURE_BYTES: Final = 1024 * 1024
"""Bytes of stdout and of stderr kept from one shell command; the rest is dropped."""

SHELL_TEXT_BYTES: Final = 96 * 1024
"""Largest JSON-encoded size of the stdout (and of the stderr) text in a shell output."""

SHELL_KILL_GRACE_SECONDS: Final = 2.0
"""How long a shell command's process group gets between SIGTERM and SIGKILL."""

SHELL_DRAIN_SECONDS: Final = 1.0
"""How long to keep reading a command's pipes after it exited (background holders)."""

ACTION_GRACE_SECONDS: Final = 30.0
"""How long an action body may outlive its deadline before the runner gives up on it.

The server kills the runner a grace period after a node deadline and settles the attempt
and the effect itself; this bound only matters if that never happens.
"""

RUNNER_FAILURE_EXIT: Final = 70
"""Exit code when the child cannot continue (``EX_SOFTWARE``)."""

EFFECT_UNKNOWN_EXIT: Final = 75
"""Exit code when an action body outlived its deadline and its effect was left applying."""

TERMINATED_EXIT: Final = 143
"""Exit code after SIGTERM (128 + 15)."""


def millis(seconds: float | None) -> int | None:
    """A node timeout in whole milliseconds (``None`` stays ``None``), as the snapshot rounds."""
    return None if seconds is None else round(seconds * 1000)
