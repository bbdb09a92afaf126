"""What is known of the channel process and each channel: two small private JSON files.

`<state dir>/channels/process.json` is written by the server (the channel process's pid,
its state, why it last stopped, its restarts); `<state dir>/channels/status.json` by the
channel process (each channel's state and why it fails). One writer per file, each write
whole and atomic (`config.write_private`). Read by `channel list` and `run show`. Never holds
a secret: details are the channel libraries' error lines, which never contain the token
(the channel process says what failed, not the URL it called).

Imports only the standard library and `config`: the server imports this module.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from pi_workflows.channels.config import channels_dir, write_private

__all__ = [
    "PROCESS_NAME",
    "STATUS_NAME",
    "read_process",
    "read_status",
    "write_process",
    "write_status",
]

PROCESS_NAME: Final = "process.json"
STATUS_NAME: Final = "status.json"
_MAX_BYTES: Final = 256 * 1024


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            raw = handle.read(_MAX_BYTES)
        data = json.loads(raw)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_process(home: Path) -> dict[str, Any]:
    """`{state, pid, detail, since, restarts}` of the channel process (`{}`: never started)."""
    return _read(channels_dir(home) / PROCESS_NAME)


def write_process(home: Path, record: dict[str, Any]) -> None:
    """Called by the server only."""
    write_private(channels_dir(home) / PROCESS_NAME, json.dumps(record, sort_keys=True).encode())


def read_status(home: Path) -> dict[str, dict[str, Any]]:
    """Each channel's `{state, detail, at}` as the channel process last said."""
    found = _read(channels_dir(home) / STATUS_NAME).get("channels")
    return found if isinstance(found, dict) else {}


def write_status(home: Path, channels: dict[str, dict[str, Any]]) -> None:
    """Called by the channel process only."""
    data = json.dumps({"channels": channels}, sort_keys=True).encode()
    write_private(channels_dir(home) / STATUS_NAME, data)
