"""The effect operations: list the managed effects of runs, and resolve an ambiguous one.

Runs in the server.
"""

from __future__ import annotations

from typing import Any

from pi_workflows.protocol import Outcome, Request
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError
from pi_workflows.server.handlers.registry import (
    MAX_REASON_CHARS,
    bad,
    limit_of,
    operation,
    receipted,
    text,
)
from pi_workflows.store import effects
from pi_workflows.store.effect_writes import resolve_effect
from pi_workflows.store.runs import read_run

# --- effects -----------------------------------------------------------------------------


@operation("effect.list")
async def effect_list(server: ServerContext, request: Request) -> dict[str, Any]:
    """Effects of one run, or of all runs, oldest first, a page at a time.

    ``{after?, limit?}``: the page after cursor ``after`` (the ``next`` of the previous
    page), at most ``limit`` (1 to 1000, default 200) effects; ``next`` is null on the last.
    """
    after = request.payload.get("after", 0)
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise bad("payload field 'after' must be a cursor from an earlier page")
    limit = limit_of(request.payload, default=200)
    with server.db.read() as conn:
        if request.run_id:
            read_run(conn, request.run_id)
        page = effects.list_effects(conn, request.run_id, after=after, limit=limit + 1)
    more = len(page) > limit
    page = page[:limit]
    return {"effects": page, "next": page[-1]["cursor"] if more else None}


@operation("effect.resolve", command=True)
async def effect_resolve(server: ServerContext, request: Request) -> dict[str, Any]:
    """An operator settles an ambiguous effect: applied (with result), rejected, or retry."""
    effect_id = text(request.payload, "effectId")
    assert effect_id is not None
    resolution = text(request.payload, "resolution")
    if resolution not in ("applied", "rejected", "retry"):
        raise bad("payload field 'resolution' must be applied, rejected or retry")
    reason = text(
        request.payload, "reason", required=resolution == "rejected", limit=MAX_REASON_CHARS
    )
    with server.db.read() as conn:
        effect_run = effects.run_of(conn, effect_id)
    if server.supervisor.handle_of(effect_run) is not None:
        raise RequestError(
            Outcome.REJECTED.value,
            "runnerLive",
            f"run {effect_run} still has a runner; resolve its effects once it has stopped",
        )

    def change() -> tuple[str | None, dict[str, Any]]:
        result = resolve_effect(
            server.db, effect_id, resolution, result=request.payload.get("result"), reason=reason
        )
        return result.run_id, {
            "effectId": effect_id,
            "runId": result.run_id,
            "resolution": resolution,
            "revision": result.revision,
        }

    return receipted(server, request, change, revision_of=effect_run)
