"""The page's aiohttp application: its routes, its guard and its parts.

Runs in the page process. `build` wires the handlers of `pages`, `actions` and `streams`
behind the guard (`guard.py`) and serves `static/` (the stylesheet and the one script,
shipped in the wheel, never from a CDN). Request bodies are bounded (`MAX_BODY_BYTES`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from aiohttp import web

from pi_workflows.web import actions, pages, streams
from pi_workflows.web.context import CONTEXT, PageContext
from pi_workflows.web.guard import guard, security_headers

__all__ = ["MAX_BODY_BYTES", "STATIC_DIR", "build"]

MAX_BODY_BYTES: Final = 1024 * 1024
"""The largest request body the page reads (an answer is at most 256 KiB)."""

STATIC_DIR: Final = Path(__file__).parent / "static"


async def health(request: web.Request) -> web.Response:
    """`GET /health`: 200 while the page serves (`pi-workflows ui` checks it)."""
    return web.Response(text="ok")


def build(ctx: PageContext) -> web.Application:
    """The application for one page process."""
    app = web.Application(middlewares=[security_headers, guard], client_max_size=MAX_BODY_BYTES)
    app[CONTEXT] = ctx
    app.router.add_get("/", pages.runs_page)
    app.router.add_get("/health", health)
    app.router.add_get("/runs/list", pages.runs_fragment)
    app.router.add_get("/live/runs", streams.list_stream)
    app.router.add_get("/live/runs/{run_id}", streams.run_stream)
    app.router.add_get("/runs/{run_id}", pages.run_page)
    app.router.add_get("/runs/{run_id}/nodes/{node_id}", pages.node_page)
    app.router.add_get("/runs/{run_id}/upgrade", pages.upgrade_page)
    app.router.add_post("/runs/{run_id}/pause", actions.pause)
    app.router.add_post("/runs/{run_id}/resume", actions.resume)
    app.router.add_post("/runs/{run_id}/cancel", actions.cancel)
    app.router.add_post("/runs/{run_id}/restart", actions.restart)
    app.router.add_post("/runs/{run_id}/fork", actions.fork)
    app.router.add_post("/runs/{run_id}/settings", actions.change_settings)
    app.router.add_post("/runs/{run_id}/follow-ups", actions.queue_follow_up)
    app.router.add_post("/runs/{run_id}/follow-ups/{follow_up_id}/remove", actions.remove_follow_up)
    app.router.add_post("/runs/{run_id}/upgrade", actions.upgrade)
    app.router.add_post("/runs/{run_id}/answer", actions.answer)
    app.router.add_post("/runs/{run_id}/decide", actions.decide)
    app.router.add_post("/runs/{run_id}/effects/{effect_id}/resolve", actions.resolve_effect)
    app.router.add_get("/schedules", pages.schedules_page)
    app.router.add_get("/schedules/list", pages.schedules_fragment)
    app.router.add_get("/schedules/{name}", pages.schedule_page)
    app.router.add_post("/schedules/{name}/{verb:pause|resume}", actions.schedule_action)
    app.router.add_static("/static/", STATIC_DIR, follow_symlinks=False, show_index=False)
    return app
