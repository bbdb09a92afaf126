"""The page's commands: what a person does to a run, an effect or a schedule.

Runs in the page process. Every action is one receipted command of the server, the same
the CLI sends (`run.pause`, `checkpoint.answer`, ...), with the page's client id and an
idempotency key the form carries (made in the browser when the form is sent, so sending
the same form again is adopted, not done twice; made here when a browser sends none). The
guard (`guard.py`) has already checked the cookie, the Origin and the CSRF token. A
command that succeeds answers `303 See Other` to the page that shows its result; a refusal
shows the page again with the server's one line, and changes nothing.

A checkpoint answer is read from the form built from the request's answer schema
(`forms.py`) and sent as `pi-workflows checkpoint answer` sends it: the server's runner
checks the schema and the workflow's `validate`, and a rejection shows the workflow's
message above the form with what was typed, the question still open. When another seat
answered first, the page says who and what (from the run's history).
"""

from __future__ import annotations

import contextlib
import re
import uuid
from typing import Any, Final

from aiohttp import web

from pi_workflows.client import ClientError, ConflictError, RejectedError
from pi_workflows.web import forms
from pi_workflows.web.context import CONTEXT, PageContext
from pi_workflows.web.pages import problem_page, run_page, status_of
from pi_workflows.web.render import compact
from pi_workflows.web.run_page import FormState, last_answer

__all__ = [
    "answer",
    "cancel",
    "change_settings",
    "decide",
    "fork",
    "pause",
    "queue_follow_up",
    "remove_follow_up",
    "resolve_effect",
    "restart",
    "resume",
    "schedule_action",
    "upgrade",
]

_KEY: Final = re.compile(r"[A-Za-z0-9._:-]{8,128}")
ANSWER_WAIT_SECONDS: Final = 60.0
"""How long an answer's page waits for its validation before it says "still validating"."""


def _key(form: Any) -> str:
    """The form's idempotency key (`web-` plus what the browser made), or a new one."""
    given = str(form.get("key", ""))
    return f"web-{given}" if _KEY.fullmatch(given) else f"web-{uuid.uuid4()}"


def _done(path: str, what: str) -> web.HTTPSeeOther:
    return web.HTTPSeeOther(f"{path}?done={what}")


async def _refused(
    request: web.Request, exc: ClientError, *, state: FormState | None = None
) -> web.Response:
    status = 409 if isinstance(exc, RejectedError | ConflictError) else status_of(exc)
    if state is not None and exc.code == "validationRejected":  # shown above the form
        return await run_page(request, state=state, status=422)
    return await run_page(request, state=state, problem=exc.message, status=status)


async def _run_command(request: web.Request, operation: str, payload: dict[str, Any]) -> Any:
    ctx = request.app[CONTEXT]
    run_id = request.match_info["run_id"]
    form = await request.post()
    async with ctx.clients.commander() as client:
        return await client.call(operation, payload, run_id=run_id, idempotency_key=_key(form))


async def _simple(request: web.Request, operation: str, done: str) -> web.StreamResponse:
    form = await request.post()
    payload: dict[str, Any] = {}
    reason = str(form.get("reason", "")).strip()
    if reason:
        payload["reason"] = reason[:1000]
    try:
        await _run_command(request, operation, payload)
    except ClientError as exc:
        return await _refused(request, exc)
    raise _done(f"/runs/{request.match_info['run_id']}", done)


async def pause(request: web.Request) -> web.StreamResponse:
    """`POST /runs/{run_id}/pause` (`run.pause`)."""
    return await _simple(request, "run.pause", "paused")


async def resume(request: web.Request) -> web.StreamResponse:
    """`POST /runs/{run_id}/resume` (`run.resume`)."""
    return await _simple(request, "run.resume", "resumed")


async def cancel(request: web.Request) -> web.StreamResponse:
    """`POST /runs/{run_id}/cancel` with an optional `reason` (`run.cancel`)."""
    return await _simple(request, "run.cancel", "cancelled")


async def restart(request: web.Request) -> web.StreamResponse:
    """`POST /runs/{run_id}/restart` (`run.restart`)."""
    return await _simple(request, "run.restart", "restarted")


async def upgrade(request: web.Request) -> web.StreamResponse:
    """`POST /runs/{run_id}/upgrade`: carry out the upgrade whose dry run the page showed."""
    return await _simple(request, "run.upgrade", "upgraded")


async def change_settings(request: web.Request) -> web.StreamResponse:
    """`POST /runs/{run_id}/settings` with `patch` (an RFC 6902 JSON Patch, a JSON array) and
    `expect` (the change number the page showed): `run.changeSettings` as the person, as
    `pi-workflows run settings RUN --patch JSON --expect-change N` sends it. A patch that
    is not a JSON array is refused here; the server refuses a bad patch, a result its schema
    rejects, or a change made meanwhile, and the page shows its one line."""
    form = await request.post()
    text = str(form.get("patch", "")).strip()
    try:
        patch = forms.value_from([forms.Field("patch", "The JSON Patch", "json")], {"patch": text})
    except forms.FormError as exc:
        return await run_page(request, problem=f"{exc.message}; nothing was changed", status=422)
    if not isinstance(patch, list):
        return await run_page(
            request,
            problem='a JSON Patch is a JSON array of operations, e.g. [{"op": "replace",'
            ' "path": "/depth", "value": 2}]; nothing was changed',
            status=422,
        )
    payload: dict[str, Any] = {"patch": patch}
    expect = str(form.get("expect", "")).strip()
    if expect.isdigit():
        payload["expectChange"] = int(expect)
    try:
        await _run_command(request, "run.changeSettings", payload)
    except ClientError as exc:
        return await _refused(request, exc)
    raise _done(f"/runs/{request.match_info['run_id']}", "settings")


async def queue_follow_up(request: web.Request) -> web.StreamResponse:
    """`POST /runs/{run_id}/follow-ups` with `text` (`run.followUp`): queue a follow-up
    prompt for the run's origin session; the server refuses an empty or too long text, a
    run that ended or has no origin session, or one too many, and the page shows its line."""
    form = await request.post()
    text = str(form.get("text", ""))
    if not text.strip():
        return await run_page(
            request, problem="a follow-up needs a prompt: type one; nothing was queued", status=422
        )
    try:
        await _run_command(request, "run.followUp", {"text": text})
    except ClientError as exc:
        return await _refused(request, exc)
    raise _done(f"/runs/{request.match_info['run_id']}", "followUp")


async def remove_follow_up(request: web.Request) -> web.StreamResponse:
    """`POST /runs/{run_id}/follow-ups/{follow_up_id}/remove` (`run.removeFollowUp`)."""
    follow_up_id = request.match_info["follow_up_id"]
    try:
        await _run_command(request, "run.removeFollowUp", {"followUpId": follow_up_id})
    except ClientError as exc:
        return await _refused(request, exc)
    raise _done(f"/runs/{request.match_info['run_id']}", "followUpRemoved")


async def fork(request: web.Request) -> web.StreamResponse:
    """`POST /runs/{run_id}/fork` with `node` and an optional `visit` (`run.fork`): the
    new run's page."""
    ctx = request.app[CONTEXT]
    run_id = request.match_info["run_id"]
    form = await request.post()
    payload: dict[str, Any] = {"fromNode": str(form.get("node", ""))[:200]}
    visit = str(form.get("visit", "")).strip()
    if visit:
        if not visit.isdigit() or int(visit) < 1:
            return await run_page(
                request, problem="the visit to fork from is a whole number from 1", status=400
            )
        payload["visit"] = int(visit)
    try:
        async with ctx.clients.commander() as client:
            receipt = await client.call(
                "run.fork", payload, run_id=run_id, idempotency_key=_key(form)
            )
    except ClientError as exc:
        return await _refused(request, exc)
    raise _done(f"/runs/{receipt['runId']}", "forked")


async def _winner(ctx: PageContext, run_id: str) -> str | None:
    """ "Another seat answered first" with who and what, from the run's history."""
    async with ctx.clients.reader() as client:
        view = await client.get_run(run_id)
        revision = int(view.get("revision") or 0)
        history = (
            await client.call(
                "run.history", {"after": max(0, revision - 200), "limit": 1000}, run_id=run_id
            )
        ).get("events", [])
        outputs: dict[str, Any] = {}
        submitted = [e for e in history if e.get("type") == "interaction.submitted"]
        if submitted and submitted[-1].get("nodeId"):
            node = str(submitted[-1]["nodeId"])
            with contextlib.suppress(ClientError):
                outputs[node] = (await client.node_output(run_id, node)).get("output")
    found = last_answer(history, outputs)
    if found is None:
        return None
    what = "" if found.value is None else f": {compact(found.value, 300)}"
    return (
        f"Another seat answered first: {found.kind} {found.node_id} was answered by"
        f" {found.actor}{what}. Your answer was not recorded."
    )


async def _closed(request: web.Request, exc: ClientError) -> web.Response:
    ctx = request.app[CONTEXT]
    try:
        said = await _winner(ctx, request.match_info["run_id"])
    except ClientError:
        said = None
    return await run_page(request, problem=said or exc.message, status=409)


async def answer(request: web.Request) -> web.StreamResponse:
    """`POST /runs/{run_id}/answer`: answer the checkpoint `request` with the form's value
    (`checkpoint.answer`, held until the runner validated it)."""
    ctx = request.app[CONTEXT]
    run_id = request.match_info["run_id"]
    form = await request.post()
    request_id = str(form.get("request", ""))[:200]
    feed = ctx.hub.feed(run_id)
    await feed.current(10.0)
    run = (feed.view or {}).get("run", {})
    waiting = run.get("waitingOn") if isinstance(run.get("waitingOn"), dict) else None
    if waiting is None or waiting.get("requestId") != request_id:
        said = await _winner(ctx, run_id)
        return await run_page(
            request,
            problem=said or f"request {request_id} is no longer open; nothing was sent",
            status=409,
        )
    request_body = waiting.get("request") if isinstance(waiting.get("request"), dict) else {}
    fields = forms.fields_for(request_body.get("answerSchema"))
    typed = {f.name: str(form.get(f.name, "")) for f in fields}
    state = FormState(request_id, typed)
    try:
        value = forms.value_from(fields, typed)
    except forms.FormError as exc:
        state.error = f"{exc.message}; nothing was sent"
        return await run_page(request, state=state, status=422)
    try:
        async with ctx.clients.commander() as client:
            receipt = await client.answer_checkpoint(
                run_id, value, request_id, idempotency_key=_key(form), wait=ANSWER_WAIT_SECONDS
            )
    except ClientError as exc:
        if exc.code == "requestClosed":
            return await _closed(request, exc)
        state.error = exc.message
        return await _refused(request, exc, state=state)
    done = "validating" if receipt.get("status") == "validating" else "answered"
    raise _done(f"/runs/{run_id}", done)


async def decide(request: web.Request) -> web.StreamResponse:
    """`POST /runs/{run_id}/decide`: choose `choice` in the decision `request`
    (`decision.answer`); the first valid answer wins."""
    ctx = request.app[CONTEXT]
    run_id = request.match_info["run_id"]
    form = await request.post()
    request_id = str(form.get("request", ""))[:200] or None
    choice = str(form.get("choice", ""))[:200]
    try:
        async with ctx.clients.commander() as client:
            await client.answer_decision(run_id, choice, request_id, idempotency_key=_key(form))
    except ClientError as exc:
        if exc.code in ("decisionResolved", "requestClosed"):
            return await _closed(request, exc)
        return await _refused(request, exc)
    raise _done(f"/runs/{run_id}", "decided")


async def resolve_effect(request: web.Request) -> web.StreamResponse:
    """`POST /runs/{run_id}/effects/{effect_id}/resolve`: settle an ambiguous effect as `applied`
    (with an optional JSON `result`), `rejected` or `retry` (`effect.resolve`)."""
    ctx = request.app[CONTEXT]
    effect_id = request.match_info["effect_id"]
    form = await request.post()
    run_id = request.match_info["run_id"]
    payload: dict[str, Any] = {"effectId": effect_id, "resolution": str(form.get("resolution", ""))}
    result_text = str(form.get("result", "")).strip()
    reason = str(form.get("reason", "")).strip()
    if reason:
        payload["reason"] = reason[:1000]
    if result_text:
        try:
            payload["result"] = forms.value_from(
                [forms.Field("result", "The result", "json")], {"result": result_text}
            )
        except forms.FormError as exc:
            return await run_page(request, problem=f"{exc.message}; nothing was sent", status=422)
    try:
        async with ctx.clients.commander() as client:
            await client.call("effect.resolve", payload, idempotency_key=_key(form))
    except ClientError as exc:
        return await _refused(request, exc)
    raise _done(f"/runs/{run_id}", "resolved")


async def schedule_action(request: web.Request) -> web.StreamResponse:
    """`POST /schedules/{name}/pause|resume` (`schedule.pause`, `schedule.resume`)."""
    ctx = request.app[CONTEXT]
    name, verb = request.match_info["name"], request.match_info["verb"]
    form = await request.post()
    try:
        async with ctx.clients.commander() as client:
            await client.call(f"schedule.{verb}", {"name": name}, idempotency_key=_key(form))
    except ClientError as exc:
        return problem_page(ctx, f"Schedule {name}", exc.message, status_of(exc))
    raise web.HTTPSeeOther(f"/schedules?done={'resumed' if verb == 'resume' else 'paused'}")
