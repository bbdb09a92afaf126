"""The page's reads: the run list, a run, a node, an upgrade's dry run, the schedules.

Runs in the page process. Each handler reads through the server (never the database) and
renders a template; a read the server refuses becomes the server's one line on the page,
with the HTTP status it means (404 for an unknown run, 503 when the server is gone).
"""

from __future__ import annotations

import time
from typing import Any, Final
from urllib.parse import urlencode

from aiohttp import web

from pi_workflows.client import (
    ClientError,
    ConnectionLostError,
    NotFoundError,
    ServerUnavailableError,
)
from pi_workflows.web.context import CONTEXT, PageContext
from pi_workflows.web.run_page import SECTIONS, FormState, render_sections

__all__ = [
    "PAGE_SIZE",
    "RUN_STATUSES",
    "node_page",
    "problem_page",
    "run_page",
    "runs_fragment",
    "runs_page",
    "schedule_page",
    "schedules_fragment",
    "schedules_page",
    "upgrade_page",
]

PAGE_SIZE: Final = 50
"""Runs per page of the run list."""

NEEDING_SHOWN: Final = 20
"""The runs that need a person the list shows above the others."""

RUN_STATUSES: Final = (
    "queued", "running", "waiting", "paused", "ambiguous",
    "completed", "failed", "timed_out", "cancelled",
)  # fmt: skip

SINCE: Final = (
    ("", "any time"),
    ("1h", "the last hour"),
    ("24h", "the last 24 hours"),
    ("7d", "the last 7 days"),
    ("30d", "the last 30 days"),
)
_SINCE_MS: Final = {"1h": 3_600_000, "24h": 86_400_000, "7d": 604_800_000, "30d": 2_592_000_000}

RUN_WAIT_SECONDS: Final = 10.0
"""How long a run page waits for the server's first view of the run."""


def status_of(exc: ClientError) -> int:
    """The HTTP status a client error means on the page."""
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, ServerUnavailableError | ConnectionLostError):
        return 503
    return 400


def problem_page(ctx: PageContext, heading: str, message: str, status: int) -> web.Response:
    """A page that only says what went wrong (and links back)."""
    return ctx.html("problem.html", status=status, heading=heading, problem=message, nav="")


def _filters(request: web.Request) -> dict[str, Any]:
    query = request.query
    status = query.get("status", "")
    return {
        "status": status if status in RUN_STATUSES else None,
        "workflow": query.get("workflow", "").strip()[:200] or None,
        "since": query.get("since", "") if query.get("since", "") in _SINCE_MS else "",
        "schedule": query.get("schedule", "").strip()[:200] or None,
        "parent": query.get("parent", "").strip()[:200] or None,
        "children": query.get("children") == "1",
        "after": query.get("after", "")[:200] or None,
        "page": int(query["page"]) if query.get("page", "").isdigit() else 1,
    }


def _link(filters: dict[str, Any]) -> Any:
    def link(**changes: Any) -> str:
        merged = {**filters, "after": None, "page": None, **changes}
        query = {
            key: ("1" if value is True else value)
            for key, value in merged.items()
            if value not in (None, "", False) and not (key == "page" and value == 1)
        }
        return "/?" + urlencode(query) if query else "/"

    return link


async def _list_values(ctx: PageContext, request: web.Request) -> dict[str, Any]:
    filters = _filters(request)
    since = _SINCE_MS.get(filters["since"] or "")
    shared = {
        "workflow": filters["workflow"],
        "since": None if since is None else int(time.time() * 1000) - since,
        "schedule": filters["schedule"],
        "children": filters["children"],
        "parent": filters["parent"],
    }
    async with ctx.clients.reader() as client:
        runs, cursor = await client.list_runs_page(
            filters["status"], after=filters["after"], limit=PAGE_SIZE, **shared
        )
        counts = await client.count_runs(**shared)
        needing, more = await client.list_runs_page(needs_person=True, limit=NEEDING_SHOWN)
    ordered = {s: counts[s] for s in RUN_STATUSES if s in counts}
    return {
        "runs": runs,
        "next_cursor": cursor,
        "after": filters["after"],
        "page_number": filters["page"],
        "counts": ordered,
        "total": sum(counts.values()),
        "needing": needing,
        "needing_more": more is not None,
        "filters": filters,
        "link": _link(filters),
        "statuses": RUN_STATUSES,
        "since_choices": SINCE,
        "nav": "runs",
    }


async def runs_page(request: web.Request) -> web.Response:
    """`/`: the run list with its filters, counts, the runs that need a person, a page."""
    ctx = request.app[CONTEXT]
    try:
        values = await _list_values(ctx, request)
    except ClientError as exc:
        return problem_page(ctx, "The runs cannot be listed", exc.message, status_of(exc))
    return ctx.html("runs.html", **values)


async def runs_fragment(request: web.Request) -> web.Response:
    """`/runs/list`: the list's body alone, which the page fetches again on a change."""
    ctx = request.app[CONTEXT]
    try:
        values = await _list_values(ctx, request)
    except ClientError as exc:
        return web.Response(text=exc.message, status=status_of(exc))
    html = ctx.env.get_template("runs_list.html").render(csrf=ctx.csrf, **values)
    return web.Response(text=html, content_type="text/html")


def _notice(request: web.Request) -> str | None:
    return _NOTICES.get(request.query.get("done", ""))


_NOTICES: Final = {
    "paused": "Paused.",
    "resumed": "Resumed.",
    "cancelled": "Cancelled.",
    "restarted": "Restarted: a new round runs from the start.",
    "forked": "Forked: this is the new run.",
    "upgraded": "Upgraded to the workflow's current code.",
    "answered": "Your answer was accepted.",
    "validating": "Your answer is still being validated; this page shows the outcome.",
    "decided": "Your decision was recorded.",
    "resolved": "The effect was resolved.",
    "settings": "The settings were changed; attempts that start from now on see them.",
    "followUp": "The follow-up was queued; it goes to the run's session after it completes.",
    "followUpRemoved": "The follow-up was removed.",
}


async def run_sections(
    ctx: PageContext, run_id: str, state: FormState | None = None
) -> tuple[dict[str, dict[str, str]] | None, str | None]:
    """The run page's sections now (from the run's live feed), or why there are none."""
    feed = ctx.hub.feed(run_id)
    sections = await feed.current(RUN_WAIT_SECONDS)
    if sections is None or feed.view is None:
        return None, feed.problem
    if state is not None:  # after a command: the run as it is now, not the last push
        async with ctx.clients.reader() as client:
            fresh = await client.get_run(run_id)
        view = {**feed.view, "run": fresh}
        sections = await render_sections(ctx, run_id, view, state=state)
    return sections, None


async def run_page(
    request: web.Request,
    *,
    state: FormState | None = None,
    problem: str | None = None,
    status: int = 200,
) -> web.Response:
    """`/runs/{run_id}`: every section of the run, then live updates (`app.js`)."""
    ctx = request.app[CONTEXT]
    run_id = request.match_info["run_id"]
    sections, missing = await run_sections(ctx, run_id, state)
    if sections is None:
        code = 404 if missing and missing.startswith("no run") else 503
        return problem_page(ctx, f"Run {run_id}", missing or "the run cannot be shown", code)
    return ctx.html(
        "run.html",
        status=status,
        run_id=run_id,
        sections=sections,
        order=SECTIONS,
        notice=None if problem else _notice(request),
        problem=problem,
        nav="runs",
    )


async def node_page(request: web.Request) -> web.Response:
    """`/runs/{run_id}/nodes/{node_id}`: the node's output, and its attempts' logs and
    tracebacks."""
    ctx = request.app[CONTEXT]
    run_id, node_id = request.match_info["run_id"], request.match_info["node_id"]
    output: dict[str, Any] | None
    try:
        async with ctx.clients.reader() as client:
            try:
                output = await client.node_output(run_id, node_id)
            except NotFoundError:
                await client.get_run(run_id)  # an unknown run is a 404 of its own
                output = None
            page = await client.call("run.logs", {"nodeId": node_id, "limit": 50}, run_id=run_id)
    except ClientError as exc:
        return problem_page(ctx, f"Node {node_id} of {run_id}", exc.message, status_of(exc))
    return ctx.html(
        "node.html",
        run_id=run_id,
        node_id=node_id,
        output=output,
        logs=page.get("logs", []),
        more_logs=page.get("next") is not None,
        nav="runs",
    )


async def upgrade_page(request: web.Request) -> web.Response:
    """`/runs/{run_id}/upgrade`: the upgrade's dry run, and the button that carries it out."""
    ctx = request.app[CONTEXT]
    run_id = request.match_info["run_id"]
    try:
        async with ctx.clients.reader() as client:
            plan = (await client.upgrade(run_id, dry_run=True)).body
    except ClientError as exc:
        return ctx.html(
            "upgrade.html",
            status=status_of(exc) if status_of(exc) != 400 else 409,
            run_id=run_id,
            plan=None,
            problem=exc.message,
            nav="runs",
        )
    return ctx.html("upgrade.html", run_id=run_id, plan=plan, nav="runs")


async def _schedules(ctx: PageContext) -> list[dict[str, Any]]:
    async with ctx.clients.reader() as client:
        return await client.list_schedules()


async def schedules_page(request: web.Request) -> web.Response:
    """`/schedules`: every schedule, its next and last fire, pause and resume."""
    ctx = request.app[CONTEXT]
    try:
        schedules = await _schedules(ctx)
    except ClientError as exc:
        return problem_page(ctx, "Schedules", exc.message, status_of(exc))
    return ctx.html("schedules.html", schedules=schedules, notice=_notice(request), nav="schedules")


async def schedules_fragment(request: web.Request) -> web.Response:
    """`/schedules/list`: the schedule table alone (fetched again on a change)."""
    ctx = request.app[CONTEXT]
    try:
        schedules = await _schedules(ctx)
    except ClientError as exc:
        return web.Response(text=exc.message, status=status_of(exc))
    html = ctx.env.get_template("schedules_list.html").render(csrf=ctx.csrf, schedules=schedules)
    return web.Response(text=html, content_type="text/html")


async def schedule_page(request: web.Request) -> web.Response:
    """`/schedules/{name}`: one schedule with its newest fires (missed ones included)."""
    ctx = request.app[CONTEXT]
    name = request.match_info["name"]
    try:
        async with ctx.clients.reader() as client:
            found = await client.get_schedule(name, fires=50)
    except ClientError as exc:
        return problem_page(ctx, f"Schedule {name}", exc.message, status_of(exc))
    return ctx.html(
        "schedule.html",
        s=found.get("schedule", {}),
        fires=found.get("fires", []),
        notice=_notice(request),
        nav="schedules",
    )
