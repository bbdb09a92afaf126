"""The page's live streams: server-sent events fed by the server's pushed views.

Runs in the page process. `/live/runs/{run_id}` sends `sections` events (the run page's
sections, JSON `{name: {key, html}}`) each time the server pushes a new view of the run,
and a `problem` event when the run cannot be followed (removed, unknown). `/live/runs`
sends a `changed` event (the push's number) each time the server pushes the run list:
list pages then fetch their filtered page again. A comment line every
`KEEPALIVE_SECONDS` finds closed connections. At most `MAX_STREAMS` streams at once.
"""

from __future__ import annotations

import json
from typing import Any, Final

from aiohttp import web

from pi_workflows.web.context import CONTEXT

__all__ = ["MAX_STREAMS", "list_stream", "run_stream"]

KEEPALIVE_SECONDS: Final = 15.0
MAX_STREAMS: Final = 64
"""Open event streams one page process keeps (each tab holds one)."""


async def _start(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    await response.write(b"retry: 1000\n\n")
    return response


async def _send(response: web.StreamResponse, event: str, data: Any) -> None:
    payload = json.dumps(data, separators=(",", ":"))
    await response.write(f"event: {event}\ndata: {payload}\n\n".encode())


def _refused() -> web.Response:
    return web.Response(status=503, text="too many open live streams; close a tab")


async def run_stream(request: web.Request) -> web.StreamResponse:
    """`GET /live/runs/{run_id}`: the run page's sections, as the server pushes them."""
    ctx = request.app[CONTEXT]
    if ctx.streams >= MAX_STREAMS:
        return _refused()
    ctx.streams += 1
    response: web.StreamResponse | None = None
    try:
        response = await _start(request)
        with ctx.hub.run_stream(request.match_info["run_id"]) as subscriber:
            while True:
                item = await subscriber.next(KEEPALIVE_SECONDS)
                if item is None:
                    await response.write(b": alive\n\n")
                elif "problem" in item:
                    await _send(response, "problem", item)
                    return response
                else:
                    await _send(response, "sections", item)
    except ConnectionResetError:  # the tab was closed or reloaded
        return response if response is not None else web.Response(status=204)
    finally:
        ctx.streams -= 1


async def list_stream(request: web.Request) -> web.StreamResponse:
    """`GET /live/runs`: a `changed` event for every pushed run list."""
    ctx = request.app[CONTEXT]
    if ctx.streams >= MAX_STREAMS:
        return _refused()
    ctx.streams += 1
    response: web.StreamResponse | None = None
    try:
        response = await _start(request)
        with ctx.hub.list_stream() as subscriber:
            while True:
                item = await subscriber.next(KEEPALIVE_SECONDS)
                if item is None:
                    await response.write(b": alive\n\n")
                else:
                    await _send(response, "changed", item)
    except ConnectionResetError:  # the tab was closed or reloaded
        return response if response is not None else web.Response(status=204)
    finally:
        ctx.streams -= 1
