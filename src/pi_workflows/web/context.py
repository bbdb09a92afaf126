"""What every handler of the page needs, in one object on the aiohttp application.

Runs in the page process. Handlers take `PageContext` from `request.app[CONTEXT]`
instead of importing the application module, so `app.py` can import every handler module
without any of them importing it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jinja2
from aiohttp import web

if TYPE_CHECKING:
    from pi_workflows.web.clients import Clients
    from pi_workflows.web.live import Hub

__all__ = ["CONTEXT", "PageContext"]


@dataclass
class PageContext:
    """The page process's parts: templates, server connections, live views, tokens."""

    env: jinja2.Environment
    clients: Clients
    hub: Hub
    cookie: str
    """The session cookie's expected value."""
    csrf: str
    """The CSRF token every form carries."""
    secret: bytes = field(repr=False)
    port: int = 0
    """The loopback port, known once the listener is bound."""
    server: dict[str, Any] = field(default_factory=dict)
    """The hello of the server the page serves (pid, epoch, version)."""
    streams: int = 0
    """Live event streams open now (`streams.MAX_STREAMS` at most)."""

    def page(self, template: str, **values: Any) -> str:
        """Render a whole page (the base layout gets the CSRF token and the server)."""
        return self.env.get_template(template).render(csrf=self.csrf, server=self.server, **values)

    def html(self, template: str, status: int = 200, **values: Any) -> web.Response:
        """A rendered page as a response."""
        return web.Response(
            text=self.page(template, **values), status=status, content_type="text/html"
        )


CONTEXT = web.AppKey("pi_workflows_ui", PageContext)
