"""The effect operations: list the managed effects of runs, show one with the evidence its
runner left (``server/evidence.py``), and resolve an ambiguous one.

Runs in the server.
"""

from __future__ import annotations

from typing import Any

from pi_workflows.protocol import Outcome, Request
from pi_workflows.server import evidence
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError
from pi_workflows.server.handlers.registry import (
    MAX_REASON_CHARS,
    bad,
    limit_of,
    operation,
    receipted,
    stored_receipt,
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


def with_evidence(server: ServerContext, record: dict[str, Any]) -> dict[str, Any]:
    """``record`` (an effect) with ``evidence``: what its runner left on disk about its body
    when the report was lost (``server/evidence.py``); null unless it is ambiguous."""
    found = None
    if record.get("status") == "ambiguous":
        found = evidence.read(
            server.config.home, str(record["runId"]), str(record["effectId"]),
            str(record["effectKey"]),
        )  # fmt: skip
    return {**record, "evidence": found}


@operation("effect.get")
async def effect_get(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{effectId}``: ``{effect}``, the effect as ``effect.list`` gives it, with
    ``evidence`` (``with_evidence``)."""
    effect_id = text(request.payload, "effectId")
    assert effect_id is not None
    with server.db.read() as conn:
        record = effects.effect_record(conn, effect_id)
    return {"effect": with_evidence(server, record)}


def _from_evidence(server: ServerContext, effect_id: str) -> tuple[str, Any, str | None]:
    """The resolution, result and reason that the effect's evidence gives, as a person's
    ``effect resolve --from-evidence`` asks; refused when there is none."""
    with server.db.read() as conn:
        record = effects.effect_record(conn, effect_id)
    if record["status"] != "ambiguous":
        raise RequestError(
            Outcome.REJECTED.value, "invalidTransition",
            f"effect {effect_id} is {record['status']}, not ambiguous: nothing to resolve",
        )  # fmt: skip
    found = with_evidence(server, record)["evidence"]
    if found is None:
        raise RequestError(
            Outcome.REJECTED.value, "noEvidence",
            f"effect {effect_id} has no evidence of its outcome (its runner left none); decide"
            f" with 'pi-workflows effect resolve {effect_id} --applied|--rejected|--retry'",
        )  # fmt: skip
    if found["status"] == "applied":
        return "applied", found.get("result"), None
    return "rejected", None, str(found.get("error") or "rejected, as its evidence says")[:1000]


@operation("effect.resolve", command=True)
async def effect_resolve(server: ServerContext, request: Request) -> dict[str, Any]:
    """An operator settles an ambiguous effect: applied (with result), rejected, or retry;
    or ``{fromEvidence: true}``: as the evidence its runner left says (``_from_evidence``)."""
    effect_id = text(request.payload, "effectId")
    assert effect_id is not None
    from_evidence = request.payload.get("fromEvidence", False)
    if not isinstance(from_evidence, bool):
        raise bad("payload field 'fromEvidence' must be true or false")
    result = request.payload.get("result")
    resolution: str | None
    if from_evidence:
        if any(key in request.payload for key in ("resolution", "result", "reason")):
            raise bad("fromEvidence takes no resolution, result or reason: the evidence gives them")
        stored = stored_receipt(server, request)
        if stored is not None:
            return stored
        resolution, result, reason = _from_evidence(server, effect_id)
    else:
        resolution = text(request.payload, "resolution")
        if resolution not in ("applied", "rejected", "retry"):
            raise bad("payload field 'resolution' must be applied, rejected or retry")
        reason = text(
            request.payload, "reason", required=resolution == "rejected", limit=MAX_REASON_CHARS
        )
    assert resolution is not None
    with server.db.read() as conn:
        effect_run = effects.run_of(conn, effect_id)
    if server.supervisor.handle_of(effect_run) is not None:
        raise RequestError(
            Outcome.REJECTED.value,
            "runnerLive",
            f"run {effect_run} still has a runner; resolve its effects once it has stopped",
        )

    def change() -> tuple[str | None, dict[str, Any]]:
        written = resolve_effect(server.db, effect_id, resolution, result=result, reason=reason)
        return written.run_id, {
            "effectId": effect_id,
            "runId": written.run_id,
            "resolution": resolution,
            "fromEvidence": from_evidence,
            "revision": written.revision,
        }

    body = receipted(server, request, change, revision_of=effect_run)
    evidence.discard(server.config.home, effect_run, effect_id)  # resolved: history now
    return body
