"""Who may use the page, and how: the middleware every request goes through first.

Runs in the page process. In order, for every request:

1. **Host** must be `127.0.0.1:<port>` or `localhost:<port>` (the page listens on
   loopback only). Anything else is refused with 421 and no data: a page of another site
   whose name was made to resolve to 127.0.0.1 (DNS rebinding) cannot read it.
2. **The secret.** `/auth?key=SECRET` (the URL `pi-workflows ui` prints) checks the secret
   and sets the session cookie (HttpOnly, SameSite=Strict, Path=/), then sends the browser
   to `/` so the secret leaves the address bar. Every other request without that cookie
   gets 401 and no data.
3. **State changes** (every method but GET and HEAD) also need an `Origin` of the page
   itself (a form of another site, even one the browser sends the cookie with, is refused
   with 403) and the CSRF token (form field `csrf` or header `X-CSRF-Token`).

Every response carries a strict Content Security Policy (scripts and styles from the page
itself only, no frames), `Referrer-Policy: same-origin` (no address, so no secret, ever
goes to another site; with `no-referrer` a browser sends `Origin: null` on the page's own
forms), `nosniff` and `no-store`. No request line is logged (the `/auth` one would hold
the secret).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web

from pi_workflows.web.access import matches, secret_text
from pi_workflows.web.context import CONTEXT
from pi_workflows.web.launcher import COOKIE_NAME

__all__ = ["guard", "security_headers"]

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_SAFE_METHODS: Final = frozenset({"GET", "HEAD"})

HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}

_DENIED: Final = (
    "<!doctype html><html lang=en><meta charset=utf-8><title>Sign in</title>"
    "<h1>Not signed in</h1><p>Open the address that <code>pi-workflows ui</code> prints.</p>"
)


def _plain(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text, content_type="text/plain")


def _hosts(port: int) -> frozenset[str]:
    return frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Add the page's security headers to every answer (errors and redirects included)."""
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        response = exc
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    if isinstance(response, web.HTTPException):
        raise response
    return response


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse what is not the page's own browser (see the module's steps)."""
    ctx = request.app[CONTEXT]
    host = request.headers.get("Host", "")
    if host not in _hosts(ctx.port):
        log.warning("refused a request for another host (%d characters)", len(host))
        return _plain(421, "misdirected request: this page answers only 127.0.0.1 and localhost")
    if request.path == "/auth" and request.method in _SAFE_METHODS:
        if not matches(request.query.get("key"), secret_text(ctx.secret)):
            return web.Response(status=401, text=_DENIED, content_type="text/html")
        response = web.HTTPSeeOther("/")
        response.set_cookie(
            COOKIE_NAME, ctx.cookie, httponly=True, samesite="Strict", path="/", max_age=None
        )
        raise response
    if not matches(request.cookies.get(COOKIE_NAME), ctx.cookie):
        return web.Response(status=401, text=_DENIED, content_type="text/html")
    if request.method not in _SAFE_METHODS:
        origin = request.headers.get("Origin")
        if origin is None or origin.removeprefix("http://") not in _hosts(ctx.port):
            log.warning("refused a %s from another origin", request.method)
            return _plain(403, "refused: this request did not come from the page itself")
        form = await request.post() if request.content_type.endswith("form-urlencoded") else {}
        token = request.headers.get("X-CSRF-Token") or str(form.get("csrf", ""))
        if not matches(token, ctx.csrf):
            return _plain(403, "refused: the form is missing its token; reload the page")
    return await handler(request)
