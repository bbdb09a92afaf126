"""The web page's test parts: a page process started by the real `pi-workflows ui`, and a
real headless Chromium (Debian's `/usr/bin/chromium`) driven by Playwright.

The browser gets a fresh profile directory for every test and the flags that keep it off
the network (no background requests, component updates, sync or QUIC); it reaches only
the page on 127.0.0.1. Screenshots go to the test's temp directory, or to
`$PI_WORKFLOWS_UI_SCREENSHOTS` when set (how docs/images/ui-*.png are made).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from support.server import ServerProcess

CHROMIUM = os.environ.get("PI_WORKFLOWS_TEST_CHROMIUM", "/usr/bin/chromium")

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
]


@dataclass
class PageUrl:
    """The page a `pi-workflows ui` printed."""

    url: str
    """With the secret: `http://127.0.0.1:PORT/auth?key=...`."""
    port: int
    pid: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_page(server: ServerProcess, *args: str) -> PageUrl:
    """Run the real `pi-workflows ui --no-browser` and return the page it printed."""
    done = server.cli("ui", "--no-browser", *args, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    record = json.loads((server.home / "ui.json").read_text())
    server.seen.add(int(record["pid"]))  # teardown kills it if it outlived its server
    port = urlsplit(lines[0]).port
    assert port == record["port"]
    return PageUrl(lines[0], port, int(record["pid"]))


def http_get(
    port: int,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    method: str = "GET",
    body: str | None = None,
) -> tuple[int, dict[str, str], str]:
    """One plain HTTP request to the page (no browser): status, headers, body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        sent = {"Host": f"127.0.0.1:{port}", **(headers or {})}
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        connection.close()


def screenshot_dir(tmp_path: Path) -> Path:
    chosen = os.environ.get("PI_WORKFLOWS_UI_SCREENSHOTS")
    target = Path(chosen) if chosen else tmp_path / "shots"
    target.mkdir(parents=True, exist_ok=True)
    return target


@contextmanager
def chromium_contexts(tmp_path: Path, *options: dict[str, bool]) -> Iterator[list[Any]]:
    """Fresh headless Chromium contexts, one per `options` (`dark`, `javascript`), each a
    browser with its own profile directory; all closed after."""
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists():
        raise AssertionError(
            f"{CHROMIUM} is missing: `make tools` installs Debian's chromium package"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        contexts = []
        try:
            for index, option in enumerate(options):
                dark, javascript = option.get("dark", False), option.get("javascript", True)
                context = playwright.chromium.launch_persistent_context(
                    str(tmp_path / f"chromium-profile-{index}-{dark}-{javascript}"),
                    executable_path=CHROMIUM,
                    headless=True,
                    args=CHROMIUM_ARGS,
                    viewport={"width": 1200, "height": 900},
                    color_scheme="dark" if dark else "light",
                    java_script_enabled=javascript,
                    timeout=60_000,
                )
                context.set_default_timeout(30_000)
                contexts.append(context)
            yield contexts
        finally:
            for context in contexts:
                context.close()


@contextmanager
def chromium(tmp_path: Path, *, dark: bool = False, javascript: bool = True) -> Iterator[Any]:
    """One fresh headless Chromium context (its own profile directory); closed after."""
    with chromium_contexts(tmp_path, {"dark": dark, "javascript": javascript}) as contexts:
        yield contexts[0]
