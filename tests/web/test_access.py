"""Who may use the page: the secret, the cookie, the Host and Origin checks and the CSRF
token, against the real page process and a real server (plain HTTP, no browser)."""

from __future__ import annotations

import os
import re
import stat
from urllib.parse import urlsplit

import psutil
import pytest

from support.browser import PageUrl, http_get
from support.server import ServerProcess

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def _signed_in(page: PageUrl) -> str:
    """The session cookie the page sets for its printed URL."""
    url = urlsplit(page.url)
    status, headers, _ = http_get(page.port, f"{url.path}?{url.query}")
    assert status == 303
    assert headers["Location"] == "/"
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert "Path=/" in cookie
    return cookie.split(";", 1)[0]


def _waiting_run(server: ServerProcess) -> str:
    run_id = server.start_run("ask")
    server.wait_status(run_id, "waiting")
    return run_id


def _csrf(page: PageUrl, cookie: str, run_id: str) -> str:
    status, _, html = http_get(page.port, f"/runs/{run_id}", headers={"Cookie": cookie})
    assert status == 200
    found = re.search(r'name="csrf-token" content="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def test_without_the_secret_every_request_gets_401_and_no_data(
    server: ServerProcess, page_url: PageUrl
) -> None:
    """No cookie, a wrong cookie or a wrong key: 401, and the body names no run."""
    run_id = _waiting_run(server)
    for path, headers in [
        ("/", {}),
        (f"/runs/{run_id}", {}),
        (f"/live/runs/{run_id}", {}),
        ("/static/app.js", {}),
        ("/", {"Cookie": "pi_workflows_ui=forged"}),
        ("/auth?key=wrong", {}),
    ]:
        status, _, body = http_get(page_url.port, path, headers=headers)
        assert status == 401, path
        assert run_id not in body
        assert "ask" not in body
    cookie = _signed_in(page_url)
    status, _, body = http_get(page_url.port, "/", headers={"Cookie": cookie})
    assert status == 200
    assert run_id in body


def test_the_secret_file_is_the_users_only_and_never_logged(
    server: ServerProcess, page_url: PageUrl
) -> None:
    """`ui-secret` is mode 0600, and neither the page's log nor the server's holds it."""
    secret_file = server.home / "ui-secret"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    _signed_in(page_url)
    key = page_url.url.split("key=", 1)[1]
    for log in (server.home / "logs").iterdir():
        assert key not in log.read_text(errors="replace"), log
    assert key not in server.tail(1000)


def test_a_request_for_another_host_is_refused(server: ServerProcess, page_url: PageUrl) -> None:
    """A page of another name resolving to 127.0.0.1 (DNS rebinding) gets 421 and no data,
    even with the session cookie."""
    run_id = _waiting_run(server)
    cookie = _signed_in(page_url)
    for host in (f"evil.example:{page_url.port}", "127.0.0.1", f"127.0.0.2:{page_url.port}"):
        status, _, body = http_get(page_url.port, "/", headers={"Cookie": cookie, "Host": host})
        assert status == 421, host
        assert run_id not in body


def test_a_cross_origin_post_is_refused_and_changes_nothing(
    server: ServerProcess, page_url: PageUrl
) -> None:
    """A form of another site (another Origin, or none, or no CSRF token) cannot pause a
    run, even when the browser sends the cookie; the page's own form can."""
    run_id = _waiting_run(server)
    cookie = _signed_in(page_url)
    token = _csrf(page_url, cookie, run_id)
    form = {"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"}
    own = f"http://127.0.0.1:{page_url.port}"
    for headers, body in [
        ({**form, "Origin": "http://evil.example"}, f"csrf={token}"),
        ({**form, "Origin": "null"}, f"csrf={token}"),
        (form, f"csrf={token}"),
        ({**form, "Origin": own}, "csrf=forged"),
        ({**form, "Origin": own}, ""),
    ]:
        status, _, _ = http_get(
            page_url.port, f"/runs/{run_id}/pause", headers=headers, method="POST", body=body
        )
        assert status == 403, headers
    assert server.run(run_id)["status"] == "waiting"
    status, headers, _ = http_get(
        page_url.port,
        f"/runs/{run_id}/pause",
        headers={**form, "Origin": own},
        method="POST",
        body=f"csrf={token}&key=0123456789abcdef",
    )
    assert status == 303
    assert headers["Location"] == f"/runs/{run_id}?done=paused"
    view = server.run(run_id)
    assert view["status"] == "paused"
    actors = {row[0] for row in server.query("SELECT client_id FROM server_commands")}
    assert "web:ui" in actors


def test_the_page_listens_on_loopback_only_with_strict_headers(
    server: ServerProcess, page_url: PageUrl
) -> None:
    """Its one listening socket is 127.0.0.1; answers forbid framing and other scripts."""
    listening = [
        c for c in psutil.Process(page_url.pid).net_connections("inet")
        if c.status == psutil.CONN_LISTEN
    ]  # fmt: skip
    assert [c.laddr.ip for c in listening] == ["127.0.0.1"]
    cookie = _signed_in(page_url)
    _, headers, _ = http_get(page_url.port, "/", headers={"Cookie": cookie})
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert headers["Referrer-Policy"] == "same-origin"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert os.getuid() == psutil.Process(page_url.pid).uids().real
