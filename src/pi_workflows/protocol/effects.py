"""Wire contracts of effects and steps that the server and the runner child must share.

Owns the one derivation of an effect key (what ``ctx.effect_key`` is, what the store keys
the effect by, what ``pi-workflows effect list`` shows), the marker an effect result
carries when the node deadline stopped its body, and the placeholder an agent step's
contract names its request by. Pure functions and constants; no I/O.
"""

from __future__ import annotations

from typing import Any, Final

from pi_workflows.protocol.canonical import sha256_hex

__all__ = ["REQUEST_ID_PLACEHOLDER", "TIMED_OUT_RESULT", "effect_key"]

REQUEST_ID_PLACEHOLDER: Final = "<requestId>"
"""Stands for the request id in an agent step's contract text until the server assigns it
(the runner renders the contract before the request exists; the server substitutes it)."""

TIMED_OUT_RESULT: Final[dict[str, Any]] = {"outcome": "timed_out"}
"""The ``result`` of a rejected effect whose body was stopped by its node deadline."""


def effect_key(run_id: str, round_no: int, node_id: str, visit: int, effect_type: str) -> str:
    """The idempotency key of one effect: run, restart round, node, visit and effect type.

    Every attempt of one node visit gets the same key (a crash retry is deduplicated by it);
    a loop's next visit, a restarted round, another node or another effect type gets a new
    one. 36 characters of ``[a-z0-9-]``, accepted by most outside systems as an
    idempotency key.
    """
    text = f"{run_id}\0{round_no}\0{node_id}\0{visit}\0{effect_type}"
    return f"pwf-{sha256_hex(text.encode())[:32]}"
