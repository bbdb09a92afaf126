"""The page process's life: `pi-workflows ui` starts it once, finds it again, moves it to
another port, starts the server when none runs, and the page ends with its server."""

from __future__ import annotations

import json
import socket

import psutil
import pytest

from support.browser import http_get, start_page
from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_ui_prints_one_line_and_finds_the_same_page_again(server: ServerProcess) -> None:
    """A second `ui` reuses the page process the first one started (same pid, port)."""
    first = start_page(server)
    again = start_page(server)
    assert (again.pid, again.port) == (first.pid, first.port)
    assert again.url == first.url
    assert first.url.startswith(f"http://127.0.0.1:{first.port}/auth?key=")
    status, _, _ = http_get(first.port, "/health")
    assert status == 401, "the health check too needs the cookie"


def test_ui_port_moves_the_page_to_that_port(server: ServerProcess) -> None:
    """`ui --port N` with a page on another port stops that one and serves on N."""
    first = start_page(server)
    port = _free_port()
    moved = start_page(server, "--port", str(port))
    assert moved.port == port
    assert moved.pid != first.pid
    wait_for(lambda: _gone(first.pid), 10, "the old page to end")


def test_a_taken_port_is_one_clear_line(server: ServerProcess) -> None:
    """`ui --port N` on a port another program holds fails with one line and exit 1."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = server.cli("ui", "--no-browser", "--port", str(port), timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith(f"pi-workflows: error: port {port} on 127.0.0.1 is in use")
    assert len(done.stderr.splitlines()) == 1


def test_the_page_ends_when_its_server_stops(server: ServerProcess) -> None:
    """`server stop` ends the page process too, and it removes its record."""
    page = start_page(server)
    done = server.cli("server", "stop", timeout=60)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: _gone(page.pid), 20, "the page process to end with its server")
    assert not (server.home / "ui.json").exists()


def test_ui_starts_the_server_when_none_runs(server: ServerProcess) -> None:
    """With no server, `ui` starts one (as every command does) and a page for it."""
    server.stop()
    page = start_page(server)
    record = json.loads((server.home / "ui.json").read_text())
    assert psutil.pid_exists(record["serverPid"])
    server.seen.add(record["serverPid"])
    assert page.port == record["port"]
    with server.client() as client:
        assert client.status()["pid"] == record["serverPid"]
