"""A run's live settings: reading them (``run.settings``) and changing them with an RFC 6902
JSON Patch (``run.changeSettings``).

Runs in the server, which never runs workflow code: the patch is applied and its result
checked against the settings schema of the run's definition snapshot in the store
(``store/settings.py``), in one transaction with the change number, the change's row and
event, and the command's receipt. A change never stops or disturbs a runner (it leaves the
execution revision alone); attempts that start after it see it.
"""

from __future__ import annotations

from typing import Any

from pi_workflows.protocol import Outcome, Request, canonical_json
from pi_workflows.protocol.json_patch import patch_problem
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError
from pi_workflows.server.handlers.registry import bad, operation, receipted, run_id_of
from pi_workflows.store import settings

MAX_PATCH_BYTES = 64 * 1024
"""Largest canonical JSON of one settings patch."""


@operation("run.settings")
async def run_settings(server: ServerContext, request: Request) -> dict[str, Any]:
    """The run's settings: ``{runId, settings, change, declared, changedBy, schema,
    history}`` (``declared`` false and ``settings`` null for a workflow without settings)."""
    run_id = run_id_of(request)
    with server.db.read() as conn:
        view = settings.run_view(conn, run_id, full=True)
    if view is None:
        return {
            "runId": run_id,
            "settings": None,
            "change": 0,
            "declared": False,
            "changedBy": [],
            "schema": None,
            "history": [],
        }
    return {"runId": run_id, **view}


def _patch(payload: dict[str, Any]) -> list[Any]:
    patch = payload.get("patch")
    problem = patch_problem(patch)
    if problem is not None:
        raise bad(f"payload field 'patch': {problem}")
    assert isinstance(patch, list)
    try:
        size = len(canonical_json(patch))
    except Exception:  # not JSON
        raise bad("payload field 'patch' must be JSON") from None
    if size > MAX_PATCH_BYTES:
        raise RequestError(
            Outcome.REJECTED.value,
            "valueTooLarge",
            f"the settings patch is {size} bytes of JSON; the limit is {MAX_PATCH_BYTES}",
        )
    return patch


@operation("run.changeSettings", command=True)
async def run_change_settings(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{patch, expectChange?, changedBy?}``: apply the RFC 6902 ``patch`` to the run's
    settings as the next change (``changedBy``: ``person``, the default, or ``model``, which
    the workflow must allow). ``expectChange`` refuses the change (``settingsConflict``,
    naming the current number) unless the settings are still at that change."""
    run_id = run_id_of(request)
    payload = request.payload
    patch = _patch(payload)
    expect = payload.get("expectChange")
    if expect is not None and (
        not isinstance(expect, int) or isinstance(expect, bool) or expect < 0
    ):
        raise bad("payload field 'expectChange' must be a non-negative integer")
    changed_by = payload.get("changedBy", "person")
    if changed_by not in settings.CHANGERS:
        raise bad("payload field 'changedBy' must be person or model")

    def change() -> tuple[str | None, dict[str, Any]]:
        made = settings.change(
            server.db,
            run_id,
            patch,
            changed_by=changed_by,
            expected_change=expect,
            client_id=request.client_id,
        )
        return run_id, {
            "runId": run_id,
            "change": made.change,
            "settings": made.settings,
            "changedBy": changed_by,
            "revision": made.revision,
        }

    return receipted(server, request, change)
