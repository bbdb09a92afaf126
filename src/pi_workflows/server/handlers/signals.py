"""Sending an event to a run (``run.signal``), the one operation that feeds ``wait_event``.

Runs in the server, which never runs ``validate``. The event is stored with its receipt in
one transaction (``store/signals.py``); when it wakes a wait whose node validates events,
the reply is held until a runner has consumed or refused it (at most
``PI_WORKFLOWS_SUBMIT_WAIT_SECONDS``, as for checkpoint answers), so a refused event is
answered with the node's message. Any other event is answered at once: ``status`` is
``pending`` until a wait takes it.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from pi_workflows.protocol import SIGNAL_NAME_PATTERN, Outcome, Request, canonical_json
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError
from pi_workflows.server.handlers.registry import bad, operation, receipted, run_id_of, text
from pi_workflows.store import signals
from pi_workflows.store.runs import read_run
from pi_workflows.store.states import RunStatus

MAX_SIGNAL_BYTES = 256 * 1024
"""Largest canonical JSON of an event's data (as of a node output or an answer)."""

RECHECK_SECONDS = 1.0
"""A held reply reads its event again at least this often."""

_NAME = re.compile(SIGNAL_NAME_PATTERN)


def _data(payload: dict[str, Any]) -> Any:
    data = payload.get("data")
    try:
        size = len(canonical_json(data))
    except Exception:  # not JSON: canonical_json names the problem
        raise bad("payload field 'data' must be a JSON value") from None
    if size > MAX_SIGNAL_BYTES:
        raise RequestError(
            Outcome.REJECTED.value,
            "valueTooLarge",
            f"the event's data is {size} bytes of JSON; the limit is {MAX_SIGNAL_BYTES}",
        )
    return data


@operation("run.signal", command=True)
async def run_signal(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{name, data?, key?}``: send the event ``name`` to the run; ``key`` is the sender's
    idempotency key (the same key for the same run adopts the first event)."""
    run_id = run_id_of(request)
    name = text(request.payload, "name", limit=128)
    assert name is not None
    if not _NAME.match(name):
        raise bad(
            f"event name {name!r} is malformed: use 1-128 letters, digits and _.:- starting"
            " with a letter"
        )
    data = _data(request.payload)
    key = text(request.payload, "key", required=False)

    def change() -> tuple[str | None, dict[str, Any]]:
        sent = signals.send(
            server.db, run_id, name, data, idempotency_key=key,
            sent_by=f"client:{request.client_id}",
        )  # fmt: skip
        return run_id, {
            "runId": run_id,
            "signalId": sent.signal.signal_id,
            "name": name,
            "seq": sent.signal.seq,
            "woke": sent.woke,
            "held": sent.validates,
            "keyAdopted": sent.adopted,
            "revision": sent.revision,
        }

    body = receipted(server, request, change)
    if body.pop("keyAdopted", False):
        body["_adopted"] = True
    return await _outcome(server, body)


async def _outcome(server: ServerContext, body: dict[str, Any]) -> dict[str, Any]:
    """The event's status; held while a validating wait it woke has yet to take it."""
    signal_id = str(body["signalId"])
    run_id = str(body["runId"])
    loop = asyncio.get_running_loop()
    until = loop.time() + server.config.submit_wait_seconds
    while True:
        with server.db.read() as conn:
            signal = signals.read_signal(conn, signal_id)
            status = read_run(conn, run_id).status
        assert signal is not None
        left = until - loop.time()
        held = body.get("held") and status in (RunStatus.QUEUED, RunStatus.RUNNING)
        if signal.status != "pending" or not held or left <= 0:
            break
        if server.stop_requested:
            raise RequestError(
                Outcome.UNAVAILABLE.value,
                "serverStopping",
                "the server is stopping before the event was validated; send the same command"
                " again (same idempotency key) for its outcome",
            )
        await server.changed(run_id, min(left, RECHECK_SECONDS))
    if signal.status == "rejected":
        raise RequestError(
            Outcome.REJECTED.value,
            "validationRejected",
            signal.error or "rejected",
            {**{k: v for k, v in body.items() if k != "_adopted"}, "status": "rejected"},
        )
    with server.db.read() as conn:
        run = read_run(conn, run_id)
    return {
        **body,
        "status": signal.status,
        "attemptId": signal.attempt_id,
        "runStatus": run.status.value,
        "revision": run.revision,
    }
