"""Values out of a running run: ``run.value`` reads what its callbacks published with
``ctx.publish``, waiting for the key to appear when asked to.

Runs in the server. A read: no receipt, no idempotency key. A wait never polls the
database on a timer: it reads once, then sleeps on the run's change notification
(``ServerContext.changed``, set by every commit of the run, a publish included) and reads
again only after one, for at most ``MAX_HOLD_MS`` per request (a client that wants longer
asks again; ``Client.get_value`` does).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from pi_workflows.protocol import Outcome, Request
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError
from pi_workflows.server.handlers.registry import bad, operation, run_id_of
from pi_workflows.store import published
from pi_workflows.store.runs import read_run
from pi_workflows.store.states import TERMINAL_STATUSES

MAX_HOLD_MS: Final = 20_000
"""Longest a ``run.value`` request is held waiting for its key (below the clients' 30 s
reply timeout)."""


def _wait_ms(payload: dict[str, Any]) -> int:
    wait = payload.get("waitMs", 0)
    if not isinstance(wait, int) or isinstance(wait, bool) or not 0 <= wait <= MAX_HOLD_MS:
        raise bad(f"payload field 'waitMs' must be an integer from 0 to {MAX_HOLD_MS}")
    return wait


@operation("run.value")
async def run_value(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{key, waitMs?}``: ``{runId, key, value, version, attemptId, nodeId, publishedAt,
    runStatus, revision}`` of the run's latest value of ``key``; held up to ``waitMs``
    while the run may still publish it; ``notFound`` (code ``valueNotPublished``) when it
    was not published by then, ``notFound`` (``runNotFound``) for an unknown run."""
    run_id = run_id_of(request)
    key = request.payload.get("key")
    problem = published.key_problem(key)
    if problem is not None:
        raise bad(problem)
    assert isinstance(key, str)
    loop = asyncio.get_running_loop()
    until = loop.time() + _wait_ms(request.payload) / 1000
    while True:
        with server.db.read() as conn:
            found = published.read(conn, run_id, key)
            run = read_run(conn, run_id)
        if found is not None:
            return {**found.to_json(), "runStatus": run.status.value, "revision": run.revision}
        ended = run.status in TERMINAL_STATUSES
        left = until - loop.time()
        if ended or left <= 0 or server.stop_requested:
            why = f"the run ended {run.status.value}" if ended else "not yet"
            raise RequestError(
                Outcome.NOT_FOUND.value,
                "valueNotPublished",
                f"run {run_id} has published no value {key!r} ({why}); see what it published"
                f" with `pi-workflows run show {run_id}`",
                {"runId": run_id, "key": key, "runStatus": run.status.value},
            )
        await server.changed(run_id, left)
