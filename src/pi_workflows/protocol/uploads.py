"""Inputs larger than one frame: the bound they are held to and the slices they travel in.

Owns the numbers both ends of an upload agree on (docs/protocol.md, "Large inputs"): a run's
input may be as large as the bound on a run's whole state, `MAX_RUN_STATE_BYTES` (16 MiB of
canonical JSON), although one frame is at most 1 MiB; a client sends an input over
`INLINE_INPUT_BYTES` with `upload.put`, `UPLOAD_CHUNK_BYTES` raw bytes per request (base64
keeps each well under a frame), and `run.start` names it by digest. Also the one-line
refusal of an input over the bound, the same from the clients and the server. No I/O.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "INLINE_INPUT_BYTES",
    "MAX_INPUT_BYTES",
    "MAX_RUN_STATE_BYTES",
    "UPLOAD_CHUNK_BYTES",
    "input_too_large",
]

MAX_RUN_STATE_BYTES: Final = 16 * 1024 * 1024
"""Largest total canonical JSON of a run's state: its input plus the latest output of every
node in the current round (the runner fails a node whose output would cross it)."""

MAX_INPUT_BYTES: Final = MAX_RUN_STATE_BYTES
"""Largest canonical JSON of a run's input: the whole state bound."""

INLINE_INPUT_BYTES: Final = 512 * 1024
"""Largest canonical JSON of an input a client sends inline in `run.start`; a larger one is
uploaded first."""

UPLOAD_CHUNK_BYTES: Final = 512 * 1024
"""Raw bytes per `upload.put` (about 683 KiB once base64-encoded, inside one frame)."""


def input_too_large(size: int) -> str:
    """The refusal of an input of `size` bytes of canonical JSON, naming the real bound."""
    return (
        f"the input is {size} bytes of JSON; the limit is 16 MiB ({MAX_INPUT_BYTES} bytes of"
        " canonical JSON, the bound on a run's whole state): pass a smaller input, or a path"
        " the workflow reads"
    )
