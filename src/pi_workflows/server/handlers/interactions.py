"""Answering interactive requests: submissions (validated by a runner), checkpoint answers,
human decisions, progress updates, and the list of open requests.

Runs in the server, which never runs ``validate``: a submission is recorded ``validating``
and its run queued, a supervised runner checks it, and the reply to the submitter is held
until that outcome is durable (at most ``PI_WORKFLOWS_SUBMIT_WAIT_SECONDS``; past that the
answer is ``accepted`` with status ``validating`` and the client asks again with the same
idempotency key). A retry with the same key and payload always gets the submission's
current outcome.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pi_workflows.protocol import Outcome, Request, canonical_json
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError
from pi_workflows.server.handlers.registry import (
    bad,
    limit_of,
    operation,
    receipted,
    run_id_of,
    stored_receipt,
    text,
)
from pi_workflows.store import interaction_writes, interactions, views
from pi_workflows.store.errors import RequestClosedError
from pi_workflows.store.interaction_writes import PROTECTED_DECISION_MESSAGE
from pi_workflows.store.interactions import Interaction
from pi_workflows.store.runs import read_run, write_run

MAX_ANSWER_BYTES = 256 * 1024
"""Largest canonical JSON of a submitted output or answer (as of a node output)."""

MAX_UPDATE_BYTES = 64 * 1024
"""Largest canonical JSON of one ``interaction.update`` body."""

RECHECK_SECONDS = 1.0
"""A held answer reads its submission again at least this often, so a commit that woke no
one (a path that does not name its run) delays its reply by at most this much."""

MODEL_KINDS = frozenset({"agent", "assistant", "checkpoint"})
"""Request kinds ``interaction.submit`` answers (never a decision)."""


CLI_CLIENT_ID = "cli"
"""The client id the `pi-workflows` CLI sends (``cli/options.py``)."""


def _protected(request: Request, run_id: str) -> RequestError:
    """The refusal of a non-person answer to a human decision: the exact sentence the spec
    names, and, for the CLI, the command a person answers it with."""
    message = PROTECTED_DECISION_MESSAGE
    if request.client_id == CLI_CLIENT_ID:
        message += f"; a person answers it with `pi-workflows decision answer {run_id} --choice ID`"
    return RequestError(Outcome.REJECTED.value, "protectedDecision", message)


def _bounded(value: Any, what: str, limit: int) -> None:
    try:
        size = len(canonical_json(value))
    except Exception:  # not JSON: canonical_json names the problem
        raise bad(f"{what} must be a JSON value") from None
    if size > limit:
        raise RequestError(
            Outcome.REJECTED.value,
            "valueTooLarge",
            f"{what} is {size} bytes of JSON; the limit is {limit}",
        )


def _request(server: ServerContext, request_id: str, run_id: str | None) -> Interaction:
    with server.db.read() as conn:
        found = interactions.read_request(conn, request_id)
    if found is None:
        raise RequestError(
            Outcome.NOT_FOUND.value,
            "notFound",
            f"no request {request_id}; see 'pi-workflows interaction list'",
        )
    if run_id is not None and found.run_id != run_id:
        raise bad(f"request {request_id} belongs to run {found.run_id}, not {run_id}")
    return found


def _open_of(server: ServerContext, run_id: str, wanted: str | None) -> Interaction:
    """The request a run-addressed answer means: ``wanted``, or the run's open request."""
    if wanted is not None:
        return _request(server, wanted, run_id)
    with server.db.read() as conn:
        read_run(conn, run_id)
        found = interactions.open_request_of(conn, run_id)
    if found is None:
        raise RequestError(
            Outcome.REJECTED.value, "requestClosed", f"run {run_id} is not waiting on a request"
        )
    return found


async def _submit(
    server: ServerContext, request: Request, target: Interaction, value: Any, kinds: frozenset[str]
) -> dict[str, Any]:
    if target.kind == "decision":
        raise _protected(request, target.run_id)
    _bounded(value, "the output", MAX_ANSWER_BYTES)
    body = stored_receipt(server, request)
    if body is None:

        def change() -> tuple[str | None, dict[str, Any]]:
            submitted = interaction_writes.submit(
                server.db,
                target.request_id,
                value,
                kinds=kinds,
                submitted_by=f"client:{request.client_id}",
            )
            return target.run_id, {
                "runId": target.run_id,
                "requestId": target.request_id,
                "submissionId": submitted.submission_id,
                "revision": submitted.result.revision,
            }

        body = receipted(server, request, change, revision_of=target.run_id)
    return await _outcome(server, body)


async def _outcome(server: ServerContext, body: dict[str, Any]) -> dict[str, Any]:
    """Hold the answer until the submission's validation is durable (bounded).

    It looks again when its run commits a change (``Server.wake`` with the run's id, or a
    change of every run), and at least every ``RECHECK_SECONDS`` whatever was woken.
    """
    submission_id = str(body["submissionId"])
    run_id = str(body["runId"])
    loop = asyncio.get_running_loop()
    until = loop.time() + server.config.submit_wait_seconds
    while True:
        with server.db.read() as conn:
            submission = interactions.read_submission(conn, submission_id)
        assert submission is not None
        left = until - loop.time()
        if submission.status != "validating" or left <= 0:
            break
        if server.stop_requested:
            raise RequestError(
                Outcome.UNAVAILABLE.value,
                "serverStopping",
                "the server is stopping before this submission was validated; send the same"
                " command again (same idempotency key) for its outcome",
            )
        await server.changed(run_id, min(left, RECHECK_SECONDS))
    if submission.status == "rejected":
        raise RequestError(
            Outcome.REJECTED.value,
            _rejection_code(server, submission_id),
            submission.error or "rejected",
            {**{k: v for k, v in body.items() if k != "_adopted"}, "status": "rejected"},
        )
    with server.db.read() as conn:
        revision = read_run(conn, str(body["runId"])).revision
    return {**body, "status": submission.status, "revision": revision}


def _rejection_code(server: ServerContext, submission_id: str) -> str:
    """Why a submission ended rejected, for its submitter: ``validationRejected`` when the
    workflow's ``validate`` refused it (or its validation did not finish) and the request
    waits for a corrected one; ``requestClosed`` when it was turned away because its request
    closed (cancelled, timed out) or its run was paused, so submitting again now is
    pointless (a paused run presents its step again after ``run resume``). Read from the
    stored submission, so every retry of the command hears the same code."""
    with server.db.read() as conn:
        closed = interactions.was_closed(conn, submission_id)
    return "requestClosed" if closed else "validationRejected"


@operation("interaction.submit", command=True)
async def interaction_submit(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{requestId, output}``: submit an agent, assistant-message or checkpoint answer."""
    request_id = text(request.payload, "requestId")
    assert request_id is not None
    if "output" not in request.payload:
        raise bad("interaction.submit needs payload field 'output'")
    target = _request(server, request_id, request.run_id)
    return await _submit(server, request, target, request.payload["output"], MODEL_KINDS)


@operation("checkpoint.answer", command=True)
async def checkpoint_answer(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{value, requestId?}``: answer the run's checkpoint (validated like a submission)."""
    run_id = run_id_of(request)
    if "value" not in request.payload:
        raise bad("checkpoint.answer needs payload field 'value'")
    stored = stored_receipt(server, request)
    if stored is not None:  # a retry: the submission's outcome, whatever the run does now
        return await _outcome(server, stored)
    target = _open_of(server, run_id, text(request.payload, "requestId", required=False))
    if target.kind == "decision":
        raise _protected(request, run_id)
    return await _submit(
        server, request, target, request.payload["value"], frozenset({"checkpoint"})
    )


@operation("decision.answer", command=True)
async def decision_answer(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{choice, requestId?}``: a person's answer to a human decision.

    The first valid answer, the timeout default or a cancellation wins exactly once; a
    later answer is a ``conflict`` (``decisionResolved``) whose receipt names the winner.
    """
    run_id = run_id_of(request)
    choice = text(request.payload, "choice")
    assert choice is not None
    stored = stored_receipt(server, request)
    if stored is not None:
        return stored
    wanted = text(request.payload, "requestId", required=False)
    if wanted is None:
        with server.db.read() as conn:
            read_run(conn, run_id)
            wanted = interactions.latest_decision_of(conn, run_id)
        if wanted is None:
            raise RequestError(
                Outcome.REJECTED.value,
                "requestClosed",
                f"run {run_id} is not waiting on a decision",
            )
    target = _request(server, wanted, run_id)

    def change() -> tuple[str | None, dict[str, Any]]:
        result = interaction_writes.answer_decision(
            server.db, target.request_id, choice, answered_by=f"client:{request.client_id}"
        )
        return run_id, {
            "runId": run_id,
            "requestId": target.request_id,
            "choice": choice,
            "revision": result.revision,
        }

    return receipted(server, request, change)


@operation("interaction.update", command=True)
async def interaction_update(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{requestId, body}``: progress on an open step, recorded as the run's event."""
    request_id = text(request.payload, "requestId")
    assert request_id is not None
    body = request.payload.get("body")
    _bounded(body, "the update", MAX_UPDATE_BYTES)
    target = _request(server, request_id, request.run_id)

    def change() -> tuple[str | None, dict[str, Any]]:
        def check(tx: Any, run: Any) -> None:
            current = interactions.read_request(tx.conn, request_id)
            if current is None or current.status not in ("pending", "validating"):
                raise RequestClosedError(request_id, current.status if current else "unknown")

        result = write_run(
            server.db,
            target.run_id,
            name="interactions.update",
            event_type="interaction.update",
            event_data={"requestId": request_id, "body": body},
            claim=None,
            apply=check,
        )
        return target.run_id, {
            "runId": target.run_id,
            "requestId": request_id,
            "revision": result.revision,
        }

    return receipted(server, request, change, revision_of=target.run_id)


@operation("interaction.list")
async def interaction_list(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{sessionId?, limit?}``: open requests, oldest first (of one origin session)."""
    session_id = text(request.payload, "sessionId", required=False)
    limit = limit_of(request.payload, default=200)
    with server.db.read() as conn:
        found = views.list_interactions(conn, session_id, limit)
    return {"interactions": found}
