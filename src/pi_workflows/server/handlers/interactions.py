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
from pi_workflows.store import interaction_writes, interactions, tree_requests, views
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

MAX_PERSON_CHARS = 200
"""Longest ``person`` of a decision answer (who answered on a channel)."""

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


def _for_person(run_id: str) -> RequestError:
    """The refusal of ``interaction.submit`` (the model's way to answer a step) for a
    checkpoint only a person answers, naming how a person does."""
    return RequestError(
        Outcome.REJECTED.value,
        "forPerson",
        f"this checkpoint of run {run_id} is for a person, not the model: a person answers it"
        f" with /workflow answer {run_id} in Pi or pi-workflows checkpoint answer {run_id}"
        " --value JSON",
    )


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
    """The request ``request_id``, of run ``run_id`` or of a run below it (an answer sent
    to a parent for its child's question)."""
    with server.db.read() as conn:
        found = interactions.read_request(conn, request_id)
        below = (
            found is not None
            and run_id is not None
            and found.run_id != run_id
            and tree_requests.is_below(conn, run_id, found.run_id)
        )
    if found is None:
        raise RequestError(
            Outcome.NOT_FOUND.value,
            "notFound",
            f"no request {request_id}; see 'pi-workflows interaction list'",
        )
    if run_id is not None and found.run_id != run_id and not below:
        raise bad(f"request {request_id} belongs to run {found.run_id}, not {run_id}")
    return found


_KIND_NAMES = {"checkpoint": "a checkpoint", "decision": "a decision"}


def _describe(found: Interaction) -> str:
    return f"run {found.run_id} (node {found.node_id!r}, {found.kind})"


def _open_of(
    server: ServerContext, run_id: str, wanted: str | None, kind: str, child: str | None
) -> Interaction:
    """The request a run-addressed answer of ``kind`` (checkpoint or decision) means:
    ``wanted``; else the open request of ``child`` (a run below ``run_id``); else the
    run's own open request; else, when the run waits on its children, the one open
    request of that kind below it. Several, none, or one of another kind below it is
    refused with one line naming each child run (``--child RUN`` picks one)."""
    if wanted is not None:
        return _request(server, wanted, run_id)
    with server.db.read() as conn:
        read_run(conn, run_id)
        if child is not None and child != run_id:
            read_run(conn, child)
            if not tree_requests.is_below(conn, run_id, child):
                raise bad(f"run {child} is not a child run of {run_id} (nor below one)")
        asked = child or run_id
        found = interactions.open_request_of(conn, asked)
        below = (
            [] if found is not None or child is not None else tree_requests.open_below(conn, run_id)
        )
    if found is not None:
        return found
    if child is not None:
        raise RequestError(
            Outcome.REJECTED.value,
            "requestClosed",
            f"child run {child} of run {run_id} is not waiting on a request",
        )
    matching = [q for q in below if q.kind == kind]
    if len(matching) == 1:
        return matching[0]
    what = _KIND_NAMES.get(kind, kind)
    listed = {"children": [{"runId": q.run_id, "nodeId": q.node_id, "kind": q.kind,
                            "requestId": q.request_id} for q in below]}  # fmt: skip
    if matching:
        raise RequestError(
            Outcome.REJECTED.value,
            "childAmbiguous",
            f"run {run_id} waits on {len(matching)} child runs for {what}: "
            + ", ".join(_describe(q) for q in matching)
            + "; answer one with --child RUN (childRunId)",
            listed,
        )
    if below:
        other = below[0]
        raise RequestError(
            Outcome.REJECTED.value,
            "requestClosed",
            f"run {run_id} is not waiting on {what}: its child {_describe(other)} waits on"
            f" {_KIND_NAMES.get(other.kind, 'a ' + other.kind + ' step')}; answer it there",
            listed,
        )
    raise RequestError(
        Outcome.REJECTED.value,
        "requestClosed",
        f"run {run_id} is not waiting on a request, nor is any run below it",
    )


async def _submit(
    server: ServerContext,
    request: Request,
    target: Interaction,
    value: Any,
    kinds: frozenset[str],
    via: str | None = None,
) -> dict[str, Any]:
    """Submit ``value`` to ``target``; ``via`` is the run the answer was addressed to when
    that is a run above the target's (the receipt names both)."""
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
                **({} if via is None or via == target.run_id else {"via": via}),
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
    if target.for_person and target.kind != "decision":
        raise _for_person(target.run_id)
    return await _submit(server, request, target, request.payload["output"], MODEL_KINDS)


@operation("checkpoint.answer", command=True)
async def checkpoint_answer(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{value, requestId?, childRunId?}``: answer the run's checkpoint (validated like a
    submission); a run waiting on its children: the one child's checkpoint (``childRunId``
    picks one of several)."""
    run_id = run_id_of(request)
    if "value" not in request.payload:
        raise bad("checkpoint.answer needs payload field 'value'")
    stored = stored_receipt(server, request)
    if stored is not None:  # a retry: the submission's outcome, whatever the run does now
        return await _outcome(server, stored)
    target = _open_of(
        server,
        run_id,
        text(request.payload, "requestId", required=False),
        "checkpoint",
        text(request.payload, "childRunId", required=False),
    )
    if target.kind == "decision":
        raise _protected(request, target.run_id)
    return await _submit(
        server, request, target, request.payload["value"], frozenset({"checkpoint"}), run_id
    )


@operation("decision.answer", command=True)
async def decision_answer(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{choice, requestId?, childRunId?, person?}``: a person's answer to a human decision
    (of the run, or of the one child run below it that waits on one; ``childRunId`` picks).

    The first valid answer, the timeout default or a cancellation wins exactly once; a
    later answer is a ``conflict`` (``decisionResolved``) whose receipt names the winner.
    ``person`` says who answered on the seat (a channel's ``telegram user 42``); the
    resolution and the history name it after the seat's client id.
    """
    run_id = run_id_of(request)
    choice = text(request.payload, "choice")
    assert choice is not None
    person = text(request.payload, "person", required=False, limit=MAX_PERSON_CHARS)
    answered_by = f"client:{request.client_id}" + (f" ({person})" if person else "")
    stored = stored_receipt(server, request)
    if stored is not None:
        return stored
    wanted = text(request.payload, "requestId", required=False)
    child = text(request.payload, "childRunId", required=False)
    if wanted is None and child is not None:
        wanted = _open_of(server, run_id, None, "decision", child).request_id
    elif wanted is None:
        with server.db.read() as conn:
            read_run(conn, run_id)
            waits_below = interactions.open_request_of(conn, run_id) is None and bool(
                tree_requests.open_below(conn, run_id, 1)
            )
            # The run's open decision, else its latest (a late answer learns the winner).
            wanted = None if waits_below else interactions.latest_decision_of(conn, run_id)
        if waits_below:  # a parent waiting on its children: the decision one of them asks
            wanted = _open_of(server, run_id, None, "decision", None).request_id
        if wanted is None:
            raise RequestError(
                Outcome.REJECTED.value,
                "requestClosed",
                f"run {run_id} is not waiting on a decision",
            )
    target = _request(server, wanted, run_id)
    if target.kind != "decision":
        raise RequestError(
            Outcome.REJECTED.value,
            "requestClosed",
            f"{_describe(target)} waits on {_KIND_NAMES.get(target.kind, target.kind)}, not a"
            f" decision; answer it with `pi-workflows checkpoint answer {target.run_id}`",
        )

    def change() -> tuple[str | None, dict[str, Any]]:
        result = interaction_writes.answer_decision(
            server.db, target.request_id, choice, answered_by=answered_by, person=person
        )
        return target.run_id, {
            "runId": target.run_id,
            "requestId": target.request_id,
            "choice": choice,
            "revision": result.revision,
            **({} if target.run_id == run_id else {"via": run_id}),
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
