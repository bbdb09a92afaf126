"""Follow-up prompts on a run: queue one (``run.followUp``), list them (``run.followUps``)
and remove a queued one (``run.removeFollowUp``).

Runs in the server. Each command commits its change with its receipt in one transaction
(``store/follow_ups.py``); the follow-ups themselves reach the run's origin session as
workflow messages, after the run completed and its result was delivered there.
"""

from __future__ import annotations

from typing import Any

from pi_workflows.protocol import Request
from pi_workflows.server.context import ServerContext
from pi_workflows.server.handlers.registry import bad, operation, receipted, run_id_of, text
from pi_workflows.store import follow_ups
from pi_workflows.store.runs import read_run

LIST_TEXT_CHARS = 4096
"""Characters of each follow-up's text ``run.followUps`` carries (``textChars``: all)."""


@operation("run.followUp", command=True)
async def run_follow_up(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{text}``: queue ``text`` (at most 65,536 characters) as the run's next follow-up."""
    run_id = run_id_of(request)
    prompt = request.payload.get("text")
    if not isinstance(prompt, str):
        raise bad("payload field 'text' must be a string")

    def change() -> tuple[str | None, dict[str, Any]]:
        queued, revision = follow_ups.queue(
            server.db, run_id, prompt, created_by=f"client:{request.client_id}"
        )
        return run_id, {**queued.to_json(text_limit=LIST_TEXT_CHARS), "revision": revision}

    return receipted(server, request, change)


@operation("run.followUps")
async def run_follow_ups(server: ServerContext, request: Request) -> dict[str, Any]:
    """The run's follow-ups in queue order: ``{runId, status, followUps: [...]}``."""
    run_id = run_id_of(request)
    with server.db.read() as conn:
        status = read_run(conn, run_id).status.value
        listed = follow_ups.list_of(conn, run_id)
    return {
        "runId": run_id,
        "status": status,
        "followUps": [f.to_json(text_limit=LIST_TEXT_CHARS) for f in listed],
    }


@operation("run.removeFollowUp", command=True)
async def run_remove_follow_up(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{followUpId}``: remove that queued follow-up (of ``runId``, when given)."""
    follow_up_id = text(request.payload, "followUpId")
    assert follow_up_id is not None

    def change() -> tuple[str | None, dict[str, Any]]:
        removed, revision = follow_ups.remove(server.db, follow_up_id, run_id=request.run_id)
        return removed.run_id, {
            "runId": removed.run_id,
            "followUpId": follow_up_id,
            "status": "removed",
            "revision": revision,
        }

    return receipted(server, request, change)
